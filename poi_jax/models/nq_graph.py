"""The multi-grained graph model for Natural Questions (Zheng et al., ACL 2020, "NQ_BERT-DM").

``bert`` (our Flax BERT/ALBERT/RoBERTa encoder) reads ``[CLS] question [SEP] window [SEP]``;
its output becomes the token nodes of the window's document graph (`poi_jax.layers.graph`):

1. ``encoder.initializer``: position embedding per existing non-token node, then bottom-up mean
   pooling T->S, S->P, P->D.
2. ``encoder.layer.{l}`` (``num_layers`` = 0 is the paper's Model-II, 2 its Model-III; the released
   config has 0): per-level self-attention (token/sentence/paragraph; the document node passes
   through), the integration layer over the edges, ``A = LN(dense_{2H->H}(concat(S, agg)) + X)``
   (the residual is the layer input X, as the original), ``Y = LN(dense(gelu(dense(A))) + A)``.
3. Heads: token ``tanh(tok_dense) -> tok_outputs`` (start/end), paragraph ``tanh(para_dense) ->
   para_outputs``, document ``tanh(doc_dense) -> answer_type_outputs`` (0 UNKNOWN, 1 YES, 2 NO,
   3 SHORT, 4 LONG); missing token/paragraph nodes get logit ``-10000`` (the original's fill).

Parameter paths mirror the original ``NqModel`` state_dict (``bert.*`` is the HF encoder;
``encoder.layer.0.attention.token_attention.query.weight`` <-> ``encoder/layer/0/attention/
token_attention/query/kernel`` transposed; ``*.relative_*_embeddings.weight`` <-> ``.../embedding``;
LayerNorm ``weight``/``bias`` <-> ``scale``/``bias``).

Loss (paper §3.4, the original's ``CrossEntropyLoss(ignore_index=-1)``): start + end + paragraph
+ answer type, each the mean over its non-ignored (label >= 0, ``example_mask`` 1) rows; a term
whose rows are all ignored counts 0 (torch gives NaN there).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from poi_jax.data.features import graph_layout
from poi_jax.layers import common
from poi_jax.layers import graph as g

NUM_ANSWER_TYPES = 5
ANSWER_TYPES = ("UNKNOWN", "YES", "NO", "SHORT", "LONG")
GRAPH_KEYS = ("st_mask", "edge_src", "edge_tgt", "edge_type", "edge_pos")
LABEL_KEYS = ("start_positions", "end_positions", "paragraph_label", "answer_type")


@dataclasses.dataclass(frozen=True)
class GraphConfig:
  """The graph encoder's sizes (``hidden``/``num_heads``/``intermediate_size``: the BERT's by
  default, as the paper) and node capacities (``tokens`` = the sequence length)."""
  hidden: int
  num_heads: int
  intermediate_size: int
  tokens: int = 512
  sentences: int = 128
  paragraphs: int = 64
  num_layers: int = 0
  max_token_relative: int = 16
  max_sentence_relative: int = 8
  max_paragraph_relative: int = 4
  num_edge_positions: int = graph_layout.NUM_EDGE_POSITIONS
  layer_norm_eps: float = 1e-12
  hidden_act: str = "gelu"
  dropout: float = 0.1
  init_std: float = 0.02
  formulation: str = "segment"
  dtype: str = "float32"

  @property
  def layout(self) -> graph_layout.NodeLayout:
    return graph_layout.NodeLayout(self.tokens, self.sentences, self.paragraphs)


class Initializer(nnx.Module):
  """``position_embeddings (S + P + 1, H)``: row k belongs to node ``T + k``."""

  def __init__(self, cfg: GraphConfig, rngs: nnx.Rngs):
    self.position_embeddings = common.embed(cfg.sentences + cfg.paragraphs + 1, cfg.hidden,
                                            ("nodes", "embed"), init_std=cfg.init_std,
                                            dtype=jnp.float32, rngs=rngs)
    self.layout = cfg.layout

  def __call__(self, x, st_mask, edges):
    return g.initialize_nodes(x, st_mask, self.position_embeddings.embedding.get_value(), edges,
                              self.layout)


class _DenseNorm(nnx.Module):
  """``LayerNorm(dropout(dense(x)) + residual)`` (names ``dense``, ``layer_norm``)."""

  def __init__(self, cfg: GraphConfig, in_features: int, in_axis: str, dtype, rngs):
    self.dense = common.dense(in_features, cfg.hidden, (in_axis, "embed"), init_std=cfg.init_std,
                              dtype=dtype, rngs=rngs)
    self.layer_norm = common.layer_norm(cfg.hidden, cfg.layer_norm_eps, dtype=jnp.float32,
                                        rngs=rngs)
    self.rate = cfg.dropout

  def __call__(self, x, residual, key, deterministic):
    y = common.dropout(self.dense(x).astype(jnp.float32), self.rate, key, deterministic)
    return self.layer_norm(y + residual.astype(jnp.float32))


class GraphAttentionBlock(nnx.Module):
  """Per-level self-attention, integration and ``output`` (the original's ``attention``)."""

  def __init__(self, cfg: GraphConfig, dtype, rngs: nnx.Rngs):
    mk = lambda r: g.LevelAttention(cfg.hidden, cfg.num_heads, r, init_std=cfg.init_std,
                                    dropout=cfg.dropout, dtype=dtype, rngs=rngs)
    self.token_attention = mk(cfg.max_token_relative)
    self.sentence_attention = mk(cfg.max_sentence_relative)
    self.paragraph_attention = mk(cfg.max_paragraph_relative)
    self.integration = g.Integration(cfg.hidden, cfg.num_heads, cfg.num_edge_positions,
                                     init_std=cfg.init_std, dropout=cfg.dropout,
                                     formulation=cfg.formulation, dtype=dtype, rngs=rngs)
    self.output = _DenseNorm(cfg, 2 * cfg.hidden, "mlp", dtype, rngs)
    self.layout = cfg.layout

  def __call__(self, x, st_mask, edges, *, key, deterministic, collect=None, formulation=None):
    """``x (B, N, H)`` -> ``(B, N, H)``; ``collect``: dict receiving the intermediate tensors."""
    keys = common.split_key(key, 5)
    parts = []
    for i, (name, (start, size)) in enumerate(zip(
        ("token_attention", "sentence_attention", "paragraph_attention"),
        self.layout.level_slices())):
      out = getattr(self, name)(x[:, start:start + size], st_mask[:, start:start + size],
                                key=keys[i], deterministic=deterministic)
      parts.append(out)
      if collect is not None:
        collect[name] = out
    doc = self.layout.document
    s = jnp.concatenate(parts + [x[:, doc:doc + 1].astype(jnp.float32)], axis=1)
    agg = self.integration(s, edges, key=keys[3], deterministic=deterministic,
                           formulation=formulation)
    integ = jnp.concatenate([s, agg], axis=-1)
    out = self.output(integ, x, keys[4], deterministic)
    if collect is not None:
      collect["integration"], collect["attention_output"] = integ, out
    return out


class _Intermediate(nnx.Module):
  """``dense`` H -> I (the activation is applied by the layer)."""

  def __init__(self, cfg: GraphConfig, dtype, rngs):
    self.dense = common.dense(cfg.hidden, cfg.intermediate_size, ("embed", "mlp"),
                              init_std=cfg.init_std, dtype=dtype, rngs=rngs)


class GraphLayer(nnx.Module):
  """One graph encoder layer: ``attention``, ``intermediate.dense``, ``output``."""

  def __init__(self, cfg: GraphConfig, dtype, rngs: nnx.Rngs):
    self.attention = GraphAttentionBlock(cfg, dtype, rngs)
    self.intermediate = _Intermediate(cfg, dtype, rngs)
    self.output = _DenseNorm(cfg, cfg.intermediate_size, "mlp", dtype, rngs)
    self.act = common.activation(cfg.hidden_act)

  def __call__(self, x, st_mask, edges, *, key, deterministic, collect=None, formulation=None):
    k1, k2 = common.split_key(key, 2)
    a = self.attention(x, st_mask, edges, key=k1, deterministic=deterministic, collect=collect,
                       formulation=formulation)
    inter = self.act(self.intermediate.dense(a).astype(jnp.float32))
    y = self.output(inter, a, k2, deterministic)
    if collect is not None:
      collect["intermediate"], collect["layer_output"] = inter, y
    return y


class GraphEncoder(nnx.Module):
  """``initializer`` + ``layer[0..L)``: sequence output -> node table ``(B, N, H)``."""

  def __init__(self, cfg: GraphConfig, rngs: nnx.Rngs):
    dtype = common.compute_dtype(cfg.dtype)
    self.initializer = Initializer(cfg, rngs)
    self.layer = nnx.List([GraphLayer(cfg, dtype, rngs) for _ in range(cfg.num_layers)])

  def __call__(self, x, st_mask, edges, *, key=None, deterministic=True, collect=None,
               formulation=None):
    h = self.initializer(x, st_mask, edges)
    if collect is not None:
      collect["initializer"] = h
    keys = common.split_key(key, max(len(self.layer), 1))
    for i, layer in enumerate(self.layer):
      sub = {} if collect is not None else None
      h = layer(h, st_mask, edges, key=keys[i], deterministic=deterministic, collect=sub,
                formulation=formulation)
      if collect is not None:
        collect.update({f"layer.{i}.{k}": v for k, v in sub.items()})
    return h


def _masked_ce(logits, labels, weights):
  """Mean cross-entropy over rows with ``labels >= 0`` (weighted by ``weights``); 0 when none."""
  valid = (labels >= 0).astype(jnp.float32) * weights
  nll = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                        jnp.maximum(labels, 0))
  count = jnp.sum(valid)
  return jnp.where(count > 0, jnp.sum(nll * valid) / jnp.maximum(count, 1.0), 0.0)


def nq_loss(outputs: Mapping[str, jax.Array], batch: Mapping[str, jax.Array]) -> jax.Array:
  """The paper's §3.4 loss: four ignore-index (-1) cross-entropies, summed."""
  w = batch.get("example_mask")
  w = (jnp.ones(batch["answer_type"].shape, jnp.float32) if w is None
       else w.astype(jnp.float32))
  return (_masked_ce(outputs["start_logits"], batch["start_positions"], w)
          + _masked_ce(outputs["end_logits"], batch["end_positions"], w)
          + _masked_ce(outputs["paragraph_logits"], batch["paragraph_label"], w)
          + _masked_ce(outputs["answer_type_logits"], batch["answer_type"], w))


class NqGraphModel(nnx.Module):
  """BERT + graph encoder + NQ heads.

  ``encoder_config=None`` builds the graph part only (``graph_forward`` on a given sequence
  output: the golden fixture test and the benchmark).

  Batch: ``input_ids``/``attention_mask``/``token_type_ids`` ``(B, T)``; ``st_mask (B, N)``;
  ``edge_src``/``edge_tgt``/``edge_type``/``edge_pos`` ``(B, E)`` local node ids (-1 = padding);
  labels ``start_positions``/``end_positions``/``paragraph_label``/``answer_type`` ``(B,)``
  (-1 = ignored). Outputs: ``start_logits``/``end_logits (B, T)``, ``paragraph_logits (B, P)``,
  ``answer_type_logits (B, 5)``.
  """

  def __init__(self, encoder_config, graph_config: GraphConfig, *, rngs: nnx.Rngs):
    from poi_jax.models import encoders
    self.config = encoder_config
    self.graph_config = graph_config
    self.bert = (encoders.build_encoder(encoder_config, rngs=rngs)
                 if encoder_config is not None else None)
    if encoder_config is not None and encoder_config.hidden_size != graph_config.hidden:
      raise ValueError(f"graph hidden size {graph_config.hidden} != the encoder's "
                       f"{encoder_config.hidden_size}")
    self.encoder = GraphEncoder(graph_config, rngs)
    h, std = graph_config.hidden, graph_config.init_std
    dense = lambda n_out, axes: common.dense(h, n_out, axes, init_std=std, dtype=jnp.float32,
                                             rngs=rngs)
    self.tok_dense, self.para_dense, self.doc_dense = (dense(h, ("embed", "mlp"))
                                                       for _ in range(3))
    self.tok_outputs = dense(2, ("mlp", None))
    self.para_outputs = dense(1, ("mlp", None))
    self.answer_type_outputs = dense(NUM_ANSWER_TYPES, ("mlp", None))
    self.dropout_rngs = nnx.Rngs(dropout=rngs.dropout())

  def graph_forward(self, seq, st_mask, edges: g.Edges, *, key=None, deterministic=True,
                    collect=None, formulation=None):
    """``seq (B, T, H)``, ``st_mask (B, N)``, `Edges` -> the four logit arrays."""
    lay = self.graph_config.layout
    gf = self.encoder(seq, st_mask, edges, key=key, deterministic=deterministic,
                      collect=collect, formulation=formulation)
    if collect is not None:
      collect["graph_output"] = gf
    m = st_mask.astype(bool)
    tok = self.tok_outputs(jnp.tanh(self.tok_dense(gf[:, :lay.tokens])))
    tok = jnp.where(m[:, :lay.tokens, None], tok, g.MASK_VALUE)
    p0 = lay.paragraph_start
    para = self.para_outputs(jnp.tanh(self.para_dense(gf[:, p0:p0 + lay.paragraphs])))[..., 0]
    para = jnp.where(m[:, p0:p0 + lay.paragraphs], para, g.MASK_VALUE)
    answer_type = self.answer_type_outputs(jnp.tanh(self.doc_dense(gf[:, lay.document])))
    return {"start_logits": tok[..., 0], "end_logits": tok[..., 1], "paragraph_logits": para,
            "answer_type_logits": answer_type}

  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool = True,
               formulation: str | None = None):
    if self.bert is None:
      raise ValueError("this NqGraphModel was built without an encoder; use graph_forward")
    lay = self.graph_config.layout
    ids = batch["input_ids"]
    if ids.shape[1] != lay.tokens:
      raise ValueError(f"input length {ids.shape[1]} != the graph's token capacity "
                       f"{lay.tokens} (data.max_seq_length)")
    key = None if deterministic else self.dropout_rngs.dropout()
    seq = self.bert(ids, batch.get("attention_mask"), batch.get("token_type_ids"),
                    deterministic=deterministic).last_hidden_state
    edges = g.flatten_edges(batch["edge_src"], batch["edge_tgt"], batch["edge_type"],
                            batch["edge_pos"], lay.num_nodes)
    return self.graph_forward(seq, batch["st_mask"], edges, key=key,
                              deterministic=deterministic, formulation=formulation)

  def loss(self, batch, outputs) -> jax.Array:
    return nq_loss(outputs, batch)


def load_torch_state_dict(model: nnx.Module, sd: Mapping[str, "np.ndarray"], *,
                          source: str = "state_dict") -> list[str]:
  """Loads original (PyTorch-named) graph/head tensors into ``model`` by rename + transpose.

  ``Linear.weight`` -> ``kernel`` (transposed), ``Embedding.weight`` -> ``embedding``,
  ``LayerNorm.weight`` -> ``scale``. The per-level ``indices`` buffers are checked against
  `poi_jax.data.features.graph_layout.relative_indices` (they are recomputed, not stored).
  Returns the names that are not graph/head tensors (e.g. ``bert.*``, ``config.*``). A tensor
  whose shape does not match raises ``ValueError`` naming it.
  """
  import numpy as np
  unused = []
  for name, value in sd.items():
    parts = name.split(".")
    if parts[0] not in ("encoder", "tok_dense", "para_dense", "doc_dense", "tok_outputs",
                        "para_outputs", "answer_type_outputs"):
      unused.append(name)
      continue
    obj = model
    try:
      for part in parts[:-1]:
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    except (AttributeError, IndexError) as e:
      raise ValueError(f"{source}: tensor {name!r} has no counterpart in the model ({e})") from None
    leaf = parts[-1]
    if leaf == "indices":
      want = graph_layout.relative_indices(value.shape[0], obj.max_relative)
      if not np.array_equal(np.asarray(value), want):
        raise ValueError(f"{source}: {name} differs from clip(j - i + R, 0, 2R)")
      continue
    if isinstance(obj, nnx.Linear):
      var = obj.kernel if leaf == "weight" else obj.bias
      value = np.asarray(value).T if leaf == "weight" else np.asarray(value)
    elif isinstance(obj, nnx.Embed):
      var = obj.embedding
    elif isinstance(obj, nnx.LayerNorm):
      var = obj.scale if leaf == "weight" else obj.bias
    else:
      raise ValueError(f"{source}: tensor {name!r} maps to a {type(obj).__name__}")
    if tuple(var.get_value().shape) != tuple(value.shape):
      raise ValueError(f"{source}: tensor {name!r} has shape {tuple(value.shape)}, the model "
                       f"expects {tuple(var.get_value().shape)}")
    var.set_value(jnp.asarray(value, jnp.float32))
  return unused
