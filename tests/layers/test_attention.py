"""The attention kernels: the fused API (XLA on a CPU) equals the explicit einsum-softmax path
(transformers' eager attention) with a padding mask; which kernel each setting picks; cuDNN's
limits are clear errors. Encoder-level parity per setting: tests/models/test_encoders.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from poi_jax.layers import attention


def _qkv(b=3, l=7, heads=4, dh=8, seed=0):
  rng = np.random.default_rng(seed)
  make = lambda: jnp.asarray(rng.normal(size=(b, l, heads * dh)), jnp.float32)
  lengths = np.array([l, 4, 1])[:b]
  mask = (np.arange(l)[None] < lengths[:, None]).astype(np.int32)
  return make(), make(), make(), attention.key_mask(jnp.asarray(mask))


@pytest.mark.parametrize("implementation", ["auto", "xla", "explicit"])
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


def test_dropout_in_training_takes_the_explicit_path_and_drops():
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


@pytest.mark.parametrize("backend,implementation,dtype,dropout,want", [
    # On a CPU the explicit path is about twice as fast as the fused API's XLA path (fwd + bwd).
    ("cpu", "auto", jnp.bfloat16, False, "explicit"),
    ("cpu", "auto", jnp.float32, False, "explicit"),
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
  assert attention.choose(implementation, dtype, dropout) == want


def test_cudnn_limits_are_clear_errors(monkeypatch):
  with pytest.raises(ValueError, match="attention_dropout=0"):
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    attention.choose("cudnn", jnp.bfloat16, True)
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  with pytest.raises(ValueError, match="needs a GPU"):
    attention.choose("cudnn", jnp.bfloat16, False)
  with pytest.raises(ValueError, match="model.attention must be one of"):
    attention.choose("flash", jnp.bfloat16, False)
