"""QANet with DASSA (Mihaylov & Frank 2019, §3; the allennlp 0.8.2 QaNet of
`../shared/specs/dassa.md` §3.1) for span prediction on NarrativeQA.

Embedding (words: GloVe-format text file or random; characters: 262 byte ids -> 16-d -> CNN of
``char_filters`` filters of width 5 -> max-pool; concatenated; 2 highway layers) ->
``_encoding_proj_layer`` (-> hidden) -> phrase encoder (1 block, 4 convs k=7, shared by passage and
question) -> context-query attention (trilinear ``w.[c; q; c*q]``, C2Q and Q2C) ->
``_modeling_proj_layer`` (4 hidden -> hidden) -> 7 modeling blocks (2 convs k=5) run 3 times with
shared weights, giving M0, M1, M2; blocks in ``dassa_blocks`` (paper: 1, 3, 5) use
`poi_jax.layers.dassa.DassaSelfAttention` on the passage views -> ``start = w1.[M0; M1]``,
``end = w2.[M0; M2]``, masked with -1e32; loss NLL(start) + NLL(end).

Encoder block (pre-LN): ``x += sinusoid``; each conv ``x += ReLU(pw(dw(LN x)))``; ``x += Attn(LN x)``;
``x += FFN(LN x)``; in training, dropout and stochastic layer drop with probability
``layer_dropout * l / L`` for sub-layer ``l`` of ``L``. Departures from allennlp, each for a
reason: conv inputs are zeroed on padding (so a row's result does not depend on the padding
contents), and the standard blocks' attention uses one masked softmax (-1e32 fill) for all rows.
DASSA runs in ``masked`` mode by default (`poi_jax.layers.dassa`: the released code attends to
padding, whose length differs between training and evaluation); ``dassa_mode="released"`` is the
original, for parity with its fixture.

Word embeddings from a GloVe file are frozen (a `FrozenEmbedding` variable, outside
``nnx.Param``, so the optimizer never updates them), as in the paper; random ones train. Word and
character ids, and the GloVe file, come from `poi_jax.data.features.vocab`; span decoding is
`poi_jax.eval.spans.best_spans`.
"""
from __future__ import annotations

import functools
import math
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from poi_jax.data.features.vocab import NUM_CHARS, PAD_ID
from poi_jax.layers import common, dassa
from poi_jax.layers.reductions import max_at_argmax

MASK_FILL = -1e32


class FrozenEmbedding(nnx.Variable):
  """Pretrained word vectors that training does not update."""


# ---- layers ------------------------------------------------------------------------------------

def positional_features(length: int, dim: int, min_timescale: float = 1.0,
                        max_timescale: float = 1.0e4) -> jax.Array:
  """allennlp ``add_positional_features``: ``[sin | cos]`` halves (a zero column for odd dim)."""
  n = dim // 2
  t = jnp.arange(length, dtype=jnp.float32)
  inc = math.log(max_timescale / min_timescale) / max(n - 1, 1)
  inv = min_timescale * jnp.exp(jnp.arange(n, dtype=jnp.float32) * -inc)
  scaled = t[:, None] * inv[None, :]
  sin = jnp.concatenate([jnp.sin(scaled), jnp.cos(scaled)], axis=1)
  if dim % 2:
    sin = jnp.concatenate([sin, jnp.zeros((length, 1))], axis=1)
  return sin


class Highway(nnx.Module):
  """allennlp Highway: ``[h | g] = W x``, ``x = sigmoid(g) x + (1 - sigmoid(g)) relu(h)``."""

  def __init__(self, dim: int, num_layers: int, *, dtype, rngs):
    self._layers = nnx.List([common.dense(dim, 2 * dim, ("embed", "mlp"), init_std=0.02,
                                          dtype=dtype, rngs=rngs) for _ in range(num_layers)])

  def __call__(self, x):
    for layer in self._layers:
      h, g = jnp.split(layer(x), 2, axis=-1)
      g = jax.nn.sigmoid(g)
      x = g * x + (1 - g) * jax.nn.relu(h)
    return x


class MultiHeadSelfAttention(nnx.Module):
  """allennlp MultiHeadSelfAttention: one combined Q/K/V projection, padding keys masked,
  scale sqrt(D // H), output projection."""

  def __init__(self, dim: int, num_heads: int, *, dtype, rngs):
    self.num_heads, self.dim = num_heads, dim
    self._combined_projection = common.dense(dim, 3 * dim, ("embed", "heads"), init_std=0.02,
                                             dtype=dtype, rngs=rngs)
    self._output_projection = common.dense(dim, dim, ("heads", "embed"), init_std=0.02,
                                           dtype=dtype, rngs=rngs)

  def __call__(self, x, mask):
    b, t, d = x.shape
    h = self.num_heads
    q, k, v = jnp.split(self._combined_projection(x), 3, axis=-1)
    split = lambda z: z.reshape(b, t, h, d // h)
    s = jnp.einsum("bqhd,bkhd->bhqk", split(q) / math.sqrt(d // h), split(k))
    s = jnp.where(mask[:, None, None, :] > 0, s.astype(jnp.float32), MASK_FILL)
    p = jax.nn.softmax(s, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", p.astype(v.dtype), split(v)).reshape(b, t, d)
    return self._output_projection(out)


class DepthwiseSeparableConv(nnx.Module):
  """Depthwise conv (``groups = D``, same padding) then a pointwise (1x1) conv, then ReLU."""

  def __init__(self, dim: int, kernel: int, *, dtype, rngs):
    self.depthwise = nnx.Conv(dim, dim, (kernel,), feature_group_count=dim, padding="SAME",
                              dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    self.pointwise = nnx.Conv(dim, dim, (1,), dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

  def __call__(self, x):
    return jax.nn.relu(self.pointwise(self.depthwise(x)))


class EncoderBlock(nnx.Module):
  """One QANet encoder block; ``attention`` is standard masked MHA or DASSA."""

  def __init__(self, dim: int, *, num_convs: int, kernel: int, num_heads: int, dassa_layer=None,
               dropout: float, layer_dropout: float, dtype, rngs):
    self._conv_norm_layers = nnx.List([common.layer_norm(dim, 1e-5, dtype=dtype, rngs=rngs)
                                       for _ in range(num_convs)])
    self._conv_layers = nnx.List([DepthwiseSeparableConv(dim, kernel, dtype=dtype, rngs=rngs)
                                  for _ in range(num_convs)])
    self.attention_norm_layer = common.layer_norm(dim, 1e-5, dtype=dtype, rngs=rngs)
    self.is_dassa = dassa_layer is not None
    self.attention_layer = (dassa_layer if dassa_layer is not None else
                            MultiHeadSelfAttention(dim, num_heads, dtype=dtype, rngs=rngs))
    self.feedforward_norm_layer = common.layer_norm(dim, 1e-5, dtype=dtype, rngs=rngs)
    self.feedforward_0 = common.dense(dim, dim, ("embed", "mlp"), init_std=0.02, dtype=dtype,
                                      rngs=rngs)
    self.feedforward_1 = common.dense(dim, dim, ("mlp", "embed"), init_std=0.02, dtype=dtype,
                                      rngs=rngs)
    self.dropout, self.layer_dropout = dropout, layer_dropout

  def __call__(self, x, mask, views, key, deterministic: bool):
    """``x (B, T, D)``, ``mask (B, T)``, ``views`` = (labels, scopes) ``(B, H, T)`` or None."""
    total = len(self._conv_layers) + 2
    keys = common.split_key(key, 2 * total)
    x = x + positional_features(x.shape[1], x.shape[2]).astype(x.dtype)
    m = mask[..., None].astype(x.dtype)
    drop = lambda y, k: common.dropout(y, self.dropout, k, deterministic)

    def residual(x, out, i):
      if deterministic or self.layer_dropout == 0:
        return x + out
      skip = jax.random.bernoulli(keys[total + i], self.layer_dropout * (i + 1) / total)
      return jnp.where(skip, x, x + out)

    for i, (norm, conv) in enumerate(zip(self._conv_norm_layers, self._conv_layers)):
      x = residual(x, drop(conv(norm(x) * m), keys[i]), i)
    i = len(self._conv_layers)
    y = self.attention_norm_layer(x)
    if self.is_dassa:
      y = self.attention_layer(y, views[0], views[1], mask, deterministic=deterministic)
    else:
      y = self.attention_layer(y, mask)
    x = residual(x, drop(y, keys[i]), i)
    y = self.feedforward_1(jax.nn.relu(self.feedforward_0(self.feedforward_norm_layer(x))))
    return residual(x, drop(y, keys[i + 1]), i + 1)


def masked_softmax(s, mask, axis=-1):
  """allennlp ``masked_softmax(memory_efficient=True)``: fill -1e32, then softmax."""
  return jax.nn.softmax(jnp.where(mask > 0, s, MASK_FILL), axis=axis)


class QanetDassa(nnx.Module):
  """Batch keys: ``passage_words (B, Lc)``, ``passage_chars (B, Lc, W)``, ``passage_mask``,
  ``question_words (B, Lq)``, ``question_chars``, ``question_mask``, ``view_labels`` /
  ``view_scopes`` ``(B, V, Lc)`` (V <= heads; padded and completed by `dassa.prepare_views`),
  and for the loss ``span_start`` / ``span_end`` ``(B,)`` (inclusive). Outputs
  ``{"span_start_logits", "span_end_logits"}`` ``(B, Lc)``."""

  def __init__(self, *, vocab_size: int, word_dim: int = 100, char_dim: int = 16,
               char_filters: int = 100, char_kernel: int = 5, hidden: int = 128,
               num_heads: int = 8, embedding_convs: int = 4, embedding_kernel: int = 7,
               modeling_blocks: int = 7, modeling_convs: int = 2, modeling_kernel: int = 5,
               modeling_passes: int = 3, dassa_blocks=(1, 3, 5), semantic_emb_dim: int = 16,
               num_semantic_labels: int = 0, dassa_mode: str = "masked",
               replace_zero_labels: bool = True, dropout: float = 0.1,
               layer_dropout: float = 0.1, word_vectors: np.ndarray | None = None,
               dtype=jnp.float32, rngs: nnx.Rngs):
    if modeling_passes < 3:
      raise ValueError(f"modeling_passes={modeling_passes}: the span head reads the last 3")
    if any(not 0 <= b < modeling_blocks for b in dassa_blocks):
      raise ValueError(f"dassa_blocks {tuple(dassa_blocks)} must lie in 0..{modeling_blocks - 1}")
    if dassa_blocks and num_semantic_labels < num_heads:
      raise ValueError("num_semantic_labels must cover the label vocabulary and the heads")
    self.num_heads, self.num_semantic_labels = num_heads, num_semantic_labels
    self.replace_zero_labels, self.dropout = replace_zero_labels, dropout
    self.modeling_passes = modeling_passes
    if word_vectors is not None:
      if word_vectors.shape[1] != word_dim:
        raise ValueError(f"word vectors are {word_vectors.shape[1]}-d, word_dim={word_dim}")
      self.word_embedding = FrozenEmbedding(jnp.asarray(word_vectors, jnp.float32),
                                            out_sharding=("vocab", None), eager_sharding=False)
    else:
      self.word_embedding = nnx.Param(
          nnx.initializers.normal(0.1)(rngs.params(), (vocab_size, word_dim), jnp.float32)
          .at[PAD_ID].set(0.0), out_sharding=("vocab", None), eager_sharding=False)
    self.char_embedding = common.embed(NUM_CHARS, char_dim, (None, None), init_std=0.1,
                                       dtype=dtype, rngs=rngs)
    self.char_conv = nnx.Conv(char_dim, char_filters, (char_kernel,), padding="VALID",
                              dtype=dtype, param_dtype=jnp.float32, rngs=rngs)
    emb_dim = word_dim + char_filters
    self._highway_layer = Highway(emb_dim, 2, dtype=dtype, rngs=rngs)
    self._encoding_proj_layer = common.dense(emb_dim, hidden, ("embed", None), init_std=0.02,
                                             dtype=dtype, rngs=rngs)
    block = functools.partial(EncoderBlock, hidden, num_heads=num_heads, dropout=dropout,
                              layer_dropout=layer_dropout, dtype=dtype, rngs=rngs)
    self._phrase_layer = block(num_convs=embedding_convs, kernel=embedding_kernel)
    self._matrix_attention = nnx.Param(
        nnx.initializers.normal(1.0 / math.sqrt(3 * hidden))(rngs.params(), (3 * hidden,)),
        out_sharding=(None,), eager_sharding=False)
    self._matrix_attention_bias = nnx.Param(jnp.zeros(()), out_sharding=(), eager_sharding=False)
    self._modeling_proj_layer = common.dense(4 * hidden, hidden, ("mlp", "embed"),
                                             init_std=0.02, dtype=dtype, rngs=rngs)

    def modeling_block(i):
      layer = None
      if i in dassa_blocks:
        layer = dassa.DassaSelfAttention(hidden, num_heads, semantic_emb_dim=semantic_emb_dim,
                                         num_semantic_labels=num_semantic_labels,
                                         mode=dassa_mode, dtype=dtype, rngs=rngs)
      return block(num_convs=modeling_convs, kernel=modeling_kernel, dassa_layer=layer)

    self._modeling_layer = nnx.List([modeling_block(i) for i in range(modeling_blocks)])
    self._span_start_predictor = common.dense(2 * hidden, 1, ("embed", None), init_std=0.02,
                                              dtype=jnp.float32, rngs=rngs)
    self._span_end_predictor = common.dense(2 * hidden, 1, ("embed", None), init_std=0.02,
                                            dtype=jnp.float32, rngs=rngs)
    self.dropout_rngs = nnx.Rngs(dropout=rngs.dropout())

  def embed(self, words, chars, key, deterministic):
    table = self.word_embedding.get_value()
    w = jnp.take(table, words, axis=0)
    cmask = (chars > 0)[..., None].astype(w.dtype)
    c = self.char_embedding(chars) * cmask  # (B, T, W, C)
    b, t, wl, cd = c.shape
    c = jax.nn.relu(self.char_conv(c.reshape(b * t, wl, cd)))
    c = max_at_argmax(c, 1).reshape(b, t, -1)
    x = jnp.concatenate([w, c], axis=-1)
    x = common.dropout(x, self.dropout, key, deterministic)
    return self._encoding_proj_layer(self._highway_layer(x))

  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool = True):
    key = None if deterministic else self.dropout_rngs.dropout()
    keys = common.split_key(key, 8)
    cm = batch["passage_mask"].astype(jnp.float32)
    qm = batch["question_mask"].astype(jnp.float32)
    c = self.embed(batch["passage_words"], batch["passage_chars"], keys[0], deterministic)
    q = self.embed(batch["question_words"], batch["question_chars"], keys[1], deterministic)
    drop = lambda y, k: common.dropout(y, self.dropout, k, deterministic)
    c = drop(self._phrase_layer(c, cm, None, keys[2], deterministic), keys[3])
    q = drop(self._phrase_layer(q, qm, None, keys[4], deterministic), keys[5])
    # Trilinear similarity w.[c; q; c*q] + b, split so that no (B, Lc, Lq, 3D) tensor is built.
    d = c.shape[-1]
    w = self._matrix_attention.get_value()
    s = ((c @ w[:d])[:, :, None] + (q @ w[d:2 * d])[:, None, :]
         + jnp.einsum("bid,bjd->bij", c * w[2 * d:], q) + self._matrix_attention_bias.get_value())
    a = masked_softmax(s, qm[:, None, :])  # (B, Lc, Lq) over the question
    c2q = a @ q
    bmat = masked_softmax(jnp.swapaxes(s, 1, 2), cm[:, None, :])  # (B, Lq, Lc) over the passage
    q2c = (a @ bmat) @ c
    merged = drop(jnp.concatenate([c, c2q, c * c2q, c * q2c], axis=-1), keys[6])
    views = None
    if any(blk.is_dassa for blk in self._modeling_layer):
      empty = jnp.zeros(cm.shape[:1] + (0,) + cm.shape[1:], jnp.int32)  # only "No" heads
      views = dassa.prepare_views(batch.get("view_labels", empty),
                                  batch.get("view_scopes", empty), self.num_heads,
                                  self.num_semantic_labels,
                                  replace_zero=self.replace_zero_labels)
    m = self._modeling_proj_layer(merged)
    # The passes share weights: one scan over passes traces the block stack once (the compile
    # time of an unrolled 3 x 7 stack is minutes on a CPU).
    n_blocks = len(self._modeling_layer)
    if key is None:
      pass_keys = jnp.zeros((self.modeling_passes, n_blocks + 1, 2), jnp.uint32)
    else:
      pass_keys = jax.random.split(keys[7], (self.modeling_passes, n_blocks + 1))
    graphdef, state = nnx.split(self._modeling_layer)

    def one_pass(m, ks):
      blocks = nnx.merge(graphdef, state)
      for i, blk in enumerate(blocks):
        m = blk(m, cm, views, None if key is None else ks[i], deterministic)
      m = drop(m, None if key is None else ks[n_blocks])
      return m, m

    _, outs = jax.lax.scan(one_pass, m, pass_keys)
    m0, m1, m2 = outs[-3], outs[-2], outs[-1]  # (passes, B, T, D) stacked by the scan
    start = self._span_start_predictor(jnp.concatenate([m0, m1], -1))[..., 0]
    end = self._span_end_predictor(jnp.concatenate([m0, m2], -1))[..., 0]
    start = jnp.where(cm > 0, start.astype(jnp.float32), MASK_FILL)
    end = jnp.where(cm > 0, end.astype(jnp.float32), MASK_FILL)
    return {"span_start_logits": start, "span_end_logits": end}

  def loss(self, batch, outputs) -> jax.Array:
    return span_nll(outputs["span_start_logits"], outputs["span_end_logits"],
                    batch["span_start"], batch["span_end"], batch.get("example_mask"))


def span_nll(start_logits, end_logits, span_start, span_end, example_mask=None):
  """NLL(start) + NLL(end), averaged over the rows with ``example_mask`` 1 (allennlp QaNet)."""
  nll = (optax.softmax_cross_entropy_with_integer_labels(start_logits, span_start)
         + optax.softmax_cross_entropy_with_integer_labels(end_logits, span_end))
  w = jnp.ones_like(nll) if example_mask is None else example_mask.astype(jnp.float32)
  return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)
