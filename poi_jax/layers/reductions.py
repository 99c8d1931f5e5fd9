"""Max and min over an axis whose gradient goes to the one position ``argmax`` picks.

`jnp.max`'s derivative (JAX's rule for ``reduce_max``) finds the chosen positions again by
comparing the operand with the result, and divides by how many are equal. That assumes the
compiler computes the operand bit for bit the same in the reduction and in the comparison. When
the operand is computed in the same program (a layer norm before the co-attention's max-pooling),
XLA may compute it twice in two fusions; on a CPU at ``--xla_backend_optimization_level=0`` the
two copies differ in the last bit, no position equals the max, and the gradient is 0/0: POI-Net's
whole encoder gradient came out NaN while the loss was right
(`tests/layers/test_reductions.py` shows it). Here the position comes from ``argmax`` and the
tangent is picked there: nothing is divided, and no second copy has to agree with the first.

On ties the first position gets the whole gradient, as ``torch.max(x, dim)`` gives it (JAX's
rule shares it among the tied positions); the values are `jnp.max`'s and `jnp.min`'s exactly.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def max_at_argmax(x: jax.Array, axis: int) -> jax.Array:
  """``jnp.max(x, axis)``; its derivative is the tangent at ``argmax(x, axis)`` (module docstring).

  Args:
    x: any shape, float.
    axis: the reduced axis (negative counts from the end).
  Returns:
    ``x``'s shape without ``axis``.
  """
  return jnp.max(x, axis=axis)


@max_at_argmax.defjvp
def _max_at_argmax_jvp(axis, primals, tangents):
  (x,), (t,) = primals, tangents
  axis = axis % x.ndim
  picked = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis) == jnp.argmax(
      x, axis=axis, keepdims=True)
  # Linear in t, so its transpose (the VJP) is where(picked, cotangent, 0): no division.
  return jnp.max(x, axis=axis), jnp.sum(jnp.where(picked, t, jnp.zeros_like(t)), axis=axis)


def min_at_argmin(x: jax.Array, axis: int) -> jax.Array:
  """``jnp.min(x, axis)``, its derivative the tangent at ``argmin(x, axis)``: `max_at_argmax`
  of ``-x`` (the first minimal position is the first maximal one of ``-x``)."""
  return -max_at_argmax(-x, axis)
