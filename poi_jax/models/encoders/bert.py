"""BERT and RoBERTa encoders in Flax NNX.

Attribute paths mirror transformers' ``BertModel``/``RobertaModel`` state_dict
(``encoder.layer.{i}.attention.self.query.weight`` <-> ``encoder/layer/{i}/attention/self/query/
kernel`` transposed), so conversion is a rename plus transposes (`poi_jax.models.encoders.load`).
With ``scan_layers`` the layers are one module whose parameters have a leading ``layers`` axis and
the stack runs under ``nnx.scan`` (path ``encoder/layer/...``, index implicit).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import attention as attn_lib
from poi_jax.layers import common
from poi_jax.layers.embeddings import Embeddings, roberta_position_ids
from poi_jax.layers.sharding import BLD, BLH, BLM, constrain
from poi_jax.models.encoders import base
from poi_jax.models.encoders.config import EncoderConfig


class BertSelfAttention(nnx.Module):

  def __init__(self, cfg: EncoderConfig, dtype, rngs: nnx.Rngs):
    d, std = cfg.hidden_size, cfg.initializer_range
    self.query = common.dense(d, d, ("embed", "heads"), init_std=std, dtype=dtype, rngs=rngs)
    self.key = common.dense(d, d, ("embed", "heads"), init_std=std, dtype=dtype, rngs=rngs)
    self.value = common.dense(d, d, ("embed", "heads"), init_std=std, dtype=dtype, rngs=rngs)
    self.num_heads = cfg.num_attention_heads
    self.dropout_rate = cfg.attention_probs_dropout_prob
    self.implementation = cfg.attention

  def __call__(self, h, mask, key, deterministic):
    q, k, v = (constrain(p(h), BLH) for p in (self.query, self.key, self.value))
    ctx = attn_lib.dot_product_attention(
        q, k, v, mask, num_heads=self.num_heads, implementation=self.implementation,
        dropout_rate=self.dropout_rate, key=key, deterministic=deterministic)
    return constrain(ctx, BLH)


class BertSelfOutput(nnx.Module):
  """``LayerNorm(dropout(dense(x)) + residual)``; also BERT's FFN output (``in_features`` = I)."""

  def __init__(self, cfg: EncoderConfig, in_features: int, in_axis: str, dtype, rngs):
    self.dense = common.dense(in_features, cfg.hidden_size, (in_axis, "embed"),
                              init_std=cfg.initializer_range, dtype=dtype, rngs=rngs)
    self.LayerNorm = common.layer_norm(cfg.hidden_size, cfg.layer_norm_eps, dtype=dtype, rngs=rngs)
    self.dropout_rate = cfg.hidden_dropout_prob

  def __call__(self, x, residual, key, deterministic):
    x = common.dropout(self.dense(x), self.dropout_rate, key, deterministic)
    return constrain(self.LayerNorm(x + residual), BLD)


class BertAttention(nnx.Module):

  def __init__(self, cfg, dtype, rngs):
    self.self = BertSelfAttention(cfg, dtype, rngs)
    self.output = BertSelfOutput(cfg, cfg.hidden_size, "heads", dtype, rngs)

  def __call__(self, h, mask, key, deterministic):
    k1, k2 = common.split_key(key, 2)
    return self.output(self.self(h, mask, k1, deterministic), h, k2, deterministic)


class BertIntermediate(nnx.Module):

  def __init__(self, cfg, dtype, rngs):
    self.dense = common.dense(cfg.hidden_size, cfg.intermediate_size, ("embed", "mlp"),
                              init_std=cfg.initializer_range, dtype=dtype, rngs=rngs)
    self.act = common.activation(cfg.hidden_act)

  def __call__(self, h):
    return constrain(self.act(self.dense(h)), BLM)


class BertLayer(nnx.Module):
  """One post-LN transformer layer: ``(B, L, D) -> (B, L, D)``."""

  def __init__(self, cfg: EncoderConfig, dtype, rngs: nnx.Rngs):
    self.attention = BertAttention(cfg, dtype, rngs)
    self.intermediate = BertIntermediate(cfg, dtype, rngs)
    self.output = BertSelfOutput(cfg, cfg.intermediate_size, "mlp", dtype, rngs)

  def __call__(self, h, mask, key, deterministic: bool = True):
    k1, k2 = common.split_key(key, 2)
    a = self.attention(h, mask, k1, deterministic)
    return self.output(self.intermediate(a), a, k2, deterministic)


class BertEncoder(nnx.Module):

  def __init__(self, cfg: EncoderConfig, dtype, rngs: nnx.Rngs):
    make = lambda r: BertLayer(cfg, dtype, r)
    if cfg.scan_layers:
      self.layer = base.create_stacked_layers(make, cfg.num_hidden_layers, rngs)
    else:
      self.layer = nnx.List([make(rngs) for _ in range(cfg.num_hidden_layers)])


class BertPooler(nnx.Module):

  def __init__(self, cfg, dtype, rngs):
    self.dense = common.dense(cfg.hidden_size, cfg.hidden_size, ("embed", None),
                              init_std=cfg.initializer_range, dtype=dtype, rngs=rngs)

  def __call__(self, h):
    """``tanh(dense(h[:, 0]))``: ``(B, L, D) -> (B, D)``."""
    return jnp.tanh(self.dense(h[:, 0]))


class BertModel(nnx.Module):
  """BERT encoder (also the body of RoBERTa, see `RobertaModel`)."""

  def __init__(self, cfg: EncoderConfig, *, rngs: nnx.Rngs):
    self.config = cfg
    dtype = common.compute_dtype(cfg.dtype)
    self.embeddings = Embeddings(
        vocab_size=cfg.vocab_size, embedding_dim=cfg.hidden_size,
        max_positions=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
        eps=cfg.layer_norm_eps, init_std=cfg.initializer_range,
        dropout_rate=cfg.hidden_dropout_prob, dtype=dtype, padding_idx=cfg.pad_token_id,
        position_padding_idx=cfg.pad_token_id if cfg.model_type == "roberta" else None,
        rngs=rngs)
    self.encoder = BertEncoder(cfg, dtype, rngs)
    self.pooler = BertPooler(cfg, dtype, rngs)
    self.dropout_keys = base.DropoutKeys(rngs)

  def _position_ids(self, input_ids):
    b, l = input_ids.shape
    return jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32)[None], (b, l))

  def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
               extra_embeddings=None, *, deterministic: bool = True,
               output_hidden_states: bool = False) -> base.EncoderOutput:
    """``input_ids (B, L)`` -> `EncoderOutput` (``last_hidden_state (B, L, D)``, pooler ``(B, D)``).

    ``extra_embeddings (B, L, D)`` is added to the summed input embeddings before their LayerNorm.
    """
    attention_mask, token_type_ids = base.default_inputs(input_ids, attention_mask,
                                                         token_type_ids)
    if position_ids is None:
      position_ids = self._position_ids(input_ids)
    k_emb, k_layers = common.split_key(self.dropout_keys(deterministic), 2)
    h = self.embeddings(input_ids, token_type_ids, position_ids, extra_embeddings,
                        key=k_emb, deterministic=deterministic)
    mask = attn_lib.key_mask(attention_mask)
    last, outs = base.run_layers(self.encoder.layer, h, mask, k_layers, cfg=self.config,
                                 deterministic=deterministic, stacked=self.config.scan_layers,
                                 collect=output_hidden_states)
    hidden_states = ((h,) + outs) if output_hidden_states else None
    return base.EncoderOutput(last, self.pooler(last), hidden_states)


class RobertaModel(BertModel):
  """RoBERTa: BERT with positions offset by the padding index (``pad + 1 + rank of the token
  among non-pad tokens``), as transformers derives them from ``input_ids``."""

  def _position_ids(self, input_ids):
    return roberta_position_ids(input_ids, self.config.pad_token_id)
