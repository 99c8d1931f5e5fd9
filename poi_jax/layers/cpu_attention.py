"""Attention for XLA's CPU backend as a native kernel (``model.attention=cpu_kernel``), built on
first use.

XLA's CPU backend computes attention as whole-array passes over the ``(B, N, Lq, Lk)`` scores,
which go to memory and back between the matmuls and the softmax; PyTorch's CPU kernel works on a
block of queries at a time with its scores in cache, and is about twice as fast as the best
XLA-op path (docs/cpu_profile.md).
`cpu_attention.cc` does the same as an XLA FFI call (forward and backward, float32, additive key
bias, attention dropout drawn inside the kernel), running on XLA's intra-op thread pool: one
BERT-base layer's attention forward + backward at 8 x 384 goes from 102 ms (``explicit_vjp``) to
67 ms on 2 cores (PyTorch: 53-73; `python bench/cpu_pieces.py --pieces=attention
--shape=bert-base --seq=384`).

**Build.** The C++ source ships with the package and is compiled on first use for the machine
that runs it, into the kernel cache (`poi_jax.layers.native`: ``$POI_JAX_KERNEL_CACHE``, default
``~/.cache/poi_jax/kernels``; the library's name hashes the sources, flags, compiler, jaxlib's
version and the CPU's features). Its vectors and register tiles follow the machine's registers
(16 floats and tiles of 4 rows x 4 vectors with AVX-512; 8 floats and 6 x 2 with AVX2; 4 floats
and 6 x 2 with SSE, 4 x 4 on ARM): with AVX-512's on an AVX2 CPU the tiles spilled and the
kernel ran 6.8x slower than ``explicit_vjp`` (issue 51). ``$POI_JAX_CPU_ATTENTION_VECTORS``
(``WxRxC``, e.g. ``8x6x2``) builds another width and tile, for tests and tuning. No compiler, or
a failed build: `available()` is False with the reason (`unavailable_reason()`), logged once,
and ``model.attention=auto`` keeps the ``explicit_vjp`` path; ``model.attention=cpu_kernel``
raises that reason.

**bfloat16 on AMX tiles.** Where ``-march=native`` enables AMX-BF16 (Intel Xeons from Sapphire
Rapids on) the library also has a bfloat16 variant (`attention(..., bfloat16=True)`,
`amx_available()`): the same blocks, with the operands of the five products (q, k, v, dO, the
probabilities, dS) rounded to bfloat16 and multiplied on the tiles, the sums, softmax and
results in float32, what ``jax_default_matmul_precision=bfloat16`` asks of a dot and what
PyTorch's CPU attention computes under bfloat16 autocast. ``model.attention=cpu_kernel`` (or
``auto`` choosing it) runs it under that precision (``runtime.matmul_precision=bfloat16``),
with the dense layers on the AMX matmul kernel (`poi_jax.layers.matmul`).

`attention(q, k, v, bias)` is differentiable (custom VJP: the backward recomputes the
probabilities from the forward's row maxima and sums, as flash attention does from their
log-sum-exp). Under `jax.vmap` it runs once per mapped element (with dropout, a seed shared by
the mapped elements draws the same mask for each: map the seeds too for independent masks). On a
mesh of several devices XLA does not partition an FFI call (it gathers the operands onto each
device), so ``auto`` takes this kernel on a single-device CPU run only.
"""
from __future__ import annotations

import functools
import logging
import os
import subprocess
import threading

import jax
import jax.numpy as jnp
import numpy as np

from poi_jax.layers import native

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_attention.cc")
_FLAGS = native.BASE_FLAGS
_TARGETS = {"poi_jax_cpu_attention_fwd": "PoiCpuAttentionForward",
            "poi_jax_cpu_attention_bwd": "PoiCpuAttentionBackward"}
CACHE_ENV = native.CACHE_ENV
# "WxRxC": vectors of W floats (4, 8 or 16) and register tiles of R rows x C vectors, instead of
# the kernel's choice for the machine (for tests and tuning; the library name hashes it too).
VECTORS_ENV = "POI_JAX_CPU_ATTENTION_VECTORS"

_log = logging.getLogger(__name__)
_state: dict[str, object] = {}  # "reason": why the kernel is unavailable (set once tried)
_lock = threading.Lock()  # one build and registration per process, whichever thread traces first


cache_dir = native.cache_dir
_compiler = native.compiler
_cpu_features = native.cpu_features


def _flags() -> tuple[str, ...]:
  """The compiler's flags: `_FLAGS`, and the vector width and tile of ``$VECTORS_ENV`` if set
  (``WxRxC``: W floats a vector, register tiles of R rows x C vectors; ``WxC``: the kernel's own
  rows for W)."""
  vectors = os.environ.get(VECTORS_ENV, "").strip()
  if not vectors:
    return _FLAGS
  parts = vectors.split("x")
  sizes_ok = all(p.isdigit() and 1 <= int(p) <= 8 for p in parts[1:])
  if len(parts) not in (2, 3) or parts[0] not in ("4", "8", "16") or not sizes_ok:
    raise ValueError(f"${VECTORS_ENV} must be WxRxC or WxC with W 4, 8 or 16 and R, C 1 to 8, "
                     f"got {vectors!r}")
  rows = (f"-DPOI_TILE_ROWS={parts[1]}",) if len(parts) == 3 else ()
  return (*_FLAGS, f"-DPOI_VEC_WIDTH={parts[0]}", *rows, f"-DPOI_TILE_COLS={parts[-1]}")


@functools.lru_cache(maxsize=8)
def _digest(compiler: str, flags: tuple[str, ...]) -> str:
  """`native.digest` of this kernel (memoised: `build_id` is asked once per traced attention
  layer)."""
  return native.digest(_SOURCE, compiler, flags)


def _library_path(compiler: str) -> str:
  return os.path.join(cache_dir(), f"cpu_attention-{_digest(compiler, _flags())}.so")


def build_id() -> str:
  """The kernel this process would build or load (`_digest`; "none" without a compiler): part of
  ``auto``'s timing key (`cpu_attention_choice`), so that a changed kernel is timed again."""
  compiler = _compiler()
  return "none" if compiler is None else _digest(compiler, _flags())


def _load() -> bool:
  """Builds (once per machine and version) and registers the FFI targets; False when it cannot,
  with the reason kept for `unavailable_reason`."""
  with _lock:
    if "reason" not in _state:
      _state["reason"] = _build_and_register()
  return _state["reason"] is None


def _build_and_register() -> str | None:
  """None when the targets are registered, else why not (logged once)."""
  reason = None
  compiler = _compiler()
  if compiler is None:
    reason = ("no C++ compiler ($CXX, c++, g++ or clang++ on PATH) to build the CPU attention "
              "kernel")
  else:
    path = _library_path(compiler)
    try:
      if not os.path.exists(path):
        _log.info("building the CPU attention kernel (once): %s", path)
        native.build(compiler, _flags(), _SOURCE, path)
      library = native.load_and_register(path, _TARGETS)
    except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as e:
      reason = f"the CPU attention kernel could not be built or loaded: {e}"
  if reason is not None:
    _log.warning("%s; attention uses XLA's ops (model.attention=explicit_vjp)", reason)
  else:
    _state["amx_reason"] = _register_amx(library)
  return reason


def _register_amx(library) -> str | None:
  """None when the library has the bfloat16 variant (built where -march=native enables
  AMX-BF16) and Linux grants the tiles, else why not."""
  if not hasattr(library, "PoiCpuAttentionAmxTilesGranted"):
    return "the kernel was built without AMX-BF16 (this CPU, or its compiler, has none)"
  if not library.PoiCpuAttentionAmxTilesGranted():
    return ("Linux did not grant this process the AMX tiles (arch_prctl ARCH_REQ_XCOMP_PERM: "
            "a kernel before 5.16, or tiles disabled)")
  return None


def available() -> bool:
  """Whether the kernel is built and registered (builds it on the first call)."""
  return _load()


def unavailable_reason() -> str | None:
  """Why `available()` is False (None when it is True)."""
  _load()
  return _state["reason"]


def amx_available() -> bool:
  """Whether the bfloat16 variant (``bfloat16=True``, on AMX tiles) is built and registered."""
  return _load() and _state.get("amx_reason") is None


def amx_unavailable_reason() -> str | None:
  """Why `amx_available()` is False (None when it is True)."""
  if not _load():
    return _state["reason"]
  return _state.get("amx_reason")


def bfloat16_variant(dtype) -> bool:
  """Whether attention on ``dtype`` inputs traced now takes the bfloat16 variant: the inputs are
  bfloat16 (``model.dtype=bfloat16``: their products are exact in the variant, as in XLA's
  bfloat16 dot) or the matmul precision asks for bfloat16 (`bfloat16_precision`), and the
  variant is available."""
  return bfloat16_precision() or (jnp.dtype(dtype) == jnp.bfloat16 and amx_available())


def bfloat16_precision() -> bool:
  """Whether attention traced now takes the bfloat16 variant: the matmul precision asks for
  bfloat16 (``jax_default_matmul_precision``, ``runtime.matmul_precision``) and the variant is
  available (the dense layers' rule, `poi_jax.layers.matmul`)."""
  return jax.config.jax_default_matmul_precision == "bfloat16" and amx_available()


def _forward_call(q, k, v, bias, seed, rate, bfloat16):
  b, lq, n, _ = q.shape
  return jax.ffi.ffi_call(
      "poi_jax_cpu_attention_fwd",
      (jax.ShapeDtypeStruct(q.shape, jnp.float32),
       jax.ShapeDtypeStruct((b, n, lq), jnp.float32),   # each query's max score
       jax.ShapeDtypeStruct((b, n, lq), jnp.float32)),  # and 1 / sum(exp(score - max))
      vmap_method="sequential")(q, k, v, bias, seed, dropout_rate=np.float32(rate),
                                bfloat16=bool(bfloat16))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _attention(q, k, v, bias, seed, rate, bfloat16):
  return _forward_call(q, k, v, bias, seed, rate, bfloat16)[0]


def _attention_fwd(q, k, v, bias, seed, rate, bfloat16):
  out, row_max, inv_sum = _forward_call(q, k, v, bias, seed, rate, bfloat16)
  return out, (q, k, v, bias, seed, out, row_max, inv_sum)


def _attention_bwd(rate, bfloat16, residuals, d_out):
  q, k, v, bias, seed, out, row_max, inv_sum = residuals
  dq, dk, dv = jax.ffi.ffi_call(
      "poi_jax_cpu_attention_bwd",
      tuple(jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q, k, v)),
      vmap_method="sequential")(q, k, v, bias, seed, out, row_max, inv_sum, d_out,
                                dropout_rate=np.float32(rate), bfloat16=bool(bfloat16))
  # The bias comes from the padding mask (no parameter behind it): no gradient; the seed is an
  # integer (float0 cotangent).
  return dq, dk, dv, jnp.zeros_like(bias), np.zeros(seed.shape, jax.dtypes.float0)


_attention.defvjp(_attention_fwd, _attention_bwd)


def dropout_seed(key: jax.Array) -> jax.Array:
  """The kernel's dropout seed, ``(2,)`` uint32, drawn from a JAX PRNG key."""
  return jax.random.bits(key, (2,), jnp.uint32)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array | None, *,
              dropout_rate: float = 0.0, seed: jax.Array | None = None,
              bfloat16: bool = False) -> jax.Array:
  """``dropout(softmax(q k^T / sqrt(Dh) + bias)) v`` per head, computed in float32.

  Args:
    q: ``(B, Lq, N, Dh)``; k, v: ``(B, Lk, N, Dh)``.
    bias: additive float32 ``(B, Lk)`` over the keys (None: no mask).
    dropout_rate: the probabilities' drop rate (0: none). The keep mask is the kernel's own,
      drawn from ``seed`` (`dropout_seed`) by a hash of (seed, batch x head, query, key) in the
      forward and again in the backward, never stored; kept probabilities are scaled by
      ``1 / (1 - rate)``. Its bits are not `jax.random.bernoulli`'s (the other kernels' masks).
    seed: ``(2,)`` uint32, required when ``dropout_rate > 0``.
    bfloat16: the variant on AMX tiles (`amx_available`): the operands of the five products
      (q, k, v, dO, the probabilities, dS) rounded to bfloat16, their sums, the softmax and the
      results in float32, as ``jax_default_matmul_precision=bfloat16`` asks of a dot and as
      PyTorch's CPU attention computes under bfloat16 autocast.
  Returns:
    ``(B, Lq, N, Dh)`` in the dtype of ``v``.
  """
  if not _load():
    raise RuntimeError(f"model.attention=cpu_kernel: {_state['reason']}")
  if bfloat16 and not amx_available():
    raise RuntimeError(f"cpu_attention.attention(bfloat16=True): {amx_unavailable_reason()}")
  # The kernel indexes its buffers by these shapes and checks nothing itself.
  if q.ndim != 4 or k.shape != v.shape or k.ndim != 4 or (q.shape[0], q.shape[2:]) != (
      k.shape[0], k.shape[2:]):
    raise ValueError(f"cpu_attention.attention: q (B, Lq, N, Dh) and k, v (B, Lk, N, Dh) must "
                     f"agree; got q {q.shape}, k {k.shape}, v {v.shape}")
  if bias is not None and bias.shape != (k.shape[0], k.shape[1]):
    raise ValueError(f"cpu_attention.attention: bias must be (B, Lk) = "
                     f"{(k.shape[0], k.shape[1])}, got {bias.shape}")
  if not 0.0 <= dropout_rate < 1.0:
    raise ValueError(f"cpu_attention.attention: dropout_rate must be in [0, 1), got "
                     f"{dropout_rate}")
  if dropout_rate > 0.0 and seed is None:
    raise ValueError("cpu_attention.attention: dropout_rate > 0 needs a seed (dropout_seed(key))")
  if bias is None:
    bias = jnp.zeros((k.shape[0], k.shape[1]), jnp.float32)
  seed = jnp.zeros((2,), jnp.uint32) if seed is None else jnp.asarray(seed, jnp.uint32)
  if seed.shape != (2,):
    raise ValueError(f"cpu_attention.attention: seed must be (2,) uint32, got {seed.shape}")
  f32 = lambda x: x.astype(jnp.float32)
  return _attention(f32(q), f32(k), f32(v), f32(bias), seed, float(dropout_rate),
                    bool(bfloat16)).astype(v.dtype)
