"""DASSA layers on a pretrained encoder (ALBERT/BERT/RoBERTa) before a span head.

``h = encoder(input_ids).last_hidden_state``; then ``num_layers`` times
``h = LayerNorm(h + dropout(DASSA(h, views)))`` (post-LN like the encoders under it); then
``qa_outputs`` Linear D -> 2. The views ``(B, V, L)`` carry each sub-token's word labels and
scopes (question and special tokens 0) and are completed to the heads by
`dassa.prepare_views`. Default mode ``masked`` (padding keys never attended: the encoders pad
every batch to the same length, and the predictions should not depend on it).
"""
from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import common, dassa
from poi_jax.models import encoders, heads


class DassaOnEncoder(nnx.Module):
  """Batch: ``input_ids``, ``attention_mask``, ``token_type_ids`` ``(B, L)``, ``view_labels`` /
  ``view_scopes`` ``(B, V, L)`` (optional: only "No" heads without), ``start_positions`` /
  ``end_positions`` ``(B,)`` -> ``{"start_logits", "end_logits"}`` ``(B, L)``."""

  def __init__(self, encoder_config: encoders.EncoderConfig, *, num_layers: int = 1,
               num_heads: int = 8, semantic_emb_dim: int = 16, num_semantic_labels: int,
               mode: str = "masked", replace_zero_labels: bool = True, rngs: nnx.Rngs):
    cfg = encoder_config
    dtype = common.compute_dtype(cfg.dtype)
    self.encoder = encoders.build_encoder(cfg, rngs=rngs)
    d = cfg.hidden_size
    self.num_heads, self.num_semantic_labels = num_heads, num_semantic_labels
    self.replace_zero_labels = replace_zero_labels
    self.dropout = cfg.hidden_dropout_prob
    self.dassa_layers = nnx.List([
        dassa.DassaSelfAttention(d, num_heads, semantic_emb_dim=semantic_emb_dim,
                                 num_semantic_labels=num_semantic_labels, mode=mode,
                                 init_std=cfg.initializer_range, dtype=dtype, rngs=rngs)
        for _ in range(num_layers)])
    self.dassa_norms = nnx.List([common.layer_norm(d, cfg.layer_norm_eps, dtype=dtype, rngs=rngs)
                                 for _ in range(num_layers)])
    self.qa_outputs = common.dense(d, 2, ("embed", None), init_std=cfg.initializer_range,
                                   dtype=jnp.float32, rngs=rngs)
    self.dropout_rngs = nnx.Rngs(dropout=rngs.dropout())

  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool = True):
    ids = batch["input_ids"]
    mask = batch.get("attention_mask", jnp.ones_like(ids))
    h = self.encoder(ids, mask, batch.get("token_type_ids"),
                     deterministic=deterministic).last_hidden_state
    empty = jnp.zeros(ids.shape[:1] + (0,) + ids.shape[1:], jnp.int32)
    labels, scopes = dassa.prepare_views(batch.get("view_labels", empty),
                                         batch.get("view_scopes", empty), self.num_heads,
                                         self.num_semantic_labels,
                                         replace_zero=self.replace_zero_labels)
    key = None if deterministic else self.dropout_rngs.dropout()
    keys = common.split_key(key, len(self.dassa_layers))
    for layer, norm, k in zip(self.dassa_layers, self.dassa_norms, keys):
      out = layer(h, labels, scopes, mask, deterministic=deterministic)
      h = norm(h + common.dropout(out, self.dropout, k, deterministic))
    logits = self.qa_outputs(h.astype(jnp.float32))
    return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

  def loss(self, batch, outputs) -> jax.Array:
    return heads.span_loss(outputs["start_logits"], outputs["end_logits"],
                           batch["start_positions"], batch["end_positions"],
                           batch.get("example_mask"))
