"""Activations are placed by ``mesh.rules`` too: on a (data 1, fsdp 4, tensor 2) mesh of 8
simulated CPU devices the tiny SQuAD train step (the engine's `create_run`) constrains the
residual stream to ``batch -> fsdp`` and the feed-forward / attention projections to
``batch -> fsdp, mlp|heads -> tensor``, the compiled step holds no full-batch, full-width
(B, L, D|I) tensor on any device, the parameters follow the rules, and a large replicated parameter is reported
(an error under ``mesh.require_sharded_params``). The step runs in a subprocess
(`activation_sharding_step.py`): the simulated device count is fixed when JAX starts."""
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from poi_jax.layers import sharding

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
B, L, D, I = 8, 32, 64, 128  # batch, length, hidden, intermediate of the tiny config


@pytest.fixture(scope="module")
def result(tmp_path_factory):
  out = tmp_path_factory.mktemp("act") / "out.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  proc = subprocess.run([sys.executable, str(HERE / "activation_sharding_step.py"), str(out)],
                        env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(out.read_text())


def _constraints(text):
  return re.findall(r"sdy\.sharding_constraint %\S+ <@mesh, (\[.*?\])> : tensor<([0-9x]+)xf32>",
                    text)


def test_activations_are_constrained_by_the_rules(result):
  found = set(_constraints(result["lowered"]))
  assert ('[{"fsdp"}, {}, {}]', f"{B}x{L}x{D}") in found  # residual stream: batch
  assert ('[{"fsdp"}, {}, {"tensor"}]', f"{B}x{L}x{I}") in found  # feed-forward: batch x mlp
  assert ('[{"fsdp"}, {}, {"tensor"}]', f"{B}x{L}x{D}") in found  # q, k, v: batch x heads


def test_compiled_step_has_no_full_batch_activation(result):
  compiled = result["compiled"]
  per_device = re.findall(rf"f32\[{B // 4},{L},\d+\]", compiled)
  assert per_device, "no per-device (B/4, L, .) activation in the compiled step"
  # (The word table's gradient scatter may gather the batch for its 1/4 of the embed width.)
  assert not re.findall(rf"f32\[{B},{L},({D}|{I})\]", compiled)
  assert np.isfinite(result["loss"])


def test_parameters_follow_the_rules(result):
  specs = {k: v for k, v in result["specs"].items() if "opt_state" not in k}
  layer = "[0]['encoder']['encoder']['albert_layer_groups'][0]['albert_layers'][0]"
  want = {
      "[0]['encoder']['embeddings']['word_embeddings']['embedding']": "('tensor', 'fsdp')",
      f"{layer}['ffn']['kernel']": "('fsdp', 'tensor')",
      f"{layer}['ffn_output']['kernel']": "('tensor', 'fsdp')",
      f"{layer}['attention']['query']['kernel']": "('fsdp', 'tensor')",
      f"{layer}['attention']['query']['bias']": "('tensor',)",
      "[0]['pos_embeddings']['embedding']": "(None, 'fsdp')",
  }
  for name, spec in want.items():
    assert specs[name] == spec, (name, specs[name])
  assert result["model_warned"] == []  # nothing large left replicated in the tiny model


def test_large_replicated_parameter_is_reported(result):
  assert result["warned"] == ["['w'] (2048, 1024)"]
  assert "replicated" in result["raised"] and "mesh.rules" in result["raised"]


def test_constrain_is_identity_without_rules_or_on_one_device():
  import jax
  import jax.numpy as jnp
  x = jnp.ones((4, 3, 2))
  assert sharding.constrain(x, sharding.BLD) is x
  mesh = jax.make_mesh((1, 1, 1), sharding.MESH_AXES)
  with sharding.axis_rules(mesh, (("batch", ("data", "fsdp")),)):
    assert sharding.constrain(x, sharding.BLD) is x
  with pytest.raises(sharding.MeshError, match="unknown mesh axis"):
    with sharding.axis_rules(mesh, (("batch", "model"),)):
      pass


def test_every_rule_of_the_base_config_is_read():
  """Each logical name of ``mesh.rules`` is used by a parameter or an activation."""
  from poi_jax.config import base
  names = {name for name, _ in base.get_base_config().mesh.rules}
  src = "".join(p.read_text() for p in (ROOT / "poi_jax").rglob("*.py"))
  unread = {n for n in names if f'"{n}"' not in src}
  assert not unread, unread
