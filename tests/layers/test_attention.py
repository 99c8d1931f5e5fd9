"""The attention kernels: the fused API (XLA on a CPU) and the hand-written-backward kernel
(``explicit_vjp``) equal the explicit einsum-softmax path (transformers' eager attention) with a
padding mask, in value and gradient, with and without dropout; which kernel each setting picks;
cuDNN's limits are clear errors. Encoder-level parity per setting: tests/models/test_encoders.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poi_jax.layers import attention, matmul, target


def _qkv(b=3, l=7, heads=4, dh=8, seed=0):
  rng = np.random.default_rng(seed)
  make = lambda: jnp.asarray(rng.normal(size=(b, l, heads * dh)), jnp.float32)
  lengths = np.array([l, 4, 1])[:b]
  mask = (np.arange(l)[None] < lengths[:, None]).astype(np.int32)
  return make(), make(), make(), attention.key_mask(jnp.asarray(mask))


@pytest.mark.parametrize("implementation", ["auto", "xla", "explicit", "explicit_vjp", "cpu_kernel"])
def test_fused_api_matches_explicit_path_with_padding(implementation):
  q, k, v, mask = _qkv()
  fused = attention.dot_product_attention(q, k, v, mask, num_heads=4,
                                          implementation=implementation)
  b, l, w = q.shape
  split = lambda x: x.reshape(b, l, 4, w // 4)
  explicit = attention._explicit(split(q), split(k), split(v), mask, lambda p: p).reshape(b, l, w)
  np.testing.assert_allclose(np.asarray(fused), np.asarray(explicit), atol=1e-6, rtol=0)
  # Padding matters: without the mask the short rows differ.
  unmasked = attention.dot_product_attention(q, k, v, None, num_heads=4)
  assert np.abs(np.asarray(unmasked[1]) - np.asarray(fused[1])).max() > 1e-3


@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_hand_written_backward_equals_autodiff_of_the_explicit_path(rate):
  """``explicit_vjp``'s custom VJP against JAX's derivative of ``explicit``: same outputs and
  same q/k/v gradients (a non-uniform cotangent), with dropout on (the same keep bits) and off."""
  q, k, v, mask = _qkv()
  weights = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32)
  key = jax.random.key(3)

  def run(implementation):
    f = lambda q, k, v: attention.dot_product_attention(
        q, k, v, mask, num_heads=4, implementation=implementation, dropout_rate=rate, key=key,
        deterministic=rate == 0.0)
    out = f(q, k, v)
    grads = jax.grad(lambda *a: jnp.sum(f(*a) * weights), argnums=(0, 1, 2))(q, k, v)
    return out, grads

  out, grads = run("explicit_vjp")
  want_out, want_grads = run("explicit")
  np.testing.assert_allclose(np.asarray(out), np.asarray(want_out), atol=1e-6, rtol=0)
  for name, got, want in zip("qkv", grads, want_grads):
    assert float(jnp.abs(want).max()) > 0.1, name  # a gradient worth comparing
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=5e-6, rtol=0, err_msg=name)
  if rate:  # the dropout acted: the output differs from the deterministic one
    plain = attention.dot_product_attention(q, k, v, mask, num_heads=4,
                                            implementation="explicit_vjp")
    assert float(jnp.abs(out - plain).max()) > 1e-2


def test_dropout_in_training_is_the_same_for_the_same_key_and_drops():
  q, k, v, mask = _qkv()
  key = jax.random.key(0)
  train = attention.dot_product_attention(q, k, v, mask, num_heads=4, dropout_rate=0.5,
                                          key=key, deterministic=False)
  again = attention.dot_product_attention(q, k, v, mask, num_heads=4, dropout_rate=0.5,
                                          key=key, deterministic=False)
  evaluation = attention.dot_product_attention(q, k, v, mask, num_heads=4, dropout_rate=0.5,
                                               key=key, deterministic=True)
  np.testing.assert_array_equal(np.asarray(train), np.asarray(again))
  assert np.abs(np.asarray(train) - np.asarray(evaluation)).max() > 1e-2


@pytest.mark.skipif(not attention.cpu_attention.available(),
                    reason="the native kernel could not be built here (no C++ compiler)")
def test_cpu_kernel_in_training_draws_its_dropout_from_the_key():
  """``cpu_kernel`` with attention dropout through the dispatcher: deterministic for a key,
  another key another mask, the deterministic pass no dropout, and a gradient through it."""
  q, k, v, mask = _qkv()
  run = lambda key, deterministic=False: attention.dot_product_attention(
      q, k, v, mask, num_heads=4, implementation="cpu_kernel", dropout_rate=0.3,
      key=jax.random.key(key), deterministic=deterministic)
  np.testing.assert_array_equal(np.asarray(run(0)), np.asarray(run(0)))
  assert np.abs(np.asarray(run(0)) - np.asarray(run(1))).max() > 1e-2
  plain = attention.dot_product_attention(q, k, v, mask, num_heads=4, implementation="explicit")
  np.testing.assert_allclose(np.asarray(run(0, deterministic=True)), np.asarray(plain),
                             atol=1e-6)
  grad = jax.grad(lambda q: jnp.sum(attention.dot_product_attention(
      q, k, v, mask, num_heads=4, implementation="cpu_kernel", dropout_rate=0.3,
      key=jax.random.key(0), deterministic=False)))(q)
  assert np.isfinite(np.asarray(grad)).all() and float(jnp.abs(grad).max()) > 0
  for implementation in ("cpu_kernel", "explicit_vjp", "explicit", "auto"):
    with pytest.raises(ValueError, match="needs a key"):
      attention.dot_product_attention(q, k, v, mask, num_heads=4, dropout_rate=0.3,
                                      implementation=implementation, deterministic=False)


@pytest.mark.parametrize("backend,implementation,dtype,dropout,want", [
    # On a CPU the native kernel is the fastest (docs/cpu_profile.md): float32, with or without
    # attention dropout (drawn in the kernel); else (bfloat16 on a CPU without AMX tiles: the
    # test's) the hand-written backward.
    ("cpu", "auto", jnp.bfloat16, False, "explicit_vjp"),
    ("cpu", "auto", jnp.float32, False, "cpu_kernel"),
    ("cpu", "auto", jnp.float32, True, "cpu_kernel"),
    ("cpu", "auto", jnp.bfloat16, True, "explicit_vjp"),
    ("cpu", "cpu_kernel", jnp.float32, False, "cpu_kernel"),
    ("cpu", "cpu_kernel", jnp.bfloat16, False, "cpu_kernel"),
    ("cpu", "cpu_kernel", jnp.float32, True, "cpu_kernel"),
    ("cpu", "explicit", jnp.float32, False, "explicit"),
    ("gpu", "explicit_vjp", jnp.bfloat16, True, "explicit_vjp"),
    ("cpu", "xla", jnp.float32, False, "xla"),
    ("gpu", "explicit", jnp.bfloat16, False, "explicit"),
    ("tpu", "auto", jnp.bfloat16, False, "xla"),
    ("gpu", "auto", jnp.bfloat16, False, "cudnn"),
    ("gpu", "auto", jnp.float32, False, "xla"),  # cuDNN flash attention: bf16/fp16 only
    ("gpu", "auto", jnp.bfloat16, True, "explicit"),
    ("gpu", "xla", jnp.bfloat16, False, "xla"),
    ("cpu", "xla", jnp.float32, True, "explicit"),
    ("gpu", "cudnn", jnp.bfloat16, False, "cudnn"),
])
def test_choice_of_kernel(monkeypatch, backend, implementation, dtype, dropout, want):
  monkeypatch.setattr(jax, "default_backend", lambda: backend)
  monkeypatch.setattr(attention.cpu_attention, "available", lambda: True)
  monkeypatch.setattr(attention.cpu_attention, "amx_available", lambda: False)
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  assert attention.choose(implementation, dtype, dropout) == want


@pytest.mark.parametrize("dropout", [False, True])
def test_bfloat16_takes_the_native_kernel_where_its_amx_variant_runs(monkeypatch, dropout):
  """``model.dtype=bfloat16`` on a CPU with AMX tiles: the kernel's bfloat16 variant (its
  products are the bfloat16 inputs' own), not the XLA-op path (bfloat16 einsums that XLA's CPU
  backend runs as float32 between conversions)."""
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  monkeypatch.setattr(attention.cpu_attention, "available", lambda: True)
  monkeypatch.setattr(attention.cpu_attention, "amx_available", lambda: True)
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  assert attention.choose("auto", jnp.bfloat16, dropout) == "cpu_kernel"
  assert attention.cpu_attention.bfloat16_variant(jnp.bfloat16)
  assert not attention.cpu_attention.bfloat16_variant(jnp.float32)


def test_auto_keeps_xla_ops_without_the_kernel_or_on_several_devices(monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  monkeypatch.setattr(attention.cpu_attention, "available", lambda: False)
  monkeypatch.setattr(attention.cpu_attention, "unavailable_reason", lambda: "no C++ compiler")
  assert attention.choose("auto", jnp.float32, False) == "explicit_vjp"
  with pytest.raises(ValueError, match="cpu_kernel: no C\\+\\+ compiler"):
    attention.choose("cpu_kernel", jnp.float32, False)
  monkeypatch.setattr(attention.cpu_attention, "available", lambda: True)
  monkeypatch.setattr(jax, "device_count", lambda: 8)  # XLA would gather a sharded FFI call
  assert attention.choose("auto", jnp.float32, False) == "explicit_vjp"


def test_each_traced_attention_records_the_kernel_that_ran(monkeypatch):
  """`kernels_used` (a training run's environment.json): per problem, the kernel that ran and
  what chose it; a per-query mask, which the native kernel cannot take, is recorded as the kernel
  that ran instead."""
  monkeypatch.setattr(attention, "_USED", {})
  rule = "cpu_kernel" if attention.cpu_attention.available() else "explicit_vjp"
  q, k, v, mask = _qkv()  # 3 x 7, 4 heads of 8: below auto's timing threshold
  attention.dot_product_attention(q, k, v, mask, num_heads=4, implementation="explicit")
  attention.dot_product_attention(q[:2], k[:2], v[:2], mask[:2], num_heads=4, dropout_rate=0.1,
                                  key=jax.random.key(0), deterministic=False)
  per_query = jnp.broadcast_to(mask[:1], (1, 1, 7, 7))
  attention.dot_product_attention(q[:1], k[:1], v[:1], per_query, num_heads=4)
  # A problem auto times (the timing stubbed: it picks explicit_vjp over the native kernel).
  monkeypatch.setattr(attention, "_probe_applies", lambda shape, devices: True)
  monkeypatch.setattr(attention.cpu_attention_choice, "fastest", lambda key, cands: "explicit_vjp")
  q, k, v, mask = _qkv(b=2, l=6, seed=1)
  attention.dot_product_attention(q, k, v, mask, num_heads=4)
  auto = {"model.attention": "auto"}
  assert attention.kernels_used() == {
      "3x7x7x4x8 float32": {"kernel": "explicit", "model.attention": "explicit",
                            "chosen_by": "model.attention"},
      "2x7x7x4x8 float32 dropout": {"kernel": rule, **auto, "chosen_by": "rule"},
      "1x7x7x4x8 float32": {"kernel": "explicit_vjp", **auto, "chosen_by": "rule"},
      "2x6x6x4x8 float32": {"kernel": "explicit_vjp", **auto, "chosen_by": "timed on this CPU"},
  }


def _abstract_mesh(platform: str, devices: int):
  from jax._src.mesh import AbstractDevice  # public AbstractMesh takes it; no public constructor
  return jax.sharding.AbstractMesh((devices,), ("data",), abstract_device=AbstractDevice(
      device_kind=f"{platform} test device", num_cores=None, platform=platform))


@pytest.mark.parametrize("platform,devices,dtype,want", [
    ("tpu", 4, jnp.float32, "xla"),       # compiled for a TPU from this CPU process: no FFI call
    ("tpu", 1, jnp.float32, "xla"),
    ("gpu", 1, jnp.bfloat16, "cudnn"),
    ("cpu", 8, jnp.float32, "explicit_vjp"),  # a sharded CPU mesh: no gathered FFI call
])
def test_auto_follows_the_mesh_being_compiled_for(monkeypatch, platform, devices, dtype, want):
  # The process is a 1-device CPU with the kernel built: what `auto` picked before issue 39,
  # whatever the mesh (a TPU compile then failed: "Custom emitter ... not found").
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  monkeypatch.setattr(jax, "device_count", lambda: 1)
  monkeypatch.setattr(attention.cpu_attention, "available", lambda: True)
  assert attention.choose("auto", jnp.float32, False) == "cpu_kernel"
  with jax.sharding.use_abstract_mesh(_abstract_mesh(platform, devices)):
    assert target.platform_and_devices() == (platform, devices)
    assert attention.choose("auto", dtype, False) == want
    if platform != "cpu":
      with pytest.raises(ValueError, match=f"cpu_kernel runs on a CPU; the devices are "
                                           f"'{platform}'"):
        attention.choose("cpu_kernel", jnp.float32, False)


def test_cpu_matmul_backward_only_for_cpu_meshes():
  x, w = jnp.ones((2, 3, 4)), jnp.ones((4, 5))
  dims = (((2,), (0,)), ((), ()))
  # The custom-VJP Linear (matmul._linear) on a CPU; plain dot_general for a TPU mesh's trace.
  assert "custom_vjp_call" in str(jax.make_jaxpr(lambda a, b: matmul.dot_general(a, b, dims))(x, w))
  with jax.sharding.use_abstract_mesh(_abstract_mesh("tpu", 4)):
    jaxpr = str(jax.make_jaxpr(lambda a, b: matmul.dot_general(a, b, dims))(x, w))
  assert "custom_vjp_call" not in jaxpr and "dot_general" in jaxpr


def test_cudnn_limits_are_clear_errors(monkeypatch):
  with pytest.raises(ValueError, match="attention_dropout=0"):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    attention.choose("cudnn", jnp.bfloat16, True)
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  with pytest.raises(ValueError, match="needs a GPU"):
    attention.choose("cudnn", jnp.bfloat16, False)
  with pytest.raises(ValueError, match="model.attention must be one of"):
    attention.choose("flash", jnp.bfloat16, False)
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  with pytest.raises(ValueError, match="cpu_kernel runs on a CPU"):
    attention.choose("cpu_kernel", jnp.float32, False)
