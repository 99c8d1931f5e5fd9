"""Building and loading the native CPU kernels (XLA FFI targets in C++ shipped with the package).

Each kernel's source is compiled on first use with the system's C++ compiler (``$CXX``, else
``c++``/``g++``/``clang++`` on PATH) against the XLA FFI headers jaxlib ships, for the machine
that runs it (``-march=native``), into ``$POI_JAX_KERNEL_CACHE`` (default
``$XDG_CACHE_HOME/poi_jax/kernels``, ``~/.cache/...``). A library's name hashes its sources
(the ``.cc`` and the headers beside it), the flags, the compiler, jaxlib's version and the CPU's
features, so an upgrade or another machine sharing the home directory builds its own. The build
writes to a temporary name and renames (atomic), so concurrent first uses are safe.

Users: `poi_jax.layers.cpu_attention` (the attention kernel) and `poi_jax.layers.cpu_matmul_amx`
(bfloat16 matmuls on AMX tiles).
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

import jax

CACHE_ENV = "POI_JAX_KERNEL_CACHE"
_HERE = os.path.dirname(os.path.abspath(__file__))
# Every kernel's flags start with these; a kernel adds its own (e.g. its ISA extensions).
BASE_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-std=c++17",
              "-shared", "-fPIC")


def cache_dir() -> str:
  """``$POI_JAX_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/poi_jax/kernels`` (``~/.cache/...``)."""
  if os.environ.get(CACHE_ENV):
    return os.path.abspath(os.path.expanduser(os.environ[CACHE_ENV]))
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "poi_jax", "kernels")


def compiler() -> str | None:
  """The C++ compiler to build with: ``$CXX``, else ``c++``, ``g++`` or ``clang++`` on PATH."""
  for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
    if name and shutil.which(name):
      return shutil.which(name)
  return None


def cpu_features() -> str:
  """What ``-march=native`` depends on: the CPU's feature flags (Linux), else the platform."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith(("flags", "Features")):
          return line
  except OSError:
    pass
  return platform.machine() + platform.processor()


def digest(source: str, compiler_path: str, flags: tuple[str, ...]) -> str:
  """What a built library depends on: its source and the headers beside it, the flags, the
  compiler, jaxlib's version and the CPU's features."""
  import jaxlib
  h = hashlib.sha256()
  for path in (source, *sorted(glob.glob(os.path.join(_HERE, "*.h")))):
    with open(path, "rb") as f:
      h.update(f.read())
  for part in (*flags, compiler_path, jaxlib.__version__, cpu_features()):
    h.update(part.encode())
  return h.hexdigest()[:16]


def library_path(name: str, source: str, compiler_path: str, flags: tuple[str, ...]) -> str:
  """Where ``name``'s library for these sources, compiler and flags lives in the cache."""
  return os.path.join(cache_dir(), f"{name}-{digest(source, compiler_path, flags)}.so")


def build(compiler_path: str, flags: tuple[str, ...], source: str, target: str) -> None:
  """Compiles ``source`` into the shared library ``target`` (atomically: a temporary name, then
  a rename); raises RuntimeError with the compiler's message when it fails."""
  os.makedirs(os.path.dirname(target), exist_ok=True)
  fd, tmp = tempfile.mkstemp(suffix=".so.tmp", dir=os.path.dirname(target))
  os.close(fd)
  try:
    cmd = [compiler_path, *flags, f"-I{jax.ffi.include_dir()}", f"-I{_HERE}", source, "-o", tmp]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
      raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{done.stderr[-2000:]}")
    os.replace(tmp, target)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def load_and_register(path: str, targets: dict[str, str]) -> ctypes.CDLL:
  """Loads the library at ``path`` and registers ``targets`` (FFI name -> exported symbol) for
  the CPU platform."""
  library = ctypes.cdll.LoadLibrary(path)
  for name, symbol in targets.items():
    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(library, symbol)),
                                platform="cpu")
  return library
