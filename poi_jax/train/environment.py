"""What a run computed on: the devices and the versions of the libraries that did the work.

A score is only as reproducible as its record of where it came from. A run writes this next to
its config (``<workdir>/environment.json``) when it is accepted, and prints its one-line form, so
that a result copied back from a lent GPU says which GPU and which JAX produced it without anyone
having written it down (`experiments/ablation.py` carries it into ``ablation.json``, and
`experiments/claims.py merge` into ``docs/claims.json``).
"""
from __future__ import annotations

import importlib.metadata
import os
import platform

# The distributions whose versions can change a run's numbers or speed.
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "transformers", "tokenizers")


def _version(package: str) -> str | None:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def _cpu_model() -> str:
  """The host CPU's model name (Linux), or the machine type elsewhere."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.machine()


def describe() -> dict:
  """``{"device", "platform", "device_count", "process_count", "matmul_precision",
  ["cpu_malloc",] "versions"}``:
  ``device`` is the devices' kind (e.g. ``NVIDIA H100 80GB HBM3``; on the CPU backend the CPU's
  model and the cores this process may use, since JAX's kind is only ``cpu``), ``versions`` maps
  each of `PACKAGES` that is installed, and ``python``, to its version; ``cpu_malloc`` (CPU
  only) is the heap setting `poi_jax.runtime.configure` applied."""
  import jax  # (here: `device` and `software` format a record without JAX, e.g. in the runner)
  devices = jax.devices()
  versions = {"python": platform.python_version()}
  versions.update({p: v for p in PACKAGES if (v := _version(p)) is not None})
  kind = devices[0].device_kind
  record = {}
  if devices[0].platform == "cpu":
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    kind = f"{_cpu_model()}, {cores} cores"
    from poi_jax import runtime
    # The heap's setting moves a CPU run's speed by 1.1-1.4x (poi_jax/runtime.py).
    record["cpu_malloc"] = runtime.applied().get("cpu_malloc", "system (not configured)")
  return {"device": kind, "platform": devices[0].platform,
          "device_count": len(devices), "process_count": jax.process_count(),
          # "default" on a GPU is TF32-class matmuls; results differ from float32's in the 4th
          # decimal (docs/testing.md), so it belongs with the scores.
          "matmul_precision": _matmul_precision(devices),
          **record, "versions": versions}


def _matmul_precision(devices) -> str:
  """JAX's default matmul precision; on one CPU under ``bfloat16``, also whether the dense
  layers run it (the AMX kernel) or not (XLA's CPU matmuls stay float32)."""
  import jax
  precision = str(jax.config.jax_default_matmul_precision or "default")
  if precision == "bfloat16" and devices[0].platform == "cpu":
    from poi_jax.layers import cpu_matmul_amx
    if len(devices) == 1 and cpu_matmul_amx.available():
      return "bfloat16 (dense layers on the AMX kernel)"
    why = cpu_matmul_amx.unavailable_reason() if len(devices) == 1 else "several devices"
    return f"bfloat16 (not on this CPU: {why}; XLA's float32 matmuls)"
  return precision



def software(env: dict) -> str:
  """The versions that decide a result, one line: ``jax 0.10.2, flax 0.12.8, ...``."""
  v = env["versions"]
  line = ", ".join(f"{p} {v[p]}" for p in ("jax", "jaxlib", "flax", "optax") if p in v)
  return f"{line}; matmul precision {env['matmul_precision']}"


def device(env: dict) -> str:
  """``NVIDIA H100 80GB HBM3 x 8`` (the global device count), ``AMD EPYC, 2 cores`` on the CPU;
  ``over N processes`` when more than one."""
  over = f" over {env['process_count']} processes" if env["process_count"] > 1 else ""
  count = "" if env["platform"] == "cpu" else f" x {env['device_count']}"
  return f"{env['device']}{count}{over}"
