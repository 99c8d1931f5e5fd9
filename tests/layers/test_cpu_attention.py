"""The native CPU attention kernel (`poi_jax.layers.cpu_attention`, ``model.attention=cpu_kernel``):
its forward and its hand-written backward against JAX's derivative of the explicit einsum-softmax
path and against PyTorch's `scaled_dot_product_attention`, on shapes that exercise every edge of
its blocking (query blocks of 32 or 36, vectors of 16, 8 or 4 floats, tiles of 4 or 6 rows: lengths and head sizes that are
not multiples, cross-attention, a fully padded example), each vector width whatever the machine's;
its build cache and its failure message."""
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from poi_jax.layers import attention, cpu_attention

needs_compiler = pytest.mark.skipif(
    cpu_attention._compiler() is None,
    reason="no C++ compiler on PATH: the kernel cannot be built here (auto keeps explicit_vjp; "
           "tested in test_auto_keeps_xla_ops_without_the_kernel_or_on_several_devices)")


def _inputs(b, lq, lk, heads, dh, lengths, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(b, lq, heads, dh)).astype(np.float32)
  k, v = (rng.normal(size=(b, lk, heads, dh)).astype(np.float32) for _ in range(2))
  keys = (np.arange(lk)[None] < np.asarray(lengths)[:, None])  # (B, Lk) True: attend
  cotangent = rng.normal(size=(b, lq, heads, dh)).astype(np.float32)
  return q, k, v, keys, cotangent


# (B, Lq, Lk, N, Dh, key lengths): MiniLM's heads of 32 and BERT-base's of 64 over lengths that
# are and are not multiples of the query block (32) and of the vector (16); cross-attention
# (Lq != Lk); an example with every key padded (softmax over equal scores: uniform, as the
# explicit path and transformers' eager attention give).
SHAPES = [
    (2, 64, 64, 3, 32, [64, 40]),
    (2, 37, 50, 3, 24, [50, 0]),
    (1, 33, 17, 2, 64, [9]),
    (3, 7, 7, 4, 8, [7, 4, 1]),
]


@needs_compiler
@pytest.mark.parametrize("b,lq,lk,heads,dh,lengths", SHAPES)
def test_kernel_equals_autodiff_of_the_explicit_path(b, lq, lk, heads, dh, lengths):
  assert cpu_attention.available(), cpu_attention.unavailable_reason()
  q, k, v, keys, cot = _inputs(b, lq, lk, heads, dh, lengths)
  mask = jnp.asarray(keys)[:, None, None, :]
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  kernel = lambda q, k, v: cpu_attention.attention(q, k, v, bias)
  explicit = lambda q, k, v: attention._explicit(q, k, v, mask, lambda p: p)
  got, got_vjp = jax.vjp(jax.jit(kernel), q, k, v)
  want, want_vjp = jax.vjp(explicit, q, k, v)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)
  for name, g, w in zip("qkv", got_vjp(jnp.asarray(cot)), want_vjp(jnp.asarray(cot))):
    assert float(jnp.abs(w).max()) > 0.05, name  # a gradient worth comparing
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-6, rtol=0, err_msg=name)


@needs_compiler
@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_masked_keys_inside_a_row_stay_and_only_its_padded_tail_is_left_out(rate):
  """The kernel leaves out the keys after a row's last unmasked one (their probability is 0
  exactly); masked keys before it stay in the computation. Rows with holes and a padded tail,
  a row with holes and no tail, a row of one key: forward and gradients as the explicit path's
  (with dropout, under the kernel's own mask)."""
  b, lq, lk, heads, dh = 3, 40, 45, 2, 32
  q, k, v, _, cot = _inputs(b, lq, lk, heads, dh, [lk] * b, seed=3)
  keys = np.zeros((b, lk), bool)
  keys[0, [0, 1, 5, 17, 18, 30]] = True           # holes, then 14 padded keys
  keys[1, ::4] = True
  keys[1, lk - 1] = True                          # holes to the last key: no tail
  keys[2, 20] = True                              # one key, in the middle
  mask = jnp.asarray(keys)[:, None, None, :]
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  seed = cpu_attention.dropout_seed(jax.random.key(5))
  factors = (jnp.asarray(_kernel_keep_factors(np.asarray(seed), rate, b, heads, lq, lk))
             if rate else jnp.ones((b, heads, lq, lk)))
  kernel = lambda q, k, v: cpu_attention.attention(q, k, v, bias, dropout_rate=rate, seed=seed)
  got, got_vjp = jax.vjp(jax.jit(kernel), q, k, v)
  want, want_vjp = jax.vjp(lambda *a: _explicit_with_factors(*a, mask, factors), q, k, v)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)
  for name, g, w in zip("qkv", got_vjp(jnp.asarray(cot)), want_vjp(jnp.asarray(cot))):
    assert float(jnp.abs(w).max()) > 0.05, name
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-6, rtol=0, err_msg=name)


@needs_compiler
@pytest.mark.parametrize("b,lq,lk,heads,dh,lengths", SHAPES[:2])
def test_kernel_equals_pytorch_sdpa(b, lq, lk, heads, dh, lengths):
  """PyTorch's own CPU attention as the reference, value and q/k/v gradients (examples with at
  least one key: PyTorch gives NaN for a row with none)."""
  q, k, v, keys, cot = _inputs(b, lq, lk, heads, dh, [max(n, 1) for n in lengths])
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  got, vjp = jax.vjp(lambda *a: cpu_attention.attention(*a, bias), q, k, v)
  grads = vjp(jnp.asarray(cot))
  tq, tk, tv = (torch.tensor(x).transpose(1, 2).requires_grad_() for x in (q, k, v))
  out = torch.nn.functional.scaled_dot_product_attention(
      tq, tk, tv, attn_mask=torch.tensor(keys)[:, None, None, :])
  out.backward(torch.tensor(cot).transpose(1, 2))
  np.testing.assert_allclose(np.asarray(got), out.transpose(1, 2).detach().numpy(), atol=1e-5,
                             rtol=0)
  for name, g, t in zip("qkv", grads, (tq, tk, tv)):
    np.testing.assert_allclose(np.asarray(g), t.grad.transpose(1, 2).numpy(), atol=1e-5, rtol=0,
                               err_msg=name)


def _kernel_keep_factors(seed, rate, b, heads, lq, lk):
  """The kernel's dropout factors ``(B, N, Lq, Lk)`` (0 dropped, 1 / (1 - rate) kept), written
  here in NumPy from the rule cpu_attention.cc documents: the lowbias32 hash, row key
  ``mix(seed0 ^ mix(seed1 + (b * N + h) * Lq + i))``, element ``mix(row + j * 0x9e3779b9)``,
  kept when ``>= rate * 2^32``."""
  def mix(x):
    x = x.astype(np.uint64) & 0xffffffff
    x ^= x >> 16
    x = (x * 0x7feb352d) & 0xffffffff
    x ^= x >> 15
    x = (x * 0x846ca68b) & 0xffffffff
    x ^= x >> 16
    return x
  s0, s1 = (int(x) for x in np.asarray(seed, np.uint32))
  bh = np.arange(b * heads, dtype=np.uint64).reshape(b, heads, 1, 1)
  i = np.arange(lq, dtype=np.uint64).reshape(1, 1, lq, 1)
  j = np.arange(lk, dtype=np.uint64).reshape(1, 1, 1, lk)
  row = mix(np.uint64(s0) ^ mix(np.uint64(s1) + bh * np.uint64(lq) + i))
  x = mix(row + j * np.uint64(0x9e3779b9))
  threshold = min(int(np.ldexp(np.float64(np.float32(rate)), 32)), 0xffffffff)
  return np.where(x >= threshold, np.float32(1.0) / (np.float32(1.0) - np.float32(rate)),
                  np.float32(0.0)).astype(np.float32)


def _explicit_with_factors(q, k, v, mask, factors):
  """The explicit path with the dropout given as fixed factors on the probabilities."""
  return attention._explicit(q, k, v, mask, lambda p: p * factors)


@needs_compiler
@pytest.mark.parametrize("b,lq,lk,heads,dh,lengths", SHAPES)
def test_kernel_dropout_equals_the_explicit_path_with_its_mask(b, lq, lk, heads, dh, lengths):
  """With dropout, forward and q/k/v gradients against JAX's derivative of the explicit path
  with the kernel's documented mask (rebuilt in NumPy), at BERT's rate and a large one."""
  q, k, v, keys, cot = _inputs(b, lq, lk, heads, dh, lengths)
  mask = jnp.asarray(keys)[:, None, None, :]
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  for rate, key in ((0.1, 3), (0.5, 4)):
    seed = cpu_attention.dropout_seed(jax.random.key(key))
    factors = jnp.asarray(_kernel_keep_factors(seed, rate, b, heads, lq, lk))
    kernel = lambda q, k, v: cpu_attention.attention(q, k, v, bias, dropout_rate=rate, seed=seed)
    got, got_vjp = jax.vjp(jax.jit(kernel), q, k, v)
    want, want_vjp = jax.vjp(lambda *a: _explicit_with_factors(*a, mask, factors), q, k, v)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=0)
    for name, g, w in zip("qkv", got_vjp(jnp.asarray(cot)), want_vjp(jnp.asarray(cot))):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=0,
                                 err_msg=f"{name} at rate {rate}")


@needs_compiler
def test_kernel_dropout_rate_seed_and_errors():
  """The mask keeps 1 - rate of the probabilities, independently of position; another seed
  draws another mask, the same seed the same; rate 0 is no dropout; bad rates and a missing
  seed are clear errors."""
  b, lq, lk, heads = 2, 64, 96, 3
  factors = _kernel_keep_factors(cpu_attention.dropout_seed(jax.random.key(0)), 0.1, b, heads,
                                 lq, lk)
  kept = factors > 0
  n = kept.size
  assert abs(kept.mean() - 0.9) < 4 * np.sqrt(0.09 / n)  # 4 standard errors
  assert abs(kept[..., ::2].mean() - kept[..., 1::2].mean()) < 0.02  # no pattern over keys
  q, k, v, keys, _ = _inputs(b, lq, lk, heads, 16, [lk, 50])
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  run = lambda rate, key: np.asarray(cpu_attention.attention(
      q, k, v, bias, dropout_rate=rate, seed=cpu_attention.dropout_seed(jax.random.key(key))))
  np.testing.assert_array_equal(run(0.1, 0), run(0.1, 0))
  assert np.abs(run(0.1, 0) - run(0.1, 1)).max() > 1e-3
  np.testing.assert_array_equal(run(0.0, 0), np.asarray(cpu_attention.attention(q, k, v, bias)))
  for bad in (-0.1, 1.0):
    with pytest.raises(ValueError, match="dropout_rate must be in"):
      cpu_attention.attention(q, k, v, bias, dropout_rate=bad, seed=jnp.zeros(2, jnp.uint32))
  with pytest.raises(ValueError, match="needs a seed"):
    cpu_attention.attention(q, k, v, bias, dropout_rate=0.1)


@needs_compiler
def test_kernel_under_vmap_and_in_bfloat16():
  q, k, v, keys, _ = _inputs(2, 20, 20, 2, 16, [20, 11])
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  one = lambda q, k, v: cpu_attention.attention(q[None], k[None], v[None], bias[:1])[0]
  mapped = jax.vmap(one, in_axes=(0, None, None))(jnp.stack([q[0], q[0] * 2]), k[0], v[0])
  np.testing.assert_allclose(np.asarray(mapped[0]), np.asarray(one(q[0], k[0], v[0])), atol=1e-6)
  np.testing.assert_allclose(np.asarray(mapped[1]), np.asarray(one(q[0] * 2, k[0], v[0])),
                             atol=1e-6)
  low = cpu_attention.attention(*(jnp.asarray(x, jnp.bfloat16) for x in (q, k, v)), bias)
  assert low.dtype == jnp.bfloat16  # computed in float32, returned in the inputs' dtype
  full = cpu_attention.attention(q, k, v, bias)
  np.testing.assert_allclose(np.asarray(low, np.float32), np.asarray(full), atol=5e-2)


@needs_compiler
def test_build_goes_to_the_cache_directory_once(tmp_path):
  """A fresh cache directory gets one library (in a child process: a process registers its FFI
  targets once); a second process loads it without building again."""
  child = [sys.executable, "-c", "from poi_jax.layers import cpu_attention as c; "
           "assert c.available(), c.unavailable_reason()"]
  env = {**os.environ, cpu_attention.CACHE_ENV: str(tmp_path)}
  subprocess.run(child, env=env, check=True, timeout=600)
  built = list(tmp_path.iterdir())
  assert len(built) == 1 and built[0].name.startswith("cpu_attention-"), built
  stamp = built[0].stat().st_mtime_ns
  subprocess.run(child, env=env, check=True, timeout=600)
  assert list(tmp_path.iterdir()) == built and built[0].stat().st_mtime_ns == stamp


# Each vector width's kernel (and a tile that leaves a remainder of every size), whatever this
# machine's native one: the kernel built for an AVX-512 host is not the one an AVX2 host runs.
_CHILD = """
import sys, jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, {root!r})
from tests.layers.test_cpu_attention import (SHAPES, _explicit_with_factors, _inputs,
                                             _kernel_keep_factors)
from poi_jax.layers import attention, cpu_attention
assert cpu_attention.available(), cpu_attention.unavailable_reason()
for b, lq, lk, heads, dh, lengths in SHAPES[1:3] + [(1, 40, 40, 2, 112, [33])]:
  q, k, v, keys, cot = _inputs(b, lq, lk, heads, dh, lengths)
  bias = jnp.where(jnp.asarray(keys), 0.0, jnp.finfo(jnp.float32).min)
  mask = jnp.asarray(keys)[:, None, None, :]
  got, got_vjp = jax.vjp(jax.jit(lambda q, k, v: cpu_attention.attention(q, k, v, bias)), q, k, v)
  want, want_vjp = jax.vjp(lambda q, k, v: attention._explicit(q, k, v, mask, lambda p: p), q, k, v)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=0)
  for g, w in zip(got_vjp(jnp.asarray(cot)), want_vjp(jnp.asarray(cot))):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=5e-6, rtol=0)
  seed = cpu_attention.dropout_seed(jax.random.key(7))  # the dropout's mask and gradients too
  factors = jnp.asarray(_kernel_keep_factors(seed, 0.2, b, heads, lq, lk))
  got, got_vjp = jax.vjp(lambda q, k, v: cpu_attention.attention(
      q, k, v, bias, dropout_rate=0.2, seed=seed), q, k, v)
  want, want_vjp = jax.vjp(lambda *a: _explicit_with_factors(*a, mask, factors), q, k, v)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=0)
  for g, w in zip(got_vjp(jnp.asarray(cot)), want_vjp(jnp.asarray(cot))):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=0)
print("equal", 3)
"""


def _native_vectors() -> str:
  """The kernel's own choice here (cpu_attention.cc): 16x4x4 with AVX-512, 8x6x2 with AVX, 4x4x4
  on ARM, else 4x6x2."""
  flags = cpu_attention._cpu_features().split()
  if "avx512f" in flags:
    return "16x4x4"
  if "avx" in flags:
    return "8x6x2"
  return "4x4x4" if "asimd" in flags else "4x6x2"


@needs_compiler
@pytest.mark.parametrize("vectors", [v for v in ("16x4x4", "8x6x2", "4x4x4", "4x6x2")
                                     if v != _native_vectors()])
def test_every_vector_width_equals_the_explicit_path(vectors, tmp_path):
  """The kernel built with the vectors and tiles of AVX-512, AVX2, NEON and SSE
  (`POI_JAX_CPU_ATTENTION_VECTORS`; this machine's own is the one the tests above run) against
  the explicit path, forward and backward: cross-attention with a fully padded example, a head
  of 64, and one of 112 floats (7 vectors of 16: a remainder tile of every width); query blocks
  and key counts leave every remainder of rows, 1 to 5."""
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  env = {**os.environ, cpu_attention.CACHE_ENV: str(tmp_path),
         cpu_attention.VECTORS_ENV: vectors, "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, "-c", _CHILD.format(root=root)], env=env,
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "equal 3" in done.stdout
  assert len(list(tmp_path.glob("cpu_attention-*.so"))) == 1


def test_a_bad_vector_setting_is_a_clear_error(monkeypatch):
  for bad in ("12x2", "8x6x9", "8x0", "8x6x2x1", "8"):
    monkeypatch.setenv(cpu_attention.VECTORS_ENV, bad)
    with pytest.raises(ValueError, match="POI_JAX_CPU_ATTENTION_VECTORS must be WxRxC or WxC"):
      cpu_attention._flags()
  monkeypatch.setenv(cpu_attention.VECTORS_ENV, "8x6x2")
  assert cpu_attention._flags()[-3:] == ("-DPOI_VEC_WIDTH=8", "-DPOI_TILE_ROWS=6",
                                         "-DPOI_TILE_COLS=2")
  monkeypatch.setenv(cpu_attention.VECTORS_ENV, "8x3")  # the rows: the kernel's own for W
  assert cpu_attention._flags()[-2:] == ("-DPOI_VEC_WIDTH=8", "-DPOI_TILE_COLS=3")


def test_no_compiler_is_a_clear_reason(monkeypatch):
  monkeypatch.setattr(cpu_attention, "_state", {})
  monkeypatch.setattr(cpu_attention, "_compiler", lambda: None)
  assert not cpu_attention.available()
  assert "no C++ compiler" in cpu_attention.unavailable_reason()
  with pytest.raises(RuntimeError, match="cpu_kernel: no C\\+\\+ compiler"):
    cpu_attention.attention(jnp.zeros((1, 2, 1, 4)), jnp.zeros((1, 2, 1, 4)),
                            jnp.zeros((1, 2, 1, 4)), None)


@needs_compiler
def test_mismatched_shapes_are_a_clear_error():
  """The kernel reads its buffers by the shapes it is given: a mismatch must not reach it."""
  q = jnp.zeros((2, 5, 3, 8))
  with pytest.raises(ValueError, match="must agree"):
    cpu_attention.attention(q, jnp.zeros((2, 6, 3, 4)), jnp.zeros((2, 6, 3, 4)), None)
  with pytest.raises(ValueError, match="bias must be"):
    cpu_attention.attention(q, jnp.zeros((2, 6, 3, 8)), jnp.zeros((2, 6, 3, 8)),
                            jnp.zeros((2, 5)))


def test_compiler_lookup_prefers_cxx(monkeypatch):
  gxx = shutil.which("g++") or shutil.which("c++")
  if gxx is None:
    pytest.skip("no g++/c++ on PATH to point $CXX at")
  monkeypatch.setenv("CXX", gxx)
  assert cpu_attention._compiler() == gxx
