"""DASSA attention: the golden fixture (released mode), a PyTorch reference written from the spec
(both modes), the plain-attention equivalence, scope isolation and the block-level views."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from poi_jax.layers import dassa
from tests.conftest import fixture_id, load_fixture, parity_fixtures
from tests.reference import dassa_torch

FIXTURES = parity_fixtures("dassa_attention")


def _layer(input_dim, heads, attention_dim, values_dim, emb, labels, mode="released", seed=0,
           out_dim=None):
  return dassa.DassaSelfAttention(input_dim, heads, attention_dim=attention_dim,
                                  values_dim=values_dim, semantic_emb_dim=emb,
                                  num_semantic_labels=labels, output_projection_dim=out_dim,
                                  mode=mode, rngs=nnx.Rngs(seed))


def test_the_public_fixture_is_found(parity_dir):
  assert "dassa_attention.public" in {fixture_id(p) for p in FIXTURES}


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
def test_released_mode_reproduces_the_fixture(path):
  fx = load_fixture(path)
  cfg = {k.split(".", 1)[1]: int(v) for k, v in fx.items() if k.startswith("config.")}
  layer = _layer(cfg["input_dim"], cfg["num_heads"], cfg["attention_dim"], cfg["values_dim"],
                 cfg["semantic_emb_dim"], cfg["num_semantic_labels"])
  unused = dassa.load_torch_state_dict(layer, fx)
  assert unused == ["_combined_projection.bias", "_combined_projection.weight"]
  out, probs = layer(jnp.asarray(fx["input.inputs"]), jnp.asarray(fx["input.semantic_views_q"]),
                     jnp.asarray(fx["input.semantic_views_sent_mask"]),
                     jnp.asarray(fx["input.mask"]), return_attention=True)
  assert probs.shape == fx["intermediate.attention"].shape
  assert out.shape == fx["output.outputs"].shape
  np.testing.assert_allclose(np.asarray(probs), fx["intermediate.attention"], atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(out), fx["output.outputs"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
def test_fixture_covers_uniform_rows_and_attended_padding(path):
  """The fixture's documented edge cases are where the code says they are: scope-0 query rows
  are uniform over all T, and a constant-scope head attends the padding (released mode)."""
  fx = load_fixture(path)
  scopes, p = fx["input.semantic_views_sent_mask"], fx["intermediate.attention"]
  t = scopes.shape[-1]
  rows = np.argwhere(scopes == 0)
  assert len(rows) > 0
  for b, h, i in rows:
    np.testing.assert_allclose(p[b, h, i], np.full(t, 1.0 / t), atol=1e-6)
  pad = fx["input.mask"] == 0
  b_pad = int(np.argmax(pad.any(-1)))
  const = [h for h in range(scopes.shape[1]) if len(set(scopes[b_pad, h])) == 1
           and scopes[b_pad, h, 0] > 0]
  assert const
  assert (p[b_pad, const[0]][:, pad[b_pad]] > 0).all()


def _random_views(rng, b, h, t, num_labels, n_real):
  """Random segmentations per head with scope-0 gaps; label 0 and scope 0 on padding."""
  labels = rng.integers(0, num_labels, (b, h, t))
  scopes = np.zeros((b, h, t), np.int64)
  for bi in range(b):
    for hi in range(h):
      cuts = np.sort(rng.choice(np.arange(1, t), size=min(3, t - 1), replace=False))
      seg = np.searchsorted(cuts, np.arange(t), side="right") + 1
      gaps = rng.random(t) < 0.15
      scopes[bi, hi] = np.where(gaps, 0, seg + rng.integers(0, 3))
  mask = np.zeros((b, t), np.int64)
  for bi, n in enumerate(n_real):
    mask[bi, :n] = 1
    labels[bi, :, n:] = 0
    scopes[bi, :, n:] = 0
  return labels, scopes, mask


# (B, T, input_dim, heads, attention_dim, values_dim, emb, labels, out_dim)
CONFIGS = [
    (2, 9, 16, 4, 16, 16, 4, 7, None),
    (3, 11, 24, 3, 12, 18, 5, 13, None),  # attention_dim != input_dim: pins the scale
    (2, 7, 20, 2, 8, 6, 3, 5, 10),
    (1, 13, 12, 6, 18, 12, 2, 20, None),
]


def _compare(cfg, mode, seed):
  b, t, d, h, att, val, emb, n, out_dim = cfg
  rng = np.random.default_rng(seed)
  sd = dassa_torch.random_state_dict(rng, d, h, att, val, emb, n, out_dim)
  layer = _layer(d, h, att, val, emb, n, mode=mode, out_dim=out_dim)
  assert dassa.load_torch_state_dict(layer, sd) == []
  ref = dassa_torch.TorchDassa(d, h, att, val, emb, n, out_dim).load(sd)
  x = rng.standard_normal((b, t, d)).astype(np.float32)
  n_real = [t] + [int(rng.integers(2, t)) for _ in range(b - 1)]
  labels, scopes, mask = _random_views(rng, b, h, t, n, n_real)
  out, probs = layer(jnp.asarray(x), jnp.asarray(labels), jnp.asarray(scopes),
                     jnp.asarray(mask), return_attention=True)
  with torch.no_grad():
    ref_out, ref_p = ref(torch.tensor(x), torch.tensor(labels), torch.tensor(scopes),
                         torch.tensor(mask), mode=mode)
  np.testing.assert_allclose(np.asarray(probs), ref_p.numpy(), atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(out), ref_out.numpy(), atol=1e-5, rtol=0)
  return x, labels, scopes, mask, layer


@pytest.mark.parametrize("mode", dassa.MODES)
@pytest.mark.parametrize("index", range(len(CONFIGS)))
def test_matches_pytorch_reference(index, mode):
  _compare(CONFIGS[index], mode, seed=10 * index + dassa.MODES.index(mode))


def test_fill_value_vs_minus_inf_agree_when_a_key_is_allowed():
  rng = np.random.default_rng(5)
  d, h, att, val, emb, n, t = 16, 4, 16, 16, 4, 9, 10
  sd = dassa_torch.random_state_dict(rng, d, h, att, val, emb, n)
  ref = dassa_torch.TorchDassa(d, h, att, val, emb, n).load(sd)
  layer = _layer(d, h, att, val, emb, n)
  dassa.load_torch_state_dict(layer, sd)
  x = rng.standard_normal((2, t, d)).astype(np.float32)
  labels = rng.integers(0, n, (2, h, t))
  scopes = rng.integers(1, 4, (2, h, t))  # every query has at least itself as a key
  with torch.no_grad():
    _, p_inf = ref(torch.tensor(x), torch.tensor(labels), torch.tensor(scopes), fill=-np.inf)
  _, p = layer(jnp.asarray(x), jnp.asarray(labels), jnp.asarray(scopes), return_attention=True)
  np.testing.assert_allclose(np.asarray(p), p_inf.numpy(), atol=1e-6, rtol=0)


def test_one_scope_and_zero_label_tables_is_plain_multihead_attention():
  rng = np.random.default_rng(0)
  d, h, t, n, emb = 16, 4, 9, 6, 5
  sd = dassa_torch.random_state_dict(rng, d, h, d, d, emb, n)
  for k in ("q_w", "k_w", "q_b", "k_b"):
    sd[f"_semantic_label_embedding_{k}.weight"][:] = 0.0
  layer = _layer(d, h, d, d, emb, n)
  dassa.load_torch_state_dict(layer, sd)
  mha = torch.nn.MultiheadAttention(d, h, batch_first=True)
  # Per-head (D+E, dh) -> torch's stacked (H*dh, D) rows; label rows of W see only zeros.
  per_head = lambda w: torch.tensor(w[:, :d, :].transpose(0, 2, 1).reshape(d, d))
  with torch.no_grad():
    mha.in_proj_weight.copy_(torch.cat([per_head(sd["_queries_projection"]),
                                        per_head(sd["_keys_projection"]),
                                        torch.tensor(sd["_values_projection.weight"])]))
    mha.in_proj_bias.copy_(torch.cat([torch.zeros(2 * d),
                                      torch.tensor(sd["_values_projection.bias"])]))
    mha.out_proj.weight.copy_(torch.tensor(sd["_output_projection.weight"]))
    mha.out_proj.bias.copy_(torch.tensor(sd["_output_projection.bias"]))
  x = rng.standard_normal((2, t, d)).astype(np.float32)
  labels = rng.integers(0, n, (2, h, t))
  scopes = np.full((2, h, t), 3)
  out = layer(jnp.asarray(x), jnp.asarray(labels), jnp.asarray(scopes))
  with torch.no_grad():
    expected = mha(torch.tensor(x), torch.tensor(x), torch.tensor(x), need_weights=False)[0]
  np.testing.assert_allclose(np.asarray(out), expected.numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", dassa.MODES)
def test_no_attention_across_scopes_and_outside_scope_inputs_do_not_matter(mode):
  x, labels, scopes, mask, layer = _compare(CONFIGS[0], mode, seed=11)
  _, p = layer(jnp.asarray(x), jnp.asarray(labels), jnp.asarray(scopes), jnp.asarray(mask),
               return_attention=True)
  p = np.asarray(p)
  b, h, t = scopes.shape
  checked = 0
  for bi in range(b):
    for hi in range(h):
      for i in range(t):
        s = scopes[bi, hi, i]
        if s == 0:
          continue
        outside = scopes[bi, hi] != s
        assert (p[bi, hi, i][outside] == 0.0).all()  # exactly zero, not merely small
        if outside.any():
          checked += 1
          x2 = x.copy()
          x2[bi, outside] += 50.0
          _, p2 = layer(jnp.asarray(x2), jnp.asarray(labels), jnp.asarray(scopes),
                        jnp.asarray(mask), return_attention=True)
          np.testing.assert_allclose(np.asarray(p2)[bi, hi, i], p[bi, hi, i], atol=1e-6)
          if checked > 3:
            return
  assert checked


def test_permuting_tokens_with_their_views_permutes_the_output():
  x, labels, scopes, mask, layer = _compare(CONFIGS[1], "released", seed=3)
  perm = np.random.default_rng(0).permutation(x.shape[1])
  out = layer(jnp.asarray(x), jnp.asarray(labels), jnp.asarray(scopes))
  out_p = layer(jnp.asarray(x[:, perm]), jnp.asarray(labels[..., perm]),
                jnp.asarray(scopes[..., perm]))
  np.testing.assert_allclose(np.asarray(out_p), np.asarray(out)[:, perm], atol=1e-5)


def test_masked_mode_does_not_depend_on_batch_padding():
  rng = np.random.default_rng(4)
  d, h, n, t, extra = 16, 4, 12, 8, 5
  views = np.concatenate([rng.integers(1, 5, (1, 2, t)), np.zeros((1, 2, t), np.int64)], 1)
  labels, scopes = dassa.prepare_views(jnp.asarray(views), jnp.asarray(views), h, n)
  x = rng.standard_normal((1, t, d)).astype(np.float32)
  pad = lambda a, v: np.concatenate([np.asarray(a), np.full(a.shape[:-1] + (extra,), v)], -1)
  # Padded the way the block pads: views 0 there, then the per-head replacement.
  labels_p, scopes_p = dassa.prepare_views(jnp.asarray(pad(views, 0)), jnp.asarray(pad(views, 0)),
                                           h, n)
  x_p = np.concatenate([x, rng.standard_normal((1, extra, d)).astype(np.float32)], 1)
  mask, mask_p = np.ones((1, t)), pad(np.ones((1, t)), 0)
  results = {}
  for mode in dassa.MODES:
    layer = _layer(d, h, d, d, 4, n, mode=mode)
    a = layer(jnp.asarray(x), labels, scopes, jnp.asarray(mask))
    b = layer(jnp.asarray(x_p), labels_p, scopes_p, jnp.asarray(mask_p))[:, :t]
    results[mode] = float(np.abs(np.asarray(a) - np.asarray(b)).max())
  assert results["masked"] < 1e-5
  assert results["released"] > 1e-3  # the original's "No" heads attend the padding


def test_prepare_views_pads_to_heads_and_replaces_zeros():
  labels = np.array([[[3, 0, 5, 0], [0, 0, 0, 0]]])
  scopes = np.array([[[1, 1, 0, 2], [2, 2, 0, 0]]])
  lab, sc = dassa.prepare_views(jnp.asarray(labels), jnp.asarray(scopes), num_heads=4,
                                num_labels=20)
  # N - H + h = 16 + h
  np.testing.assert_array_equal(np.asarray(lab), [[[3, 16, 5, 16], [17, 17, 17, 17],
                                                   [18, 18, 18, 18], [19, 19, 19, 19]]])
  np.testing.assert_array_equal(np.asarray(sc), [[[1, 1, 16, 2], [2, 2, 17, 17],
                                                  [18, 18, 18, 18], [19, 19, 19, 19]]])
  lab, sc = dassa.prepare_views(jnp.asarray(labels), jnp.asarray(scopes), num_heads=3,
                                num_labels=20, replace_zero=False)
  np.testing.assert_array_equal(np.asarray(lab)[0, 2], [0, 0, 0, 0])
  with pytest.raises(ValueError, match="3 views for 2 heads"):
    dassa.prepare_views(jnp.zeros((1, 3, 4), int), jnp.zeros((1, 3, 4), int), 2, 10)


def test_gradients_flow_to_label_tables_and_bad_options_fail():
  layer = _layer(8, 2, 8, 8, 3, 5)
  x = jnp.ones((1, 4, 8))
  labels = jnp.array([[[1, 2, 0, 1], [3, 3, 4, 4]]])
  scopes = jnp.array([[[1, 1, 2, 2], [1, 1, 1, 1]]])

  def f(m):
    return jnp.sum(m(x * jnp.arange(4.0)[:, None], labels, scopes) ** 2)

  grads = nnx.grad(f)(layer)
  assert float(jnp.abs(grads["_semantic_label_embedding_q_w"]["embedding"].get_value()).sum()) > 0
  with pytest.raises(ValueError, match="mode"):
    _layer(8, 2, 8, 8, 3, 5, mode="paper")
  with pytest.raises(ValueError, match="multiple of num_heads"):
    _layer(8, 3, 8, 8, 3, 5)
  with pytest.raises(ValueError, match="masked mode needs the token mask"):
    _layer(8, 2, 8, 8, 3, 5, mode="masked")(x, labels, scopes)
  with pytest.raises(ValueError, match="batch, heads, tokens"):
    layer(x, labels[:, :1], scopes[:, :1])
