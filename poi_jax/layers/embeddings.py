"""Word + position + token-type embeddings with an extra-embedding hook (POI-Net's POS table)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import common
from poi_jax.layers.sharding import BLD, constrain


class Embeddings(nnx.Module):
  """BERT/ALBERT/RoBERTa input embeddings; attribute names mirror transformers' state_dict.

  ``E = LayerNorm(word[ids] + position[pos] + token_type[tt] + extra)``, then dropout.
  ``extra`` (``(B, L, E)``, optional) is added before the LayerNorm: POI-Net adds its POS
  embedding here (paper eq. in §2.1).
  """

  def __init__(self, *, vocab_size: int, embedding_dim: int, max_positions: int,
               type_vocab_size: int, eps: float, init_std: float, dropout_rate: float, dtype,
               padding_idx: int | None, position_padding_idx: int | None = None,
               rngs: nnx.Rngs):
    self.word_embeddings = common.embed(vocab_size, embedding_dim, ("vocab", "embed"),
                                        init_std=init_std, dtype=dtype, rngs=rngs)
    self.position_embeddings = common.embed(max_positions, embedding_dim, (None, "embed"),
                                            init_std=init_std, dtype=dtype, rngs=rngs)
    self.token_type_embeddings = common.embed(type_vocab_size, embedding_dim, (None, "embed"),
                                              init_std=init_std, dtype=dtype, rngs=rngs)
    self.LayerNorm = common.layer_norm(embedding_dim, eps, dtype=dtype, rngs=rngs)
    self.dropout_rate = dropout_rate
    self.padding_idx = padding_idx
    self.position_padding_idx = position_padding_idx  # RoBERTa: positions padded with pad id

  def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array, position_ids: jax.Array,
               extra_embeddings: jax.Array | None, *, key, deterministic: bool) -> jax.Array:
    """ids ``(B, L)`` int -> ``(B, L, E)``."""
    words = _lookup(self.word_embeddings, input_ids, self.padding_idx)
    positions = _lookup(self.position_embeddings, position_ids, self.position_padding_idx)
    h = words + self.token_type_embeddings(token_type_ids) + positions
    if extra_embeddings is not None:
      h = h + extra_embeddings.astype(h.dtype)
    h = self.LayerNorm(h)
    return constrain(common.dropout(h, self.dropout_rate, key, deterministic), BLD)


def _lookup(table: nnx.Embed, ids: jax.Array, padding_idx: int | None) -> jax.Array:
  """Embedding lookup; like torch's ``Embedding(padding_idx=...)`` the padding row gets no
  gradient (its value still takes part in the forward)."""
  out = table(ids)
  if padding_idx is None:
    return out
  return jnp.where((ids == padding_idx)[..., None], jax.lax.stop_gradient(out), out)


def roberta_position_ids(input_ids: jax.Array, padding_idx: int) -> jax.Array:
  """RoBERTa positions: ``padding_idx + 1 + (index among non-pad tokens)``, pad -> padding_idx."""
  mask = (input_ids != padding_idx).astype(jnp.int32)
  return jnp.cumsum(mask, axis=1) * mask + padding_idx
