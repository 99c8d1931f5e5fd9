"""Mesh sizing and the optimizer's weight-decay mask and schedule."""
import jax
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx

from poi_jax.models import encoders
from poi_jax.train import mesh as mesh_lib
from poi_jax.train import optim


def _mesh(data, fsdp, tensor):
  return ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor))


@pytest.mark.parametrize("sizes,n,expected", [((-1, 1, 1), 8, (8, 1, 1)), ((2, -1, 1), 8, (2, 4, 1)),
                                              ((2, 2, 2), 8, (2, 2, 2)), ((1, 1, 1), 1, (1, 1, 1))])
def test_mesh_shape(sizes, n, expected):
  assert mesh_lib.mesh_shape(_mesh(*sizes), n) == expected


@pytest.mark.parametrize("sizes,n,msg", [((2, 2, 1), 8, "= 4 devices, but 8 are available"),
                                         ((-1, -1, 1), 8, "at most one axis"),
                                         ((3, -1, 1), 8, "not divisible")])
def test_bad_mesh_is_a_clear_error(sizes, n, msg):
  with pytest.raises(mesh_lib.MeshError, match=msg):
    mesh_lib.mesh_shape(_mesh(*sizes), n)


def test_no_weight_decay_on_biases_and_layernorm():
  cfg = encoders.EncoderConfig(model_type="bert", vocab_size=20, hidden_size=8,
                               num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
  params = nnx.state(encoders.build_encoder(cfg, rngs=nnx.Rngs(0)), nnx.Param)
  mask = optim.decay_mask(params)
  flat = {jax.tree_util.keystr(p).removesuffix(".value"): v
          for p, v in jax.tree_util.tree_leaves_with_path(mask)}
  assert any(v for k, v in flat.items() if k.endswith("['kernel']"))
  assert all(v for k, v in flat.items() if k.endswith("['kernel']") or
             k.endswith("['embedding']"))
  assert not any(v for k, v in flat.items() if k.endswith("['bias']") or k.endswith("['scale']"))


def test_schedule_warms_up_then_decays_to_zero():
  s = optim.learning_rate_schedule(1e-3, total_steps=100, warmup_ratio=0.1)
  assert float(s(0)) == 0.0 and float(s(10)) == pytest.approx(1e-3)
  assert float(s(55)) == pytest.approx(0.5e-3) and float(s(100)) == pytest.approx(0.0)


def test_fixed_warmup_steps_override_the_ratio():
  s = optim.learning_rate_schedule(1e-5, total_steps=1000, warmup_ratio=0.1, warmup_steps=100)
  assert float(s(50)) == pytest.approx(0.5e-5) and float(s(100)) == pytest.approx(1e-5)
  assert float(s(550)) == pytest.approx(0.5e-5)
