"""DUMA co-attention: released variant vs the golden fixture, paper variant vs PyTorch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from poi_jax.layers import duma
from tests.conftest import fixture_id, load_fixture, parity_fixtures
from tests.reference import duma_torch

FIXTURES = parity_fixtures("duma_coattention")


def _set(linear, w, b):
  linear.kernel.set_value(jnp.asarray(w.T))
  linear.bias.set_value(jnp.asarray(b))


def test_the_public_fixture_is_found():
  assert "duma_coattention.public" in {fixture_id(p) for p in FIXTURES}


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
def test_released_reproduces_the_fixture(path):
  fx = load_fixture(path)
  h = jnp.asarray(fx["input.sequence_output"])
  n, length, dim = h.shape
  heads = int(fx["config.num_attention_heads"])
  choices = int(fx["config.num_choices"])
  pq = fx["input.pq_end_pos"].reshape(-1, 2)
  p_end, q_end = jnp.asarray(pq[:, 0]), jnp.asarray(pq[:, 1])
  layer = duma.Duma(dim, heads, variant="released", num_layers=1, rngs=nnx.Rngs(0))
  for name in ("query", "key", "value"):
    _set(getattr(layer.bert_att, name), fx[f"bert_att.{name}.weight"], fx[f"bert_att.{name}.bias"])
  fused, inter = layer(h, p_end, p_end + 2, q_end, return_intermediates=True)
  logits_flat = np.asarray(fused) @ fx["classifier_2.weight"].T + fx["classifier_2.bias"]
  got = {f"intermediate.{k}": np.asarray(inter[k]) for k in
         ("context_states", "query_states", "context_mask", "query_mask")}
  got.update({"output.cq_biatt_output": np.asarray(inter["cq_biatt_output"]),
              "output.qc_biatt_output": np.asarray(inter["qc_biatt_output"]),
              "output.fused": np.asarray(fused), "output.logits_flat": logits_flat,
              "output.reshaped_logits": logits_flat.reshape(-1, choices)})
  expected = {k: v for k, v in fx.items() if k.startswith(("intermediate.", "output."))}
  assert set(expected) == set(got)
  for k, v in expected.items():
    np.testing.assert_allclose(got[k], v, atol=1e-5, rtol=0, err_msg=k)


def _batch(seed, n=4, length=20, dim=16):
  rng = np.random.default_rng(seed)
  h = rng.standard_normal((n, length, dim)).astype(np.float32)
  # (p_end, q_start, q_end): a 2-token question, heavy padding, a RoBERTa-style double separator.
  bounds = np.array([(8, 10, 11), (5, 7, 12), (3, 5, 7), (10, 13, 18)])[:n]
  return h, bounds


CASES = [(k, f, d, b) for k in (1, 2, 3) for f in duma.FUSES for d in duma.DIRECTIONS
         for b in ("attention",)] + [(2, "concat", "both", "transformer"),
                                     (1, "sum", "p2q", "transformer")]


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("k,fuse,direction,block", CASES)
def test_paper_variant_matches_pytorch(k, fuse, direction, block, share):
  h, bounds = _batch(k)
  dim, heads = h.shape[-1], 4
  layer = duma.Duma(dim, heads, variant="paper", num_layers=k, share_layers=share, fuse=fuse,
                    direction=direction, block=block, init_std=0.2, rngs=nnx.Rngs(k))
  ref = duma_torch.TorchDuma.from_flax(layer, dim, heads, k, share, fuse, direction, block)
  out = layer(jnp.asarray(h), *(jnp.asarray(bounds[:, i]) for i in range(3)))
  ref_out = ref(torch.tensor(h), bounds)
  np.testing.assert_allclose(np.asarray(out), ref_out.detach().numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("direction", duma.DIRECTIONS)
def test_paper_variant_gradients_match_pytorch(direction):
  h, bounds = _batch(0)
  dim, heads = h.shape[-1], 4
  layer = duma.Duma(dim, heads, variant="paper", num_layers=2, direction=direction,
                    init_std=0.3, rngs=nnx.Rngs(0))
  ref = duma_torch.TorchDuma.from_flax(layer, dim, heads, 2, True, "concat", direction,
                                       "attention")
  w = np.random.default_rng(3).standard_normal(
      (h.shape[0], layer.output_dim_factor * dim)).astype(np.float32)
  args = [jnp.asarray(bounds[:, i]) for i in range(3)]
  g = jax.grad(lambda x: jnp.sum(layer(x, *args) * w))(jnp.asarray(h))
  ht = torch.tensor(h, requires_grad=True)
  (ref(ht, bounds) * torch.tensor(w)).sum().backward()
  # Relative to the largest gradient entry (single entries can be ~0), at the project's float32
  # tolerance 1e-5: the two float32 gradients differ by 2e-7..4e-7 of it here.
  scale = np.abs(ht.grad.numpy()).max()
  np.testing.assert_allclose(np.asarray(g) / scale, ht.grad.numpy() / scale, atol=1e-5, rtol=0)


def test_paper_variant_ignores_padding_contents():
  """Pooling over real tokens and masked keys: what lies beyond q_end cannot change the output."""
  h, bounds = _batch(1)
  layer = duma.Duma(h.shape[-1], 4, variant="paper", rngs=nnx.Rngs(0))
  args = [jnp.asarray(bounds[:, i]) for i in range(3)]
  h2 = h.copy()
  for i, (_, _, q_end) in enumerate(bounds):
    h2[i, q_end + 1:] = 100.0
  np.testing.assert_allclose(np.asarray(layer(jnp.asarray(h), *args)),
                             np.asarray(layer(jnp.asarray(h2), *args)), atol=1e-6)


def test_bad_options_are_errors():
  with pytest.raises(ValueError, match="fuse"):
    duma.Duma(16, 4, fuse="max", rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="released DUMA variant"):
    duma.Duma(16, 4, variant="released", num_layers=2, rngs=nnx.Rngs(0))
