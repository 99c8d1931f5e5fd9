"""Losses shared by the reading-comprehension heads (POI-Net, DUMA, plain encoder)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def _weighted_mean(per_example: jax.Array, example_mask: jax.Array | None) -> jax.Array:
  if example_mask is None:
    return jnp.mean(per_example)
  w = example_mask.astype(jnp.float32)
  return jnp.sum(per_example * w) / jnp.maximum(jnp.sum(w), 1.0)


def span_loss(start_logits, end_logits, start_positions, end_positions, example_mask=None):
  """transformers' QA loss: positions clamped to ``[0, L]``, ``L`` ignored, (start + end) / 2.

  Args: logits ``(B, L)``, positions ``(B,)`` int, example_mask ``(B,)`` {0,1} (padded rows 0).
  """
  length = start_logits.shape[-1]

  def ce(logits, pos):
    pos = jnp.clip(pos, 0, length)
    valid = pos < length
    nll = optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), jnp.where(valid, pos, 0))
    return jnp.where(valid, nll, 0.0), valid.astype(jnp.float32)

  s, vs = ce(start_logits, start_positions)
  e, ve = ce(end_logits, end_positions)
  w = jnp.ones_like(vs) if example_mask is None else example_mask.astype(jnp.float32)
  start = jnp.sum(s * w) / jnp.maximum(jnp.sum(vs * w), 1.0)
  end = jnp.sum(e * w) / jnp.maximum(jnp.sum(ve * w), 1.0)
  return (start + end) / 2.0


def multiple_choice_loss(logits, labels, example_mask=None):
  """Cross-entropy of the softmax over options: logits ``(B, C)``, labels ``(B,)``."""
  nll = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
  return _weighted_mean(nll, example_mask)
