"""bfloat16 matmuls on AMX tiles (`poi_jax.layers.cpu_matmul_amx`) and the dense layers' use of
them under bfloat16 matmul precision (`poi_jax.layers.matmul`).

The reference is the product's definition, computed by PyTorch: the operands rounded to
bfloat16, then multiplied in float32 (each product of two bfloat16 numbers is exact in float32,
so the kernel differs from it only in the order of the sums). The kernel's tests need a CPU
with AMX tiles; elsewhere they skip, naming why, and the dispatch tests check that nothing
changes there."""
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from poi_jax import runtime
from poi_jax.layers import common, cpu_matmul_amx, matmul

needs_amx = pytest.mark.skipif(
    not cpu_matmul_amx.cpu_has_amx(),
    reason="this CPU has no AMX bfloat16 tiles: the kernel cannot run here (the dense layers "
           "keep XLA's matmuls: test_no_amx_keeps_xla_matmuls)")

LINEAR = (((2,), (0,)), ((), ()))


def _torch_bf16_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """``a @ b`` of the operands rounded to bfloat16, in float32."""
  ta = torch.from_numpy(np.asarray(a, np.float32)).bfloat16().float()
  tb = torch.from_numpy(np.asarray(b, np.float32)).bfloat16().float()
  return (ta.double() @ tb.double()).float().numpy()


# (M, K, N): MiniLM's feed-forward at 2,048 tokens; every remainder of a 32-wide block, K below
# one block, K a multiple of 2,048 bf16 (4 KB rows: the packed rows' padding), a single element.
SHAPES = [(2048, 384, 1536), (37, 50, 45), (64, 31, 33), (33, 2048, 65), (1, 1, 1), (5, 96, 17)]


@needs_amx
@pytest.mark.parametrize("m, k, n", SHAPES)
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False),
                                              (True, True)])
def test_kernel_equals_the_bfloat16_product(m, k, n, trans_a, trans_b):
  rng = np.random.default_rng(m * 7 + k * 3 + n)
  a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
  b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
  got = np.asarray(cpu_matmul_amx.matmul(jnp.asarray(a), jnp.asarray(b), trans_a=trans_a,
                                         trans_b=trans_b))
  want = _torch_bf16_product(a.T if trans_a else a, b.T if trans_b else b)
  assert got.shape == (m, n) and got.dtype == np.float32
  # float32 sums in another order: ~1e-7 relative to the terms' sum of magnitudes (~sqrt(K)).
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.sqrt(k)))


@needs_amx
def test_kernel_refuses_mismatched_shapes():
  with pytest.raises(ValueError, match="contracted sizes differ"):
    cpu_matmul_amx.matmul(jnp.zeros((4, 5)), jnp.zeros((6, 7)))
  with pytest.raises(ValueError, match="2-D operands"):
    cpu_matmul_amx.matmul(jnp.zeros((2, 4, 5)), jnp.zeros((5, 7)))


@needs_amx
def test_linear_under_bfloat16_precision_matches_pytorch_autocast_math():
  """A Linear (`common.dense`) under ``jax_default_matmul_precision=bfloat16``: the forward,
  ``dx`` and ``dW`` each the bfloat16 product of PyTorch's reference (``dW`` and ``dx`` from the
  bfloat16 ``x`` and ``W`` the forward used, the float32 ``dy``'s bfloat16 rounding), and the
  bias added in float32."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((3, 40, 96)).astype(np.float32)
  cot = rng.standard_normal((3, 40, 72)).astype(np.float32)
  layer = common.dense(96, 72, ("embed", "mlp"), init_std=0.5, dtype=jnp.float32,
                       rngs=nnx.Rngs(0))
  layer.bias[...] = jnp.asarray(rng.standard_normal(72), jnp.float32)
  w, bias = np.asarray(layer.kernel[...]), np.asarray(layer.bias[...])

  def loss(model, x):
    y = model(x)
    return jnp.sum(y * cot), y

  with jax.default_matmul_precision("bfloat16"):
    assert "poi_jax_cpu_matmul_amx" in str(jax.make_jaxpr(lambda x: layer(x))(jnp.asarray(x)))
    (_, y), (grads, dx) = nnx.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
        layer, jnp.asarray(x))
  dw = grads["kernel"][...]
  x2, cot2 = x.reshape(-1, 96), cot.reshape(-1, 72)
  np.testing.assert_allclose(np.asarray(y).reshape(-1, 72), _torch_bf16_product(x2, w) + bias,
                             rtol=0, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dx).reshape(-1, 96),
                             _torch_bf16_product(cot2, np.asarray(
                                 torch.from_numpy(w).bfloat16().float()).T), rtol=0, atol=1e-5)
  np.testing.assert_allclose(np.asarray(dw), _torch_bf16_product(
      np.asarray(torch.from_numpy(x2).bfloat16().float()).T, cot2), rtol=0, atol=1e-4)
  # And it is not the float32 product: the precision did change something.
  assert np.abs(np.asarray(y).reshape(-1, 72) - (x2 @ w + bias)).max() > 1e-4


@needs_amx
def test_bfloat16_linear_runs_on_the_tiles_and_rounds_like_pytorch():
  """``model.dtype=bfloat16`` (a Linear on bfloat16 inputs and weights) on a CPU with AMX: the
  three matmuls on the tiles whatever the precision, each the float32 sum of the bfloat16
  products rounded once to bfloat16, as PyTorch's bfloat16 ``linear`` on a CPU computes it: at
  most one bfloat16 step (2^-8 relative) from the float64 reference of the same bfloat16 values
  (a sum of another order can round the other way)."""
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.standard_normal((3, 40, 96)), jnp.bfloat16)
  w = jnp.asarray(rng.standard_normal((96, 72)) * 0.2, jnp.bfloat16)
  cot = jnp.asarray(rng.standard_normal((3, 40, 72)), jnp.bfloat16)
  f = lambda x, w: matmul.dot_general(x, w, LINEAR)
  assert "poi_jax_cpu_matmul_amx" in str(jax.make_jaxpr(f)(x, w))
  y, vjp = jax.vjp(f, x, w)
  dx, dw = vjp(cot)
  assert y.dtype == dx.dtype == dw.dtype == jnp.bfloat16
  f64 = lambda a: np.asarray(jnp.asarray(a, jnp.float32), np.float64)
  x2, w2, c2 = f64(x).reshape(-1, 96), f64(w), f64(cot).reshape(-1, 72)
  for name, got, want in (("y", y, x2 @ w2), ("dx", dx, c2 @ w2.T), ("dw", dw, x2.T @ c2)):
    got = f64(got).reshape(want.shape)
    step = np.maximum(np.abs(want), 1e-30) * 2.0 ** -8
    assert np.all(np.abs(got - want) <= step + 1e-6), (name, np.abs(got - want).max())
  # What PyTorch's bfloat16 linear gives, the same to within that step.
  ty = torch.nn.functional.linear(torch.from_numpy(f64(x)).bfloat16(),
                                  torch.from_numpy(w2.T.copy()).bfloat16()).double().numpy()
  assert np.all(np.abs(f64(y) - ty) <= np.abs(ty) * 2.0 ** -7 + 1e-6)


def test_default_precision_keeps_xla_matmuls():
  x, w = jnp.ones((2, 3, 4)), jnp.ones((4, 5))
  jaxpr = str(jax.make_jaxpr(lambda a, b: matmul.dot_general(a, b, LINEAR))(x, w))
  assert "poi_jax_cpu_matmul_amx" not in jaxpr and "custom_vjp_call" in jaxpr
  with jax.default_matmul_precision("float32"):
    assert not matmul.bfloat16_on_amx()


def test_no_amx_keeps_xla_matmuls(monkeypatch):
  """On a CPU without AMX (or where the kernel cannot be built) bfloat16 precision changes
  nothing in the dense layers, as XLA's CPU backend ignores it."""
  monkeypatch.setattr(cpu_matmul_amx, "_state", {"reason": "this CPU has no AMX tiles"})
  x, w = jnp.ones((2, 3, 4)), jnp.ones((4, 5))
  with jax.default_matmul_precision("bfloat16"):
    assert not matmul.bfloat16_on_amx()
    jaxpr = str(jax.make_jaxpr(lambda a, b: matmul.dot_general(a, b, LINEAR))(x, w))
  assert "poi_jax_cpu_matmul_amx" not in jaxpr and "custom_vjp_call" in jaxpr
  with pytest.raises(RuntimeError, match="AMX matmul kernel is unavailable: this CPU has no AMX"):
    cpu_matmul_amx.matmul(x[0], w)


def test_amx_is_read_from_the_cpu_flags(monkeypatch):
  monkeypatch.setattr("poi_jax.layers.native.cpu_features",
                      lambda: "flags : fpu avx512f amx_bf16 amx_tile amx_int8")
  assert cpu_matmul_amx.cpu_has_amx()
  monkeypatch.setattr("poi_jax.layers.native.cpu_features", lambda: "flags : fpu avx2 avx512f")
  assert not cpu_matmul_amx.cpu_has_amx()
  monkeypatch.setattr(cpu_matmul_amx, "_state", {})
  assert "no AMX bfloat16 tiles" in cpu_matmul_amx.unavailable_reason()


def test_runtime_sets_the_matmul_precision():
  before = jax.config.jax_default_matmul_precision
  try:
    applied = runtime.configure({"matmul_precision": "bfloat16", "compilation_cache_dir": "none"})
    assert applied["matmul_precision"] == "bfloat16"
    assert jax.config.jax_default_matmul_precision == "bfloat16"
  finally:
    jax.config.update("jax_default_matmul_precision", before)
  with pytest.raises(ValueError, match="runtime.matmul_precision='bf16': choose one of"):
    runtime.configure({"matmul_precision": "bf16"})


def test_the_precision_leaves_a_first_configure_s_other_settings_applied():
  """In a fresh process (the first `configure` applies the process-wide settings), setting the
  precision must not make the others look applied already."""
  code = ("from poi_jax import runtime; a = runtime.configure({'matmul_precision': 'bfloat16', "
          "'cpu_malloc': 'reuse', 'compilation_cache_dir': 'none'}); "
          "import jax; assert jax.config.jax_default_matmul_precision == 'bfloat16'; "
          "assert a['cpu_malloc'] in ('reuse', 'system (not glibc)'), a; "
          "assert 'cpu_forward_ynnpack' in a, a")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert done.returncode == 0, done.stderr[-2000:]


def test_environment_says_whether_the_dense_layers_run_the_precision(monkeypatch):
  """A run's environment.json names the matmul precision and, on a CPU under bfloat16, whether
  the dense layers ran it (the AMX kernel) or XLA's float32 matmuls did."""
  from poi_jax.train import environment
  # (the suite runs at "highest": tests/conftest.py)
  assert environment.describe()["matmul_precision"] == str(
      jax.config.jax_default_matmul_precision or "default")
  monkeypatch.setattr(cpu_matmul_amx, "_state", {"reason": "this CPU has no AMX tiles"})
  with jax.default_matmul_precision("bfloat16"):
    assert environment.describe()["matmul_precision"] == (
        "bfloat16 (not on this CPU: this CPU has no AMX tiles; XLA's float32 matmuls)")
  monkeypatch.setattr(cpu_matmul_amx, "_state", {"reason": None})
  with jax.default_matmul_precision("bfloat16"):
    assert environment.describe()["matmul_precision"] == (
        "bfloat16 (dense layers on the AMX kernel)")


def test_tiles_refused_by_linux_keep_xla_matmuls(monkeypatch):
  """A CPU that lists AMX but a kernel that refuses the tiles: unavailable at load time, with
  the reason, so the dense layers keep XLA's matmuls instead of failing inside a compiled step."""
  class Library:
    def PoiCpuMatmulAmxTilesGranted(self):  # pylint: disable=invalid-name
      return 0
  monkeypatch.setattr(cpu_matmul_amx, "_state", {})
  monkeypatch.setattr(cpu_matmul_amx, "cpu_has_amx", lambda: True)
  monkeypatch.setattr("poi_jax.layers.native.compiler", lambda: "/usr/bin/c++")
  monkeypatch.setattr("poi_jax.layers.native.library_path", lambda *a: __file__)  # exists
  monkeypatch.setattr("poi_jax.layers.native.load_and_register", lambda path, targets: Library())
  assert not cpu_matmul_amx.available()
  assert "did not grant this process the AMX tiles" in cpu_matmul_amx.unavailable_reason()
  with jax.default_matmul_precision("bfloat16"):
    assert not matmul.bfloat16_on_amx()
