"""``model.attention=auto`` on a CPU picks the attention kernel measured fastest on this machine
(issue 51: the native kernel is 1.5x faster than XLA's on one AMD EPYC host and 2.5x slower on
another): timed once per CPU and shape, cached, read back without timing; the rule where no
timing applies (small problems, several devices, POI_JAX_ATTENTION_PROBE=0)."""
import json

import jax
import jax.numpy as jnp
import pytest

from poi_jax.layers import attention, cpu_attention_choice as choice

LARGE = (8, 256, 256, 12, 32)  # MiniLM at 8 x 256: 6.3M scores, over MIN_SCORES
SMALL = (2, 16, 16, 4, 8)


@pytest.fixture
def cache(tmp_path, monkeypatch):
  path = tmp_path / "attention_choice.json"
  monkeypatch.setattr(choice, "cache_path", lambda: str(path))
  monkeypatch.setattr(choice, "_memo", {})
  return path


def _fake_timer(times, calls):
  def timer(run):
    name = run()
    calls.append(name)
    return times[name]
  return timer


def _named(*names):
  return {n: (lambda n=n: (lambda: n)) for n in names}


def test_the_fastest_candidate_is_timed_once_and_then_read_from_the_cache(cache, monkeypatch):
  calls = []
  timer = _fake_timer({"cpu_kernel": 0.050, "explicit_vjp": 0.030, "xla": 0.020}, calls)
  key = choice.key_of(LARGE, jnp.float32, False)
  assert choice.fastest(key, _named("cpu_kernel", "explicit_vjp", "xla"), timer) == "xla"
  assert sorted(calls) == ["cpu_kernel", "explicit_vjp", "xla"]
  record = json.loads(cache.read_text())[key]
  assert record["choice"] == "xla" and record["seconds"]["cpu_kernel"] == 0.050
  # A new process (no memo) on the same machine reads the file: no timing.
  monkeypatch.setattr(choice, "_memo", {})
  assert choice.fastest(key, _named("cpu_kernel", "explicit_vjp", "xla"), timer) == "xla"
  assert len(calls) == 3
  # Another shape is another key, timed on its own.
  other = choice.key_of((8, 384, 384, 12, 32), jnp.float32, False)
  assert choice.fastest(other, _named("cpu_kernel", "explicit_vjp", "xla"), timer) == "xla"
  assert len(calls) == 6 and set(json.loads(cache.read_text())) == {key, other}


def test_a_damaged_cache_or_a_new_candidate_is_timed_again(cache, monkeypatch):
  calls = []
  timer = _fake_timer({"cpu_kernel": 0.010, "explicit_vjp": 0.030}, calls)
  cache.write_text("{not json")
  key = choice.key_of(LARGE, jnp.float32, False)
  assert choice.fastest(key, _named("explicit_vjp"), timer) == "explicit_vjp"
  assert calls == ["explicit_vjp"]
  # The kernel got built since: a record without it is not trusted.
  monkeypatch.setattr(choice, "_memo", {})
  assert choice.fastest(key, _named("cpu_kernel", "explicit_vjp"), timer) == "cpu_kernel"
  assert json.loads(cache.read_text())[key]["choice"] == "cpu_kernel"


def test_a_failing_candidate_is_not_chosen(cache):
  def broken():
    raise RuntimeError("no emitter")
  candidates = {"cpu_kernel": broken, **_named("explicit_vjp")}
  assert choice.fastest(choice.key_of(LARGE, jnp.float32, False), candidates,
                        _fake_timer({"explicit_vjp": 1.0}, [])) == "explicit_vjp"


def test_the_key_names_the_cpu_cores_jaxlib_kernel_dtype_dropout_and_shape(monkeypatch):
  import jaxlib
  key = choice.key_of(LARGE, jnp.float32, True)
  assert f"jaxlib {jaxlib.__version__}" in key and "cores" in key and "flags " in key
  assert f"kernel {attention.cpu_attention.build_id()}|" in key
  assert key.endswith("float32|dropout 1|shape 8x256x256x12x32")
  assert key != choice.key_of(LARGE, jnp.bfloat16, True) != choice.key_of(LARGE, jnp.float32,
                                                                            False)
  # Another build of the native kernel (its source, flags or compiler changed) is timed again.
  monkeypatch.setenv(attention.cpu_attention.VECTORS_ENV, "4x1")
  assert choice.key_of(LARGE, jnp.float32, True) != key


def test_a_timing_under_other_xla_flags_is_not_reused(monkeypatch):
  """XLA's candidates are what $XLA_FLAGS compile: a choice timed under
  --xla_backend_optimization_level=0 (or YNNPACK off) must not decide a run without it."""
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  plain = choice.key_of(LARGE, jnp.float32, False)
  assert "xla flags" not in plain  # no flags: the key every earlier timing was stored under
  monkeypatch.setenv("XLA_FLAGS", "  ")
  assert choice.key_of(LARGE, jnp.float32, False) == plain
  monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
  level0 = choice.key_of(LARGE, jnp.float32, False)
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=")
  ynn_off = choice.key_of(LARGE, jnp.float32, False)
  assert len({plain, level0, ynn_off}) == 3
  monkeypatch.setenv("XLA_FLAGS", " --xla_backend_optimization_level=0 ")  # spacing is not a flag
  assert choice.key_of(LARGE, jnp.float32, False) == level0


@pytest.fixture
def one_cpu(monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  monkeypatch.setattr(attention.cpu_attention, "available", lambda: True)
  asked = []
  monkeypatch.setattr(choice, "fastest",
                      lambda key, candidates, *a: asked.append((key, sorted(candidates))) or
                      "xla")
  return asked


def test_auto_on_one_cpu_times_large_problems_only(one_cpu, monkeypatch):
  assert attention.choose("auto", jnp.float32, False, shape=LARGE) == "xla"
  assert one_cpu[-1][1] == ["cpu_kernel", "explicit_vjp", "xla"]
  assert attention.choose("auto", jnp.float32, True, shape=LARGE) == "xla"
  # with dropout: no fused-API XLA path (it has no dropout); the kernel draws its own
  assert one_cpu[-1][1] == ["cpu_kernel", "explicit", "explicit_vjp"]
  assert len(one_cpu) == 2
  # The rule: a toy problem, no shape given, a named kernel, or probing switched off.
  assert attention.choose("auto", jnp.float32, False, shape=SMALL) == "cpu_kernel"
  assert attention.choose("auto", jnp.float32, False) == "cpu_kernel"
  assert attention.choose("explicit_vjp", jnp.float32, False, shape=LARGE) == "explicit_vjp"
  monkeypatch.setenv(choice.PROBE_ENV, "0")
  assert attention.choose("auto", jnp.float32, False, shape=LARGE) == "cpu_kernel"
  assert len(one_cpu) == 2


def test_auto_does_not_time_for_several_devices_or_another_platform(one_cpu, monkeypatch):
  monkeypatch.setattr(jax, "device_count", lambda: 8)  # every process must compile one program
  assert attention.choose("auto", jnp.float32, False, shape=LARGE) == "explicit_vjp"
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert attention.choose("auto", jnp.bfloat16, False, shape=LARGE) == "cudnn"
  assert one_cpu == []


def test_a_real_timing_on_this_cpu_picks_a_candidate_and_records_each(cache):
  """The probe as ``auto`` runs it, on the smallest problem it times (MIN_SCORES scores),
  under a trace (the way a step's attention meets it)."""
  shape = (1, 256, 256, 16, 8)
  assert shape[0] * shape[1] * shape[2] * shape[3] >= choice.MIN_SCORES

  @jax.jit
  def traced(x):
    kind = attention.choose("auto", jnp.float32, False, shape=shape)
    traced.kind = kind
    return x + 1

  traced(jnp.zeros(()))
  record = next(iter(json.loads(cache.read_text()).values()))
  candidates = set(attention.cpu_candidates(shape, jnp.float32, False))
  assert set(record["seconds"]) == candidates and record["choice"] in candidates
  assert traced.kind == record["choice"] == min(record["seconds"], key=record["seconds"].get)
  assert all(s > 0 for s in record["seconds"].values())
