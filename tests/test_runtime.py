"""poi_jax/runtime.py: the compilation cache directory, CPU memory reuse and CPU XLA flags that
the entry points apply (each case in a fresh interpreter: the settings are process-wide)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from poi_jax import runtime

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_cache_dir_default_follows_xdg_and_env(monkeypatch, tmp_path):
  monkeypatch.delenv(runtime.CACHE_DIR_ENV, raising=False)
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert runtime.resolve_cache_dir("") == str(tmp_path / "xdg" / "poi_jax" / "jax")
  monkeypatch.delenv("XDG_CACHE_HOME")
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  assert runtime.resolve_cache_dir("") == str(tmp_path / "home" / ".cache" / "poi_jax" / "jax")
  monkeypatch.setenv(runtime.CACHE_DIR_ENV, str(tmp_path / "env"))
  assert runtime.resolve_cache_dir("") == str(tmp_path / "env")
  assert runtime.resolve_cache_dir("none") is None
  assert runtime.resolve_cache_dir("None") is None
  assert runtime.resolve_cache_dir("~/c") == str(tmp_path / "home" / "c")


def test_xla_flags_already_set_win(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_a=1 --xla_b=2")
  assert runtime.add_xla_flags("--xla_b=3 --xla_c=4") == "--xla_a=1 --xla_b=2 --xla_c=4"
  assert os.environ["XLA_FLAGS"] == "--xla_a=1 --xla_b=2 --xla_c=4"


def test_bad_cpu_malloc_is_refused():
  with pytest.raises(ValueError, match="runtime.cpu_malloc='fast'"):
    runtime.configure({"cpu_malloc": "fast"})


_CHILD = r"""
import json, os, resource, sys
import jax, jax.numpy as jnp
from poi_jax import runtime
applied = runtime.configure(json.loads(sys.argv[1]), training=sys.argv[2:] == ["training"])
# An engine-like step: donated state, a 32 MiB temporary each call (the barrier keeps XLA from
# fusing ``x * 0.5`` into the sum: it is written out, then read back reversed). Cheap on purpose.
f = jax.jit(lambda x: x + jax.lax.optimization_barrier(x * 0.5)[::-1], donate_argnums=0)
x = jnp.ones((2048, 4096))
for _ in range(10):
  x = f(x); x.block_until_ready()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
  x = f(x); x.block_until_ready()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
def rss_mb():
  with open("/proc/self/status") as f:
    return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024
import numpy as np
big = np.ones(256 * 2**20 // 8)  # 256 MiB, touched, then freed: kept by the heap under "reuse"
del big
rss_kept = rss_mb()
released = runtime.release_freed_memory()
print(json.dumps({"applied": applied, "faults": faults, "released": released,
                  "rss_freed_mb": rss_kept - rss_mb(),
                  "cache_dir": jax.config.jax_compilation_cache_dir,
                  "cache_on": jax.config.jax_enable_compilation_cache,
                  "min_time": jax.config.jax_persistent_cache_min_compile_time_secs,
                  "xla_flags": os.environ.get("XLA_FLAGS", "")}))
"""


def _child(settings: dict, tmp_path, training: bool = False, **env) -> dict:
  environ = {k: v for k, v in os.environ.items()
             if k not in ("XLA_FLAGS", runtime.CACHE_DIR_ENV,
                          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")}
  environ.update(JAX_PLATFORMS="cpu", XDG_CACHE_HOME=str(tmp_path / "xdg"),
                 PYTHONPATH=str(ROOT), **env)
  r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(settings),
                      *(["training"] if training else [])], capture_output=True,
                     text=True, cwd=ROOT, env=environ, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt: Linux only")
def test_memory_reuse_stops_per_step_page_faults_and_hands_back_on_request(tmp_path):
  # glibc's defaults page each call's 32 MiB temporary in afresh (8,192 faults a call); with
  # "reuse" most calls reuse freed pages (measured: ~1,600 a call after 10 warm-up calls).
  system = _child({"cpu_malloc": "system", "compilation_cache_dir": "none"}, tmp_path)
  reuse = _child({"cpu_malloc": "reuse", "compilation_cache_dir": "none"}, tmp_path)
  assert system["applied"]["cpu_malloc"] == "system"
  assert reuse["applied"]["cpu_malloc"] == "reuse"
  assert system["faults"] > 10 * 6000, system
  assert reuse["faults"] < system["faults"] / 2, (reuse, system)
  # What the training loop hands back after its first step and each evaluation: a freed
  # 256 MiB block stays resident under "reuse" until then (glibc's defaults unmapped it at once).
  assert reuse["released"] is True and reuse["rss_freed_mb"] > 200, reuse
  assert system["released"] is False and system["rss_freed_mb"] < 50, system
  assert system["cache_on"] is False and reuse["cache_on"] is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt: Linux only")
def test_auto_reuses_memory_in_training_runs_only(tmp_path):
  # The default: a training run (poi_jax.main's train modes) reaches the loop's hand-backs, so
  # it keeps freed pages; anything else (the Reader, a test suite, a library user) does not.
  training = _child({"compilation_cache_dir": "none"}, tmp_path, training=True)
  other = _child({"cpu_malloc": "auto", "compilation_cache_dir": "none"}, tmp_path)
  assert training["applied"]["cpu_malloc"] == "reuse", training
  assert other["applied"]["cpu_malloc"] == "system", other
  assert training["released"] is True and other["released"] is False


def test_default_cache_is_per_user_and_caches_small_programs(tmp_path):
  out = _child({}, tmp_path)
  expected = tmp_path / "xdg" / "poi_jax" / "jax"
  assert out["cache_dir"] == str(expected) and out["cache_on"] is True
  assert out["min_time"] == 0.0
  # The tiny jitted function above was written to the cache.
  assert any(expected.iterdir()), "nothing was cached"


def test_cpu_flags_reach_xla_flags_on_cpu_runs_only_and_user_flags_win(tmp_path):
  flags = "--xla_cpu_enable_fast_math=false --xla_cpu_use_thunk_runtime=true"
  out = _child({"xla_cpu_flags": flags, "compilation_cache_dir": "none"}, tmp_path,
               XLA_FLAGS="--xla_cpu_enable_fast_math=true")
  assert out["xla_flags"] == "--xla_cpu_enable_fast_math=true --xla_cpu_use_thunk_runtime=true"


def test_cpu_flags_are_for_cpu_only_runs(monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
  assert not runtime.cpu_only()
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  assert runtime.cpu_only()


def test_an_installed_plugin_without_its_device_is_still_a_cpu_run(monkeypatch, tmp_path):
  """libtpu comes with the README's install: on a machine without a TPU the run is CPU-only
  (memory reuse and the CPU flags apply); with the plugin's device present it may not be."""
  import importlib.util
  monkeypatch.delenv("JAX_PLATFORMS", raising=False)
  real_find_spec = importlib.util.find_spec
  installed = {"libtpu", "jax_cuda12_plugin"}
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: object() if name in installed else
                      (None if name in runtime.ACCELERATOR_DEVICE_FILES else real_find_spec(name, *a)))
  accel = tmp_path / "dev"
  accel.mkdir()
  monkeypatch.setattr(runtime, "ACCELERATOR_DEVICE_FILES", {
      "libtpu": (str(accel / "accel*"), str(accel / "vfio" / "[0-9]*")),
      "jax_cuda12_plugin": (str(accel / "nvidiactl"),),
      "jax_rocm60_plugin": (str(accel / "kfd"),)})
  assert runtime.cpu_only()
  (accel / "kfd").touch()  # ROCm's device, but its plugin is not installed
  assert runtime.cpu_only()
  (accel / "vfio").mkdir()
  (accel / "vfio" / "0").touch()  # a TPU v5e's
  assert not runtime.cpu_only()
  (accel / "vfio" / "0").unlink()
  (accel / "nvidiactl").touch()
  assert not runtime.cpu_only()


def test_forward_options_are_for_cpu_forward_programs_unless_ynnpack_is_kept(monkeypatch):
  monkeypatch.setattr(runtime, "_applied", {})  # configure() not called: the default
  assert runtime.forward_compiler_options("cpu") == runtime.FORWARD_CPU_COMPILER_OPTIONS
  assert runtime.forward_compiler_options("gpu") is None
  assert runtime.forward_compiler_options("tpu") is None
  monkeypatch.setattr(runtime, "_applied", {"cpu_forward_ynnpack": True})
  assert runtime.forward_compiler_options("cpu") is None


def test_an_option_this_jaxlib_lacks_keeps_xla_defaults(caplog):
  assert runtime._compiler_accepts(tuple(runtime.FORWARD_CPU_COMPILER_OPTIONS.items()))
  with caplog.at_level("WARNING"):
    assert not runtime._compiler_accepts((("xla_cpu_no_such_option_anywhere", "1"),))
  assert "xla_cpu_no_such_option_anywhere" in caplog.text
