"""Embedding lookups that stay fast under a bfloat16 compute dtype.

`nnx.Embed` casts its float32 table to the compute dtype and then gathers, so in bfloat16 the
backward pass is a bfloat16 ``scatter-add`` into the table. GPUs have no native bfloat16 atomic
add: such a scatter runs as compare-and-swap loops, which serialise on tables of a few rows
(token types: 2 rows, POS tags: 40) hit by every one of the ``B x L`` tokens. `Embed` looks up in
the parameter dtype instead and casts the rows it took:

* tables of at most `ONE_HOT_MAX_ROWS` rows: ``one_hot(ids) @ table`` in float32 at HIGHEST
  precision (exact: one 1.0 per row; what the original BERT code does for token types). Forward
  and backward are matmuls, no gather or scatter at all;
* larger tables (words, positions): a float32 gather, whose backward is a float32 scatter-add
  (native atomics), then the cast.

Either way the result equals ``table[ids]`` rounded to the compute dtype, as before. Ids outside
``[0, rows)`` give zero rows on the one-hot path (the batch checks reject them before).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

# A one-hot matmul costs rows x width x tokens multiply-adds: negligible below this size.
ONE_HOT_MAX_ROWS = 64


class Embed(nnx.Embed):
  """`nnx.Embed` with the lookup above; same parameters (``embedding (rows, width)``)."""

  def __call__(self, inputs: jax.Array, out_sharding=None) -> jax.Array:
    """``inputs`` int ``(...)`` -> ``(..., width)`` in the compute dtype."""
    if not jnp.issubdtype(inputs.dtype, jnp.integer):
      raise ValueError("Embed inputs must be integers, got " + str(inputs.dtype))
    table = self.embedding[...]
    out_dtype = self.dtype or table.dtype
    rows = table.shape[0]
    if rows <= ONE_HOT_MAX_ROWS:
      one_hot = jax.nn.one_hot(inputs, rows, dtype=table.dtype)
      out = jnp.einsum("...n,nd->...d", one_hot, table, precision=jax.lax.Precision.HIGHEST)
    else:
      out = jnp.take(table, inputs, axis=0)
    return out.astype(out_dtype)
