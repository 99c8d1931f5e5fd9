"""bfloat16 matmuls on a CPU's AMX tiles, as a native kernel (`cpu_matmul_amx.cc`).

Intel Xeons from Sapphire Rapids on multiply bfloat16 on AMX tiles at several times their
float32 rate; PyTorch's ``torch.autocast("cpu", torch.bfloat16)`` runs its linear layers there.
jaxlib 0.10's XLA does not: a bfloat16 dot on a CPU becomes a float32 one between conversions
(docs/cpu_profile.md, sixth pass: 230-270 GFLOP/s against PyTorch's 900-2,200 on a 2-core Xeon).
`matmul(a, b)` is that product as an XLA FFI call on XLA's thread pool: bfloat16 operands, sums
and result in float32 (each product of two bfloat16 numbers is exact in float32, so it equals a
float32 matmul of the same bfloat16 values up to the order of the sums).

It is built on first use (`poi_jax.layers.native`, with ``-mamx-tile -mamx-bf16``) on a Linux
CPU whose flags list ``amx_tile`` and ``amx_bf16``; elsewhere, or without a compiler or a
compiler that knows AMX, `available()` is False and `unavailable_reason()` says why.
`poi_jax.layers.matmul` calls it for the dense layers when the matmul precision asks for
bfloat16 (``jax_default_matmul_precision=bfloat16``, ``--config.runtime.matmul_precision=
bfloat16``) on such a CPU.
"""
from __future__ import annotations

import functools
import logging
import os
import subprocess
import threading

import jax
import jax.numpy as jnp

from poi_jax.layers import native

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpu_matmul_amx.cc")
_FLAGS = (*native.BASE_FLAGS, "-mamx-tile", "-mamx-bf16")
_TARGET = "poi_jax_cpu_matmul_amx"
_CPU_FLAGS = ("amx_tile", "amx_bf16")

_log = logging.getLogger(__name__)
_state: dict[str, object] = {}  # "reason": why the kernel is unavailable (set once tried)
_lock = threading.Lock()


def cpu_has_amx() -> bool:
  """Whether this CPU's flags (Linux ``/proc/cpuinfo``) list AMX tiles with bfloat16."""
  flags = native.cpu_features().split()
  return all(f in flags for f in _CPU_FLAGS)


def _build_and_register() -> str | None:
  """None when the target is registered, else why not (logged once, at info: most CPUs have
  no AMX, and the dense layers then keep XLA's matmuls)."""
  if not cpu_has_amx():
    return "this CPU has no AMX bfloat16 tiles (amx_tile, amx_bf16 in /proc/cpuinfo)"
  compiler = native.compiler()
  if compiler is None:
    return "no C++ compiler ($CXX, c++, g++ or clang++ on PATH) to build the AMX matmul kernel"
  path = native.library_path("cpu_matmul_amx", _SOURCE, compiler, _FLAGS)
  try:
    if not os.path.exists(path):
      _log.info("building the AMX matmul kernel (once): %s", path)
      native.build(compiler, _FLAGS, _SOURCE, path)
    library = native.load_and_register(path, {_TARGET: "PoiCpuMatmulAmx"})
    granted = library.PoiCpuMatmulAmxTilesGranted()
  except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as e:
    return f"the AMX matmul kernel could not be built or loaded: {e}"
  if not granted:
    return ("Linux did not grant this process the AMX tiles (arch_prctl ARCH_REQ_XCOMP_PERM: "
            "a kernel before 5.16, or tiles disabled)")
  return None


def _load() -> bool:
  with _lock:
    if "reason" not in _state:
      _state["reason"] = _build_and_register()
      if _state["reason"] is not None:
        _log.info("%s; bfloat16-precision matmuls use XLA's", _state["reason"])
  return _state["reason"] is None


def available() -> bool:
  """Whether the kernel is built and registered (builds it on the first call)."""
  return _load()


def unavailable_reason() -> str | None:
  """Why `available()` is False (None when it is True)."""
  _load()
  return _state["reason"]


@functools.partial(jax.jit, static_argnames=("trans_a", "trans_b"))
def matmul(a: jax.Array, b: jax.Array, *, trans_a: bool = False,
           trans_b: bool = False) -> jax.Array:
  """``op(a) @ op(b)`` in float32 from bfloat16 operands on the AMX tiles.

  Args:
    a: ``(M, K)``, or ``(K, M)`` with ``trans_a``; cast to bfloat16 if it is not.
    b: ``(K, N)``, or ``(N, K)`` with ``trans_b``; likewise.
  Returns:
    ``(M, N)`` float32.
  """
  if not available():
    raise RuntimeError(f"the AMX matmul kernel is unavailable: {unavailable_reason()}")
  if a.ndim != 2 or b.ndim != 2:
    raise ValueError(f"matmul takes 2-D operands, got {a.shape} and {b.shape}")
  m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
  kb, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
  if k != kb:
    raise ValueError(f"contracted sizes differ: op(a) {m} x {k}, op(b) {kb} x {n}")
  return jax.ffi.ffi_call(_TARGET, jax.ShapeDtypeStruct((m, n), jnp.float32),
                          vmap_method="sequential")(
      a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), trans_a=trans_a, trans_b=trans_b)
