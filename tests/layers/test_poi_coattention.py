"""POI-Net co-attention: released variant vs the golden fixtures of the original code, paper
variant vs an independent PyTorch reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from poi_jax.layers import poi_coattention as poi
from tests.conftest import fixture_id, load_fixture, parity_fixtures
from tests.reference import poi_torch

FIXTURES = parity_fixtures("poi_coattention_")


def test_both_public_fixtures_are_found():
  names = {fixture_id(f).split(".")[0] for f in FIXTURES}
  assert {"poi_coattention_released", "poi_coattention_edge"} <= names


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
def test_released_reproduces_every_fixture_tensor(path):
  """nan_guard off = the released computation bit for bit; every intermediate and output to
  1e-5. All sizes come from the file."""
  fx = load_fixture(path)
  h = jnp.asarray(fx["input.sequence_output"])
  cs, ce = jnp.asarray(fx["input.con_start"]), jnp.asarray(fx["input.con_end"])
  s, att, inter = poi.released_coattention(h, cs, ce, nan_guard=False)
  w, b = fx["qa_outputs.weight"], fx["qa_outputs.bias"]
  logits = np.asarray(att) @ w.T + b
  got = {f"intermediate.{k}": np.asarray(v) for k, v in vars(inter).items()}
  got.update({"output.final_scores": np.asarray(s), "output.att_sequence_output": np.asarray(att),
              "output.start_logits": logits[..., 0], "output.end_logits": logits[..., 1]})
  expected = {k: v for k, v in fx.items() if k.startswith(("intermediate.", "output."))}
  assert set(expected) == set(got), set(expected) ^ set(got)
  for k, v in expected.items():
    np.testing.assert_allclose(got[k], v, atol=1e-5, rtol=0, err_msg=k)
  # The guard changes nothing where the released computation is finite.
  s_g, att_g, _ = poi.released_coattention(h, cs, ce, nan_guard=True)
  np.testing.assert_array_equal(np.asarray(s_g), np.asarray(s))


def _two_token_question_row(seed=0, length=12, dim=8):
  """SPEC §1's NaN case: a 2-token A domain whose single turn-0 survivor has a positive turn-1
  cosine (all features positive makes every cosine positive)."""
  rng = np.random.default_rng(seed)
  h = np.abs(rng.standard_normal((1, length, dim))).astype(np.float32) + 0.1
  return jnp.asarray(h), jnp.array([2]), jnp.array([length - 2])


def test_released_without_guard_gives_the_documented_nan_row():
  h, cs, ce = _two_token_question_row()
  s, _, _ = poi.released_coattention(h, cs, ce, nan_guard=False)
  assert np.isnan(np.asarray(s)).all()  # the released 0/0 turns the whole row into NaN


def test_nan_guard_gives_finite_outputs_and_gradients():
  h, cs, ce = _two_token_question_row()
  s, att, _ = poi.released_coattention(h, cs, ce, nan_guard=True)
  assert np.isfinite(np.asarray(att)).all()
  g = jax.grad(lambda x: jnp.sum(poi.released_coattention(x, cs, ce)[1] ** 2))(h)
  assert np.isfinite(np.asarray(g)).all()


def _random_batch(seed, batch=4, length=16, dim=12):
  """Padded rows and short domains: (con_start, con_end) include a 1-token and a 2-token A."""
  rng = np.random.default_rng(seed)
  h = rng.standard_normal((batch, length, dim)).astype(np.float32)
  bounds = [(1, 9), (2, 15), (5, 11), (7, 13)][:batch]
  cs = np.array([b[0] for b in bounds])
  ce = np.array([b[1] for b in bounds])
  return h, cs, ce


@pytest.mark.parametrize("strategy", poi.STRATEGIES)
@pytest.mark.parametrize("turns", [1, 2, 3, 4])
def test_paper_variant_matches_the_pytorch_reference(strategy, turns):
  h, cs, ce = _random_batch(turns)
  r, out = poi.paper_coattention(jnp.asarray(h), jnp.asarray(cs), jnp.asarray(ce), turns=turns,
                                 strategy=strategy)
  r_t, out_t = poi_torch.paper_coattention(torch.tensor(h, dtype=torch.float64), cs, ce, turns,
                                           strategy)
  np.testing.assert_allclose(np.asarray(r), r_t.numpy(), atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(out), out_t.numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("strategy", poi.STRATEGIES)
def test_paper_variant_gradients_match_the_reference(strategy):
  h, cs, ce = _random_batch(7)
  w = np.random.default_rng(1).standard_normal(h.shape).astype(np.float32)
  g = jax.grad(lambda x: jnp.sum(poi.paper_coattention(x, jnp.asarray(cs), jnp.asarray(ce),
                                                       turns=3, strategy=strategy)[1] * w))(
      jnp.asarray(h))
  ht = torch.tensor(h, dtype=torch.float64, requires_grad=True)
  (poi_torch.paper_coattention(ht, cs, ce, 3, strategy)[1] * torch.tensor(w, dtype=torch.float64)
   ).sum().backward()
  gt = ht.grad.numpy()
  # Relative to the largest gradient entry (single entries can be ~0), at the project's float32
  # tolerance 1e-5: the float32 gradient is 1e-7..2e-7 off the float64 reference here.
  scale = np.abs(gt).max()
  np.testing.assert_allclose(np.asarray(g) / scale, gt / scale, atol=1e-5, rtol=0)


def test_turns_change_the_scan_length_not_the_trace_size():
  h, cs, ce = (jnp.asarray(x) for x in _random_batch(0))

  def jaxpr_size(turns):
    jaxpr = jax.make_jaxpr(lambda x: poi.paper_coattention(x, cs, ce, turns=turns))(h)
    return len(str(jaxpr))

  assert jaxpr_size(2) == jaxpr_size(8)


def test_bad_strategy_and_turns_are_errors():
  h, cs, ce = (jnp.asarray(x) for x in _random_batch(0))
  with pytest.raises(ValueError, match="strategy"):
    poi.paper_coattention(h, cs, ce, strategy="greedy")
  with pytest.raises(ValueError, match="turns"):
    poi.paper_coattention(h, cs, ce, turns=0)
