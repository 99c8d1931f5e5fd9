"""Multi-head self-attention as BERT-family encoders compute it (softmax in float32)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def attention_bias(attention_mask: jax.Array, dtype=jnp.float32) -> jax.Array:
  """``(B, L)`` {0,1} mask -> additive ``(B, 1, 1, L)`` bias: 0 for keys, dtype-min for padding.

  transformers' eager attention adds ``finfo(dtype).min`` the same way, so fully-real rows match
  it bit for bit and padded keys get exactly zero probability.
  """
  mask = attention_mask.astype(jnp.float32)[:, None, None, :]
  return (1.0 - mask) * jnp.finfo(jnp.float32).min


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array | None,
                          *, num_heads: int, dropout_fn=None) -> jax.Array:
  """Scaled dot-product attention over heads.

  Args:
    q, k, v: ``(B, L, H*Dh)`` projections (head-major channels, ``h*Dh + j``).
    bias: additive ``(B, 1, 1, L)`` (or broadcastable to ``(B, H, Lq, Lk)``) or None.
    dropout_fn: applied to the attention probabilities (training), or None.
  Returns:
    ``(B, L, H*Dh)`` in the dtype of ``v``.
  """
  b, lq, width = q.shape
  lk = k.shape[1]
  dh = width // num_heads
  q = q.reshape(b, lq, num_heads, dh)
  k = k.reshape(b, lk, num_heads, dh)
  v = v.reshape(b, lk, num_heads, dh)
  scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(
      jnp.float32(dh))
  if bias is not None:
    scores = scores + bias
  probs = jax.nn.softmax(scores, axis=-1)
  if dropout_fn is not None:
    probs = dropout_fn(probs)
  out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v)
  return out.reshape(b, lq, num_heads * dh)
