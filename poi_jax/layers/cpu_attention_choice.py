"""``model.attention=auto`` on a CPU: the attention kernel measured fastest on this machine.

Which attention kernel is fastest on a CPU depends on the CPU. On 2026-11-26 the native kernel
(`poi_jax.layers.cpu_attention`) made the MiniLM training step 1.5x faster than XLA's attention on
one 2-core AMD EPYC host and 2.5x slower on another (issue 51). A fixed rule picks wrong on one
of them, so ``auto`` times the candidates once per machine and shape and keeps the answer, as
cuDNN's and XLA's GPU autotuners do for their own kernels:

* **Candidates** (`poi_jax.layers.attention.cpu_candidates`): the native kernel (when it could
  be built; it draws attention dropout itself) and ``explicit_vjp``, with ``xla`` without
  attention dropout and ``explicit`` with it (XLA's fused API has no dropout).
* **Timing**: forward + backward of the attention core at the traced shape and dtype, each
  compiled on its own, the minimum of `REPEATS` runs after a warm-up (about 1-3 s, once).
* **Cache**: one JSON file in the kernel cache (`cpu_attention.cache_dir`,
  ``$POI_JAX_KERNEL_CACHE``), keyed by the CPU (model name and feature flags), the usable cores,
  jaxlib's version, the native kernel's build (`cpu_attention.build_id`: a changed kernel is
  timed again), ``$XLA_FLAGS`` when set, the dtype (and whether the native kernel runs its
  bfloat16 variant: bfloat16 matmul precision on AMX tiles), dropout and the shape; written
  atomically (a
  temporary file renamed), so a concurrent writer costs at most a second timing. Another machine
  sharing the home directory gets keys of its own.
* **No timing** (the rule instead: the native kernel where it applies, else ``explicit_vjp``)
  for problems under `MIN_SCORES` attention scores (unit tests' toy models, where the kernels
  differ by microseconds), in a run of several devices or processes (each process must compile
  the same program), and with ``POI_JAX_ATTENTION_PROBE=0`` (the same kernel on every machine).
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import tempfile
import threading
import time
from typing import Callable, Mapping

import jax

from poi_jax.layers import cpu_attention

PROBE_ENV = "POI_JAX_ATTENTION_PROBE"
MIN_SCORES = 1 << 20  # B * N * Lq * Lk below which the rule decides without timing
REPEATS = 3
FILE_NAME = "attention_choice.json"

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_memo: dict[str, str] = {}  # key -> choice, this process


def probing_enabled() -> bool:
  return os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def cpu_identity() -> str:
  """The CPU a timing holds for: model name, feature flags, usable cores, jaxlib's version."""
  import jaxlib
  model = flags = ""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if not model and line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
        elif not flags and line.startswith(("flags", "Features")):
          flags = line.split(":", 1)[1].strip()
  except OSError:
    model = platform.processor() or platform.machine()
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  flags_hash = hashlib.sha256(flags.encode()).hexdigest()[:12]
  return f"{model or platform.machine()}|flags {flags_hash}|{cores} cores|jaxlib {jaxlib.__version__}"


def cache_path() -> str:
  return os.path.join(cpu_attention.cache_dir(), FILE_NAME)


def _read(path: str) -> dict:
  try:
    with open(path) as f:
      data = json.load(f)
    return data if isinstance(data, dict) else {}
  except (OSError, ValueError):
    return {}  # none yet, or damaged: timed again and rewritten


def _write(path: str, data: dict) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".json.tmp", dir=os.path.dirname(path))
  try:
    with os.fdopen(fd, "w") as f:
      json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def time_run(run: Callable[[], object], repeats: int = REPEATS) -> float:
  """Seconds of ``run()`` (which blocks until its result is ready): the minimum of ``repeats``
  runs after one warm-up run (which compiles)."""
  run()
  best = math.inf
  for _ in range(repeats):
    t0 = time.perf_counter()
    run()
    best = min(best, time.perf_counter() - t0)
  return best


def _xla_flags_part() -> str:
  """``|xla flags <hash>`` when ``$XLA_FLAGS`` is set, else nothing: XLA's candidates run what
  those flags compile (another backend optimisation level, YNNPACK's fusions off, ...), so a
  timing taken under other flags says nothing of these. Without flags the key is unchanged."""
  flags = " ".join(os.environ.get("XLA_FLAGS", "").split())
  return f"|xla flags {hashlib.sha256(flags.encode()).hexdigest()[:12]}" if flags else ""


def key_of(shape: tuple[int, ...], dtype, dropout: bool) -> str:
  # The native kernel's build (source, flags, compiler) is in the key: a timing of one build says
  # nothing of the next (the AVX2 fix of 2026-11-27 made it 11x faster on such a CPU).
  # The native kernel's bfloat16 variant (bfloat16 matmul precision or inputs, on AMX) is timed
  # apart: "bf16 matmuls" (also what a bfloat16 problem's key lacked while the kernel was not
  # among its candidates, so those older timings are not reused).
  precision = "|bf16 matmuls" if cpu_attention.bfloat16_variant(dtype) else ""
  return (f"{cpu_identity()}|kernel {cpu_attention.build_id()}{_xla_flags_part()}|"
          f"{jax.numpy.dtype(dtype).name}{precision}|dropout {int(dropout)}|"
          f"shape {'x'.join(map(str, shape))}")


def fastest(key: str, candidates: Mapping[str, Callable[[], Callable[[], object]]],
            timer: Callable[[Callable[[], object]], float] = time_run) -> str:
  """The candidate with the shortest time for ``key``, timed on the first call on this machine
  (``candidates``: name -> a factory of its zero-argument run) and read from the cache after."""
  with _lock:
    if key in _memo and _memo[key] in candidates:
      return _memo[key]
    path = cache_path()
    record = _read(path).get(key)
    if isinstance(record, dict) and record.get("choice") in candidates and set(
        record.get("seconds", {})) >= set(candidates):
      _memo[key] = record["choice"]
      return record["choice"]
    seconds = {}
    for name, make in candidates.items():
      try:
        seconds[name] = timer(make())
      except Exception as e:  # pylint: disable=broad-except  # a kernel that fails is not chosen
        _log.warning("attention probe: %s failed at %s (%s); not a candidate", name, key, e)
    if not seconds:
      raise RuntimeError(f"attention probe: every candidate failed at {key}")
    choice = min(seconds, key=seconds.get)
    data = _read(path)  # again: another process may have added keys meanwhile
    data[key] = {"choice": choice, "seconds": seconds,
                 "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
      _write(path, data)
    except OSError as e:  # a read-only home: time again next run, say why once
      _log.warning("attention probe: cannot write %s (%s)", path, e)
    _log.info("attention probe: %s at %s (%s)", choice, key,
              ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in sorted(seconds.items())))
    _memo[key] = choice
    return choice
