"""ALBERT encoder in Flax NNX: factorised embeddings (``embedding_size`` != ``hidden_size``) and
cross-layer parameter sharing (``num_hidden_groups`` groups of ``inner_group_num`` layers; layer
``i`` of ``num_hidden_layers`` uses group ``i // (num_hidden_layers // num_hidden_groups)``).

Attribute paths mirror transformers' ``AlbertModel`` state_dict (``encoder.albert_layer_groups.
{g}.albert_layers.{j}.attention.query.weight`` ...). Shared layers are a natural scan: with
``scan_layers`` each group's repetitions run under ``nnx.scan`` with the group's parameters
broadcast, so the compiled program holds one copy of the group whatever the depth.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import attention as attn_lib
from poi_jax.layers import common
from poi_jax.layers.embeddings import Embeddings
from poi_jax.layers.sharding import BLD, BLH, BLM, constrain
from poi_jax.models.encoders import base
from poi_jax.models.encoders.config import EncoderConfig, remat_policy


class AlbertAttention(nnx.Module):

  def __init__(self, cfg: EncoderConfig, dtype, rngs):
    d, std = cfg.hidden_size, cfg.initializer_range
    self.query = common.dense(d, d, ("embed", "heads"), init_std=std, dtype=dtype, rngs=rngs)
    self.key = common.dense(d, d, ("embed", "heads"), init_std=std, dtype=dtype, rngs=rngs)
    self.value = common.dense(d, d, ("embed", "heads"), init_std=std, dtype=dtype, rngs=rngs)
    self.dense = common.dense(d, d, ("heads", "embed"), init_std=std, dtype=dtype, rngs=rngs)
    self.LayerNorm = common.layer_norm(d, cfg.layer_norm_eps, dtype=dtype, rngs=rngs)
    self.num_heads = cfg.num_attention_heads
    self.attn_dropout = cfg.attention_probs_dropout_prob
    self.out_dropout = cfg.hidden_dropout_prob
    self.implementation = cfg.attention

  def __call__(self, h, mask, key, deterministic):
    k1, k2 = common.split_key(key, 2)
    q, k, v = (constrain(p(h), BLH) for p in (self.query, self.key, self.value))
    ctx = attn_lib.dot_product_attention(
        q, k, v, mask, num_heads=self.num_heads, implementation=self.implementation,
        dropout_rate=self.attn_dropout, key=k1, deterministic=deterministic)
    out = common.dropout(self.dense(constrain(ctx, BLH)), self.out_dropout, k2, deterministic)
    return constrain(self.LayerNorm(h + out), BLD)


class AlbertLayer(nnx.Module):

  def __init__(self, cfg: EncoderConfig, dtype, rngs):
    std = cfg.initializer_range
    self.attention = AlbertAttention(cfg, dtype, rngs)
    self.ffn = common.dense(cfg.hidden_size, cfg.intermediate_size, ("embed", "mlp"),
                            init_std=std, dtype=dtype, rngs=rngs)
    self.ffn_output = common.dense(cfg.intermediate_size, cfg.hidden_size, ("mlp", "embed"),
                                   init_std=std, dtype=dtype, rngs=rngs)
    self.full_layer_layer_norm = common.layer_norm(cfg.hidden_size, cfg.layer_norm_eps,
                                                   dtype=dtype, rngs=rngs)
    self.act = common.activation(cfg.hidden_act)
    self.dropout_rate = cfg.hidden_dropout_prob

  def __call__(self, h, mask, key, deterministic=True):
    k1, k2 = common.split_key(key, 2)
    a = self.attention(h, mask, k1, deterministic)
    f = self.ffn_output(constrain(self.act(self.ffn(a)), BLM))
    f = common.dropout(f, self.dropout_rate, k2, deterministic)
    return constrain(self.full_layer_layer_norm(f + a), BLD)


class AlbertLayerGroup(nnx.Module):
  """``inner_group_num`` consecutive layers applied as one step of the stack."""

  def __init__(self, cfg, dtype, rngs):
    self.albert_layers = nnx.List([AlbertLayer(cfg, dtype, rngs)
                                   for _ in range(cfg.inner_group_num)])

  def __call__(self, h, mask, key, deterministic=True):
    """``(B, L, D) -> (B, L, D)`` and each inner layer's output, stacked ``(inner, B, L, D)``."""
    keys = common.split_key(key, len(self.albert_layers))
    inner = []
    for layer, k in zip(self.albert_layers, keys):
      h = layer(h, mask, k, deterministic)
      inner.append(h)
    return h, jnp.stack(inner)


class AlbertTransformer(nnx.Module):

  def __init__(self, cfg: EncoderConfig, dtype, rngs):
    self.embedding_hidden_mapping_in = common.dense(
        cfg.embedding_size, cfg.hidden_size, (None, "embed"), init_std=cfg.initializer_range,
        dtype=dtype, rngs=rngs)
    self.albert_layer_groups = nnx.List([AlbertLayerGroup(cfg, dtype, rngs)
                                         for _ in range(cfg.num_hidden_groups)])
    self.config = cfg

  def __call__(self, h, mask, key, *, deterministic, collect):
    """``(B, L, E)`` embeddings -> ``(last (B, L, D), (mapped input, each step's output) | None)``.

    Like transformers, one "hidden state" is recorded per inner layer application
    (``num_hidden_layers * inner_group_num`` of them after the mapped input)."""
    cfg = self.config
    h = constrain(self.embedding_hidden_mapping_in(h), BLD)
    first = h
    n, groups = cfg.num_hidden_layers, cfg.num_hidden_groups
    per_group = n // groups
    keys = None if (deterministic or key is None) else jax.random.split(key, n)
    outs = []
    for g, group in enumerate(self.albert_layer_groups):
      group_keys = None if keys is None else keys[g * per_group:(g + 1) * per_group]
      if cfg.scan_layers:
        h, step_outs = self._scan_group(group, h, mask, group_keys, deterministic, collect,
                                        per_group)
        outs.extend(step_outs)
      else:
        for r in range(per_group):
          h, inner = self._apply(group, h, mask, None if group_keys is None else group_keys[r],
                                 deterministic)
          outs.extend(inner[i] for i in range(inner.shape[0]))
    return h, ((first,) + tuple(outs) if collect else None)

  def _apply(self, group, h, mask, key, deterministic):
    fn = lambda g, x, k: g(x, mask, k, deterministic)
    if self.config.remat != "none":
      fn = nnx.remat(fn, policy=remat_policy(self.config.remat))
    return fn(group, h, key)

  def _scan_group(self, group, h, mask, keys, deterministic, collect, steps):
    apply = lambda g, x, k: self._apply(g, x, mask, k, deterministic)
    if keys is None:
      @nnx.scan(in_axes=(None, nnx.Carry), out_axes=(nnx.Carry, 0), length=steps)
      def body(g, x):
        x, inner = apply(g, x, None)
        return x, (inner if collect else None)
      h, ys = body(group, h)
    else:
      @nnx.scan(in_axes=(None, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
      def body(g, x, k):
        x, inner = apply(g, x, k)
        return x, (inner if collect else None)
      h, ys = body(group, h, keys)
    if not collect:
      return h, ()
    return h, tuple(ys[i, j] for i in range(steps) for j in range(ys.shape[1]))


class AlbertModel(nnx.Module):
  """ALBERT encoder; ``pooler`` is a Linear + tanh on the first token, as in transformers."""

  def __init__(self, cfg: EncoderConfig, *, rngs: nnx.Rngs):
    self.config = cfg
    dtype = common.compute_dtype(cfg.dtype)
    self.embeddings = Embeddings(
        vocab_size=cfg.vocab_size, embedding_dim=cfg.embedding_size,
        max_positions=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
        eps=cfg.layer_norm_eps, init_std=cfg.initializer_range,
        dropout_rate=cfg.hidden_dropout_prob, dtype=dtype, padding_idx=cfg.pad_token_id,
        rngs=rngs)
    self.encoder = AlbertTransformer(cfg, dtype, rngs)
    self.pooler = common.dense(cfg.hidden_size, cfg.hidden_size, ("embed", None),
                               init_std=cfg.initializer_range, dtype=dtype, rngs=rngs)
    self.dropout_keys = base.DropoutKeys(rngs)

  def __call__(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
               extra_embeddings=None, *, deterministic: bool = True,
               output_hidden_states: bool = False) -> base.EncoderOutput:
    """``input_ids (B, L)`` -> `EncoderOutput`; ``extra_embeddings`` is ``(B, L, E)`` with E the
    factorised ``embedding_size`` (added before the embedding LayerNorm)."""
    attention_mask, token_type_ids = base.default_inputs(input_ids, attention_mask,
                                                         token_type_ids)
    if position_ids is None:
      b, l = input_ids.shape
      position_ids = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32)[None], (b, l))
    k_emb, k_layers = common.split_key(self.dropout_keys(deterministic), 2)
    e = self.embeddings(input_ids, token_type_ids, position_ids, extra_embeddings,
                        key=k_emb, deterministic=deterministic)
    mask = attn_lib.key_mask(attention_mask)
    last, hidden_states = self.encoder(e, mask, k_layers, deterministic=deterministic,
                                       collect=output_hidden_states)
    pooled = jnp.tanh(self.pooler(last[:, 0]))
    return base.EncoderOutput(last, pooled, hidden_states)
