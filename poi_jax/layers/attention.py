"""Multi-head self-attention as BERT-family encoders compute it (softmax in float32), through
`jax.nn.dot_product_attention` (cuDNN flash attention on a GPU, XLA elsewhere) or an explicit
einsum-softmax-einsum.

``implementation`` (config ``model.attention``):

* ``auto`` (default): cuDNN's fused kernel on a GPU when the compute dtype is bfloat16/float16
  and no attention dropout is active (evaluation, or ``model.attention_dropout=0``); the explicit
  path on a CPU; else XLA. cuDNN has no dropout on the attention probabilities, which BERT
  fine-tuning applies (0.1), so a training step with attention dropout takes the explicit path;
  a shape cuDNN rejects falls back to XLA too.
* ``xla``: `jax.nn.dot_product_attention(implementation="xla")`, or the explicit path when
  attention dropout is active.
* ``explicit``: the einsum-softmax-einsum below (transformers' eager attention): an additive
  float32 mask bias and `jax.nn.softmax`. On a CPU its forward + backward takes about half the
  time of the fused API's XLA path (whose softmax differentiates through ``exp / sum`` into extra
  passes over the ``(B, N, L, L)`` scores; docs/cpu_profile.md), so ``auto`` picks it there.
* ``cudnn``: always the fused kernel; an error when attention dropout is active in training or
  there is no GPU.

Padding is a boolean key mask ``(B, 1, 1, L)``: masked logits become a large negative number,
so padded keys get exactly zero probability and fully-real rows match transformers' eager
attention (which adds ``finfo(float32).min``) to float32 rounding.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from poi_jax.layers import common

IMPLEMENTATIONS = ("auto", "xla", "explicit", "cudnn")


def key_mask(attention_mask: jax.Array) -> jax.Array:
  """``(B, L)`` {0,1} mask -> boolean ``(B, 1, 1, L)``: True for keys that may be attended."""
  return (attention_mask > 0)[:, None, None, :]


def _explicit(q, k, v, mask, dropout_fn):
  """``(B, L, N, Dh)`` heads; additive float32 bias as transformers' eager attention, dropout.

  The heads are moved in front of the length (``(B, N, L, Dh)``) before the two matmuls, as
  transformers does: on a CPU XLA then runs them as plain batched matmuls, where the ``(B, L, N,
  Dh)`` einsums cost the forward about twice the time (layout copies of the scores)."""
  dh = q.shape[-1]
  heads_first = lambda x: jnp.swapaxes(x, 1, 2)
  scores = jnp.einsum("bhqd,bhkd->bhqk", heads_first(q), heads_first(k)).astype(jnp.float32)
  scores = scores / jnp.sqrt(jnp.float32(dh))
  if mask is not None:
    scores = scores + jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)
  probs = dropout_fn(jax.nn.softmax(scores, axis=-1))
  return heads_first(jnp.einsum("bhqk,bhkd->bhqd", probs.astype(v.dtype), heads_first(v)))


def choose(implementation: str, dtype, dropout_active: bool) -> str:
  """The kernel that runs: ``cudnn``, ``xla`` (fused-API XLA) or ``explicit`` (with dropout)."""
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"model.attention must be one of {IMPLEMENTATIONS}, got {implementation!r}")
  on_gpu = jax.default_backend() == "gpu"
  if implementation == "cudnn":
    if dropout_active:
      raise ValueError("model.attention=cudnn has no attention dropout: set "
                       "model.attention_dropout=0 (or model.attention=auto to use the XLA path "
                       "when dropout is on)")
    if not on_gpu:
      raise ValueError(f"model.attention=cudnn needs a GPU; the backend is "
                       f"{jax.default_backend()!r} (use auto or xla)")
    return "cudnn"
  if dropout_active or implementation == "explicit":
    return "explicit"
  if implementation == "auto" and jax.default_backend() == "cpu":
    return "explicit"
  if implementation == "auto" and on_gpu and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16):
    return "cudnn"
  return "xla"


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None,
                          *, num_heads: int, implementation: str = "auto",
                          dropout_rate: float = 0.0, key: jax.Array | None = None,
                          deterministic: bool = True) -> jax.Array:
  """Scaled dot-product attention over heads.

  Args:
    q, k, v: ``(B, L, H*Dh)`` projections (head-major channels, ``h*Dh + j``).
    mask: boolean ``(B, 1, 1, L)`` key mask (`key_mask`) or None.
    dropout_rate, key, deterministic: dropout on the attention probabilities (training).
  Returns:
    ``(B, L, H*Dh)`` in the dtype of ``v``.
  """
  b, lq, width = q.shape
  lk = k.shape[1]
  dh = width // num_heads
  q = q.reshape(b, lq, num_heads, dh)
  k = k.reshape(b, lk, num_heads, dh)
  v = v.reshape(b, lk, num_heads, dh)
  dropout_active = dropout_rate > 0.0 and not deterministic
  kind = choose(implementation, v.dtype, dropout_active)
  if kind == "explicit":
    out = _explicit(q, k, v, mask,
                    lambda p: common.dropout(p, dropout_rate, key, not dropout_active))
  elif kind == "cudnn":
    # cuDNN takes the mask as a bias whose query length must be the queries' (no broadcast).
    full = None if mask is None else jnp.broadcast_to(mask, (b, 1, lq, lk))
    try:
      out = jax.nn.dot_product_attention(q, k, v, mask=full, implementation="cudnn")
    except (ValueError, NotImplementedError, RuntimeError):  # a shape cuDNN does not support
      if implementation == "cudnn":
        raise
      out = jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla")
  else:
    out = jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla")
  return out.astype(v.dtype).reshape(b, lq, num_heads * dh)
