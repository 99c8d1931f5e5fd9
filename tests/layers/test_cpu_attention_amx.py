"""The native CPU attention kernel's bfloat16 variant on AMX tiles (`cpu_attention.attention(...,
bfloat16=True)`, what ``model.attention=cpu_kernel`` runs under bfloat16 matmul precision on such
a CPU).

The reference is the variant's definition, in PyTorch (float64): each of the five products takes
its operands rounded to bfloat16 (torch's own rounding), q k^T, the unnormalised probabilities'
product with v, dO v^T, dS k, dS^T q and P^T dO, with the softmax, rowsum(dO * out), the scale
and the dropout factors exact. A rounding to bfloat16 can go either way for a value within the
kernel's float32 error of a rounding midpoint (one bfloat16 step, 2^-8 relative): for such
values the reference allows that step (`_ambiguous`), and nothing else beyond 1e-5. The kernel's
tests need a CPU with AMX tiles; elsewhere they skip, naming why, and the dispatch tests check
that nothing changes there."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from poi_jax.layers import attention, cpu_attention, cpu_matmul_amx
from tests.layers.test_cpu_attention import SHAPES, _inputs, _kernel_keep_factors

needs_amx = pytest.mark.skipif(
    not cpu_matmul_amx.cpu_has_amx(),
    reason="this CPU has no AMX bfloat16 tiles: the bfloat16 variant cannot run here (the "
           "kernel keeps float32: test_without_amx_the_precision_keeps_the_float32_kernel)")


def _bf16(x: torch.Tensor) -> torch.Tensor:
  return x.float().bfloat16().double()


def _ambiguous(x: torch.Tensor, error: torch.Tensor) -> torch.Tensor:
  """One bfloat16 step (2^-8 relative) where ``x`` lies within ``error`` of a rounding midpoint
  (the kernel's float32 value may round the other way there), else 0."""
  step = torch.exp2(torch.floor(torch.log2(x.abs().clamp_min(1e-300))) - 7)
  distance = ((x - _bf16(x)).abs() - step / 2).abs()
  return torch.where(distance <= error + 1e-6 * x.abs(), step, torch.zeros_like(x))


def _reference(q, k, v, keys, cot, factors):
  """out, dq, dk, dv and each one's allowance for ambiguous roundings; (B, L, N, D) arrays."""
  heads = lambda x: torch.tensor(x, dtype=torch.float64).transpose(1, 2)
  q, k, v, do = (heads(x) for x in (q, k, v, cot))
  m = torch.tensor(np.asarray(factors), dtype=torch.float64)
  scale = 1 / np.sqrt(np.float32(q.shape[-1]))
  bias = torch.where(torch.tensor(keys), 0.0, float(np.finfo(np.float32).min))[:, None, None, :]
  s = _bf16(q) @ _bf16(k).transpose(-1, -2) * scale + bias
  e = torch.exp(s - s.amax(-1, keepdim=True))
  total = e.sum(-1, keepdim=True)
  out = _bf16(e * m) @ _bf16(v) / total
  p = e / total
  dp = _bf16(do) @ _bf16(v).transpose(-1, -2)
  row = (do * out).sum(-1, keepdim=True)
  ds = p * (dp * m - row)
  dq = _bf16(ds) @ _bf16(k) * scale
  dk = _bf16(ds).transpose(-1, -2) @ _bf16(q) * scale
  dv = _bf16(p * m).transpose(-1, -2) @ _bf16(do)
  # The kernel's float32 error in each rounded value: e and P about 1e-6 relative; dS from
  # dP * m - row, which can cancel, 1e-5 of its terms' magnitude, plus what the kernel's own
  # out (its rounded e's allowance) moves row = rowsum(dO * out) by.
  slack_out = _ambiguous(e * m, 1e-6 * e * m) @ _bf16(v).abs() / total
  row_error = (do.abs() * (slack_out + 1e-6 * out.abs())).sum(-1, keepdim=True)
  slack_ds = _ambiguous(ds, 1e-5 * p * (dp.abs() * m + row.abs()) + p * row_error)
  slacks = (slack_out,
            slack_ds @ _bf16(k).abs() * scale,
            slack_ds.transpose(-1, -2) @ _bf16(q).abs() * scale,
            _ambiguous(p * m, 1e-6 * p * m).transpose(-1, -2) @ _bf16(do).abs())
  back = lambda x: x.transpose(1, 2).numpy()
  return [back(x) for x in (out, dq, dk, dv)], [back(x) for x in slacks]


def _check(got, want, slack, name):
  excess = np.abs(np.asarray(got, np.float64) - want) - slack
  assert excess.max() <= 1e-5, (name, float(excess.max()))


@needs_amx
@pytest.mark.parametrize("b,lq,lk,heads,dh,lengths", SHAPES)
@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_bfloat16_variant_equals_its_definition(b, lq, lk, heads, dh, lengths, rate):
  """Forward and q/k/v gradients, with and without dropout (the kernel's documented mask), on
  the float32 kernel's edge shapes: lengths and head sizes off every block, cross-attention, an
  example whose keys are all padded."""
  assert cpu_attention.amx_available(), cpu_attention.amx_unavailable_reason()
  q, k, v, keys, cot = _inputs(b, lq, lk, heads, dh, lengths)
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  seed = cpu_attention.dropout_seed(jax.random.key(7))
  factors = (_kernel_keep_factors(seed, rate, b, heads, lq, lk) if rate
             else np.ones((b, heads, lq, lk), np.float32))
  kernel = lambda q, k, v: cpu_attention.attention(q, k, v, bias, dropout_rate=rate, seed=seed,
                                                   bfloat16=True)
  got, vjp = jax.vjp(jax.jit(kernel), q, k, v)
  wants, slacks = _reference(q, k, v, keys, cot, factors)
  assert float(np.abs(wants[0]).max()) > 0.05
  for name, g, w, s in zip(("out", "dq", "dk", "dv"), (got, *vjp(jnp.asarray(cot))), wants,
                           slacks):
    _check(g, w, s, name)
  # And it is not the float32 kernel: the rounding did change the values.
  f32 = cpu_attention.attention(q, k, v, bias, dropout_rate=rate, seed=seed)
  assert float(jnp.abs(got - f32).max()) > 1e-4


@needs_amx
def test_a_long_padded_batch_at_minilm_s_head_size():
  """MiniLM's heads (12 of 32) over 300 keys, 70 of one row's padding: several blocks of
  queries and keys, the padded tail left out (its dk, dv rows 0)."""
  b, lq, lk, heads, dh = 2, 300, 300, 12, 32
  q, k, v, keys, cot = _inputs(b, lq, lk, heads, dh, [300, 230], seed=11)
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  got, vjp = jax.vjp(lambda *a: cpu_attention.attention(*a, bias, bfloat16=True), q, k, v)
  grads = vjp(jnp.asarray(cot))
  wants, slacks = _reference(q, k, v, keys, cot, np.ones((b, heads, lq, lk), np.float32))
  for name, g, w, s in zip(("out", "dq", "dk", "dv"), (got, *grads), wants, slacks):
    _check(g, w, s, name)
  assert not np.asarray(grads[1])[1, 230:].any() and not np.asarray(grads[2])[1, 230:].any()


@needs_amx
def test_bfloat16_precision_selects_the_variant():
  """Under bfloat16 matmul precision the attention layer's native kernel is the AMX variant (and
  its record says so); under the default precision the float32 kernel."""
  q = jnp.ones((1, 40, 64))
  mask = attention.key_mask(jnp.ones((1, 40), jnp.int32))
  run = lambda q: attention.dot_product_attention(q, q, q, mask, num_heads=2,
                                                  implementation="cpu_kernel")
  jaxpr = str(jax.make_jaxpr(run)(q))
  assert "poi_jax_cpu_attention_fwd" in jaxpr and "('bfloat16', False)" in jaxpr
  with jax.default_matmul_precision("bfloat16"):
    assert cpu_attention.bfloat16_precision()
    assert "('bfloat16', True)" in str(jax.make_jaxpr(run)(q))
  assert attention.kernels_used()["1x40x40x2x32 float32"]["kernel"] == "cpu_kernel bfloat16 (AMX)"


@needs_amx
def test_bfloat16_inputs_select_the_variant_at_any_precision():
  """``model.dtype=bfloat16``: the attention layer's native kernel runs the AMX variant on the
  bfloat16 inputs (their products are exact there), returns bfloat16, and equals the variant
  run on the same values in float32."""
  rng = np.random.default_rng(3)
  q = jnp.asarray(rng.standard_normal((2, 40, 64)), jnp.bfloat16)
  mask = attention.key_mask(jnp.ones((2, 40), jnp.int32))
  run = lambda q: attention.dot_product_attention(q, q, q, mask, num_heads=2,
                                                  implementation="cpu_kernel")
  assert "('bfloat16', True)" in str(jax.make_jaxpr(run)(q))
  out = run(q)
  assert out.dtype == jnp.bfloat16
  heads = q.astype(jnp.float32).reshape(2, 40, 2, 32)
  want = cpu_attention.attention(heads, heads, heads, None, bfloat16=True).reshape(2, 40, 64)
  np.testing.assert_array_equal(np.asarray(out, np.float32),
                                np.asarray(want.astype(jnp.bfloat16), np.float32))
  assert attention.kernels_used()["2x40x40x2x32 bfloat16"]["kernel"] == "cpu_kernel bfloat16 (AMX)"


def test_without_amx_the_precision_keeps_the_float32_kernel(monkeypatch):
  """Where the variant is not available (no AMX, tiles refused) bfloat16 precision leaves the
  float32 kernel in place, as XLA's CPU backend ignores it; asking for the variant directly is an
  error with the reason."""
  if not cpu_attention.available():
    pytest.skip(f"the CPU attention kernel is unavailable: {cpu_attention.unavailable_reason()}")
  monkeypatch.setitem(cpu_attention._state, "amx_reason", "this CPU has no AMX tiles")
  q = jnp.ones((1, 40, 64))
  mask = attention.key_mask(jnp.ones((1, 40), jnp.int32))
  with jax.default_matmul_precision("bfloat16"):
    assert not cpu_attention.bfloat16_precision()
    jaxpr = str(jax.make_jaxpr(lambda q: attention.dot_product_attention(
        q, q, q, mask, num_heads=2, implementation="cpu_kernel"))(q))
  assert "poi_jax_cpu_attention_fwd" in jaxpr and "('bfloat16', False)" in jaxpr
  heads = jnp.ones((1, 40, 2, 32))
  with pytest.raises(RuntimeError, match="bfloat16=True.*this CPU has no AMX tiles"):
    cpu_attention.attention(heads, heads, heads, None, bfloat16=True)


def test_a_library_without_the_variant_says_why(monkeypatch):
  """A kernel built without AMX-BF16 (another CPU, or a compiler that has no AMX), or tiles that
  Linux refuses: the variant is unavailable with the reason, at load time."""
  class NoVariant:
    pass

  class Refused:
    def PoiCpuAttentionAmxTilesGranted(self):  # pylint: disable=invalid-name
      return 0
  assert "built without AMX-BF16" in cpu_attention._register_amx(NoVariant())
  assert "did not grant this process the AMX tiles" in cpu_attention._register_amx(Refused())
