"""Process-wide runtime settings the entry points apply before JAX starts its backend.

``configure(config.runtime)`` is called by `poi_jax.main`, `poi_jax.inference.reader.Reader.load`
and the benchmarks in ``bench/``; importing a module of poi_jax changes nothing (tests/test_layout.py).
A library user who builds the engine's pieces directly calls it once, first thing. The knobs:

* ``compilation_cache_dir``: JAX's persistent compilation cache, so that a second run (a second
  quickstart, ``--mode=eval`` after ``train``, each test that builds the same step) loads the
  compiled programs instead of compiling them again. ``""`` (default): ``$JAX_COMPILATION_CACHE_DIR``
  when set, else ``$XDG_CACHE_HOME/poi_jax/jax`` (``~/.cache/poi_jax/jax``); ``"none"``: off; any
  other value: that directory. Every program is cached, however small or quick to compile
  (JAX's own default skips programs that compile in under a second: most of the engine's).
* ``cpu_malloc``: ``"auto"`` (default): ``"reuse"`` for a training run (`poi_jax.main` with
  ``--mode=train`` or ``train_and_eval``: ``configure(..., training=True)``), ``"system"`` for
  everything else. ``"system"``: glibc's defaults, memory bounded by what is live.
  ``"reuse"`` keeps freed memory in the process (glibc only; CPU-only runs: on an accelerator the
  step's temporaries are device memory). XLA's CPU runtime allocates each step's temporaries
  (about 1 GB for the MiniLM POI-Net step, 8 x 256) afresh, and glibc serves blocks that large
  with a new ``mmap`` every time, so every step first-touches a gigabyte of new pages: ~130,000
  to 265,000 page faults a step. ``"reuse"`` sets ``mallopt``: one arena, no ``mmap`` for large
  blocks, no trimming, so later steps reuse the pages of earlier ones (0 faults a step from the
  4th on; the step alone 1.13-1.36x faster, ``bench/cpu_ab.py --variant``). The price: the heap
  keeps what was freed, the compilers' working memory included, so the training loop hands it
  back (`release_freed_memory`) after its first step and around each evaluation; the CPU
  quickstart then peaks at 4.1-4.3 GB against 2.5 GB with ``"system"`` (6.3 GB without the
  hand-backs), 1.07-1.10x faster end to end (docs/performance.md). Processes that never reach the
  loop (a test suite, the `Reader`) would keep their compilers' garbage, hence ``"auto"``;
  the server asks for ``"reuse"`` itself (its own flag).
  It must run before XLA's threads first allocate, i.e. before the backend starts. (glibc's
  ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, set before Python starts, gives 2 MiB pages, 600
  faults a step, no retained memory; on the 2-core machine it was slower, not faster.)
* ``xla_cpu_flags``: XLA flags added to ``$XLA_FLAGS`` for CPU-only runs (``JAX_PLATFORMS=cpu``
  or no accelerator found), before the backend starts; a flag already in ``$XLA_FLAGS`` wins.
* ``cpu_forward_ynnpack``: whether forward-only programs on a CPU (the engine's predict step:
  evaluation and the predict CLI; the `Reader` and the server) keep XLA's YNNPACK fusions.
  ``False`` (default): they are compiled with `FORWARD_CPU_COMPILER_OPTIONS`, per program, so the
  training step keeps XLA's defaults. Why: with YNNPACK on, XLA's CPU compiler fuses a whole
  encoder layer's inference (attention output, feed-forward, both layer norms and the next
  layer's query/key/value projections) into one YNNPACK fusion, slower than its matmuls run
  alone; without it the MiniLM forward is 1.2-1.3x faster at 128-384 tokens on the 2-core CPU
  (AMD EPYC, jaxlib 0.10.2; ``bench/forward_fusion.py``), the logits equal to 3e-6. The
  training step (forward + backward) gains nothing (``bench/cpu_ab.py``), so it keeps the
  default. A jaxlib without the option compiles with XLA's defaults (checked once).
* ``matmul_precision``: JAX's ``jax_default_matmul_precision`` for the process (``""``, the
  default: left as it is, i.e. ``$JAX_DEFAULT_MATMUL_PRECISION`` or XLA's default). ``"bfloat16"``
  is JAX's name for its fastest precision (one bfloat16 pass on a TPU, XLA's default on a GPU);
  on a single-device CPU with AMX tiles (Intel Xeon from Sapphire Rapids on) it runs the dense
  layers on the native AMX kernel (`poi_jax.layers.matmul`), as ``torch.autocast("cpu",
  torch.bfloat16)`` runs linear layers: the MiniLM step 1.6x faster on a 2-core Xeon
  (docs/performance.md); on other CPUs it changes nothing. ``"float32"``/``"tensorfloat32"`` as
  JAX defines them.

The settings apply once, to the process: a second `configure` with other values only changes the
cache directory and the matmul precision (JAX's config) and says nothing about the rest.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import logging
import os
import sys

import ml_collections

CACHE_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8

_applied: dict[str, object] = {}

# An accelerator plugin JAX may load -> the device files its hardware shows on Linux (TPU VMs:
# /dev/accel* up to v4, /dev/vfio/<n> from v5e; NVIDIA: the driver's control and device nodes;
# ROCm: the kernel fusion driver).
ACCELERATOR_DEVICE_FILES = {
    "libtpu": ("/dev/accel*", "/dev/vfio/[0-9]*"),
    "jax_cuda12_plugin": ("/dev/nvidiactl", "/dev/nvidia[0-9]*"),
    "jax_cuda13_plugin": ("/dev/nvidiactl", "/dev/nvidia[0-9]*"),
    "jax_rocm60_plugin": ("/dev/kfd",),
}

# XLA debug options for forward-only programs on a CPU (``cpu_forward_ynnpack=False``): no
# YNNPACK fusions: dots and elementwise ops take XLA's other CPU paths.
FORWARD_CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def defaults() -> ml_collections.ConfigDict:
  """The runtime section of `poi_jax/config/base.py` (for configs written before it existed)."""
  c = ml_collections.ConfigDict()
  c.compilation_cache_dir = ""
  c.cpu_malloc = "auto"
  c.xla_cpu_flags = ""
  c.cpu_forward_ynnpack = False
  c.matmul_precision = ""
  return c


MATMUL_PRECISIONS = ("", "default", "bfloat16", "tensorfloat32", "float32")
CPU_MALLOCS = ("auto", "reuse", "system")


def default_cache_dir() -> str:
  """``$XDG_CACHE_HOME/poi_jax/jax``, ``~/.cache/poi_jax/jax`` without XDG_CACHE_HOME."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "poi_jax", "jax")


def resolve_cache_dir(value: str) -> str | None:
  """The compilation cache directory of ``runtime.compilation_cache_dir`` (None: off)."""
  value = (value or "").strip()
  if value.lower() == "none":
    return None
  if not value:
    return os.environ.get(CACHE_DIR_ENV) or default_cache_dir()
  return os.path.abspath(os.path.expanduser(value))


def enable_compilation_cache(directory: str | None) -> None:
  """JAX's persistent compilation cache in ``directory`` (None: off), caching every program."""
  import jax
  if directory is None:
    jax.config.update("jax_enable_compilation_cache", False)
    return
  os.makedirs(directory, exist_ok=True)
  jax.config.update("jax_enable_compilation_cache", True)
  jax.config.update("jax_compilation_cache_dir", directory)
  # JAX skips programs that compile in under 1 s; the tiny configs' steps compile in about that,
  # and a test suite compiles hundreds of small programs: cache them all.
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _libc():
  """The process's C library (ctypes), or None where it cannot be loaded."""
  try:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
  except OSError:
    return None


def reuse_freed_memory() -> bool:
  """glibc: serve large blocks from the heap and keep freed memory (see the module docstring).
  False where it does not apply (not glibc) or the C library refused."""
  libc = _libc() if sys.platform.startswith("linux") else None
  mallopt = getattr(libc, "mallopt", None)
  if mallopt is None:  # musl and others: no mallopt
    return False
  # One arena: glibc's per-thread arenas fall back to mmap for blocks over 64 MB whatever the
  # settings below. -1: never trim (the man page's "disables trimming completely").
  return all(mallopt(param, value) == 1
             for param, value in ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, -1)))


def applied() -> dict[str, object]:
  """What the first `configure` applied to this process (empty before it): ``cpu_malloc``
  (``"reuse"``, ``"system"`` or ``"system (not glibc)"``), ``xla_flags`` where some were added,
  ``cpu_forward_ynnpack``, ``compilation_cache_dir``, ``matmul_precision`` where set."""
  return dict(_applied)


def release_freed_memory() -> bool:
  """With ``cpu_malloc=reuse`` in force: hands the heap's free pages back to the system
  (glibc's ``malloc_trim(0)``, which also releases whole free pages inside the heap); False
  (nothing done) otherwise. The training loop calls it where garbage was just freed and the
  next steps will not want it: after the first step (the compilers' working memory), and before
  and after each evaluation (the step's kept temporaries, then the evaluation's). The step's
  temporaries are paged in once more on the next step, then kept."""
  if _applied.get("cpu_malloc") != "reuse":
    return False
  malloc_trim = getattr(_libc(), "malloc_trim", None)
  if malloc_trim is None:
    return False
  malloc_trim(0)
  return True


def cpu_only() -> bool:
  """Whether this process will run on the CPU only (decided without starting the backend)."""
  platforms = os.environ.get("JAX_PLATFORMS", "")
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  # Not initialising the backend: an accelerator may be used when its plugin is installed *and*
  # the machine has the device. The plugin alone says nothing: the README's install brings
  # libtpu (for `bench/sizing.py`'s TPU compiler) to every CPU machine, where treating the run
  # as a possible TPU one left the CPU step without memory reuse and its XLA flags (0.90x
  # against 0.81-0.87x `torch.compile` on a 2-core Xeon with the benchmarks' reuse, results.md).
  try:
    import importlib.util
    return not any(importlib.util.find_spec(plugin) and any(glob.glob(p) for p in device_files)
                   for plugin, device_files in ACCELERATOR_DEVICE_FILES.items())
  except (ImportError, ValueError):
    return False


def add_xla_flags(flags: str) -> str:
  """Appends ``flags`` to ``$XLA_FLAGS``, except those whose name is there already; returns the
  resulting value."""
  current = os.environ.get("XLA_FLAGS", "")
  names = {f.split("=")[0] for f in current.split()}
  extra = [f for f in flags.split() if f.split("=")[0] not in names]
  value = " ".join(current.split() + extra)
  if extra:
    os.environ["XLA_FLAGS"] = value
  return value


def configure(runtime: ml_collections.ConfigDict | dict | None = None, *,
              training: bool = False) -> dict[str, object]:
  """Applies ``runtime`` (`defaults` for missing fields); returns what was applied.

  ``training``: the process is a training run that reaches the loop's memory hand-backs
  (`poi_jax.main`'s training modes), so ``cpu_malloc="auto"`` means ``"reuse"``.
  """
  settings = defaults()
  if runtime is not None:
    settings.update(dict(runtime))
  if settings.cpu_malloc not in CPU_MALLOCS:
    raise ValueError(f"runtime.cpu_malloc={settings.cpu_malloc!r}: choose one of "
                     f"{', '.join(CPU_MALLOCS)}")
  cpu_malloc = settings.cpu_malloc
  if cpu_malloc == "auto":
    cpu_malloc = "reuse" if training else "system"
  if settings.matmul_precision not in MATMUL_PRECISIONS:
    raise ValueError(f"runtime.matmul_precision={settings.matmul_precision!r}: choose one of "
                     f"{', '.join(repr(p) for p in MATMUL_PRECISIONS)}")
  if not _applied:
    if cpu_malloc == "reuse" and cpu_only():
      _applied["cpu_malloc"] = "reuse" if reuse_freed_memory() else "system (not glibc)"
    else:  # on an accelerator the step's temporaries live in device memory: nothing to reuse
      _applied["cpu_malloc"] = "system"
    if settings.xla_cpu_flags and cpu_only():
      _applied["xla_flags"] = add_xla_flags(settings.xla_cpu_flags)
    _applied["cpu_forward_ynnpack"] = bool(settings.cpu_forward_ynnpack)
  if settings.matmul_precision:
    import jax
    jax.config.update("jax_default_matmul_precision", settings.matmul_precision)
    _applied["matmul_precision"] = settings.matmul_precision
  directory = resolve_cache_dir(settings.compilation_cache_dir)
  enable_compilation_cache(directory)
  _applied["compilation_cache_dir"] = directory
  return dict(_applied)


@functools.cache
def _compiler_accepts(options: tuple[tuple[str, str], ...]) -> bool:
  """Whether this jaxlib's CPU compiler knows ``options`` (a tiny program compiled once)."""
  import jax
  try:
    jax.jit(lambda x: x + 1, compiler_options=dict(options)).lower(
        jax.ShapeDtypeStruct((2,), "float32")).compile()
  except Exception as e:  # an unknown option name or value: keep XLA's defaults
    logging.warning("XLA options %s not accepted by this jaxlib (%s): forward programs keep "
                    "XLA's default fusions", dict(options), str(e).splitlines()[0][:200])
    return False
  return True


def forward_compiler_options(platform: str | None = None) -> dict[str, str] | None:
  """``compiler_options`` for a forward-only ``jax.jit`` (predict step, Reader) on ``platform``
  (default: JAX's default backend): `FORWARD_CPU_COMPILER_OPTIONS` on a CPU unless
  ``runtime.cpu_forward_ynnpack`` was set (module docstring); None elsewhere."""
  import jax
  platform = platform or jax.default_backend()
  if platform != "cpu" or _applied.get("cpu_forward_ynnpack", False):
    return None
  options = tuple(FORWARD_CPU_COMPILER_OPTIONS.items())  # hashable: checked once per process
  return dict(options) if _compiler_accepts(options) else None
