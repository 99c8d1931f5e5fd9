"""The devices a computation is being traced for, which decide the backend-specific kernels
(`attention.choose`, `matmul.dot_general`).

Inside the engine's ``jax.set_mesh(mesh)`` (or ``jax.sharding.use_abstract_mesh``) that is the
mesh's platform and size, not the process's default backend: a step compiled ahead of time for a
TPU topology from a CPU process (``jax.experimental.topologies``; MaxText's train_compile does the
same) must not pick the CPU attention kernel, an XLA FFI call the TPU compiler has no emitter for
(issue 39). Outside a mesh, the process's default backend and its device count.
"""
from __future__ import annotations

import jax


def platform_and_devices() -> tuple[str, int]:
  """``(platform, device count)`` of the current mesh, else of the default backend. Platforms
  are JAX's: ``"cpu"``, ``"gpu"`` (CUDA and ROCm), ``"tpu"``."""
  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.empty:
    device = getattr(mesh, "abstract_device", None)
    platform = getattr(device, "platform", None)
    if platform:
      return ("gpu" if platform in ("cuda", "rocm") else platform), mesh.size
  return jax.default_backend(), jax.device_count()
