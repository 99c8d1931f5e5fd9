"""Graph attention over a multi-grained document graph (Zheng et al., ACL 2020, "NQ_BERT-DM").

A window's nodes are laid out as one table of ``N = T + S + P + 1`` rows: tokens ``[0, T)``,
sentences ``[T, T+S)``, paragraphs ``[T+S, T+S+P)`` and the document ``T+S+P`` (the original:
512/128/64/1 = 705). Edges join the levels (token, sentence, paragraph, document = 0..3) in both
directions; an edge's type is ``4*src_level + tgt_level`` and its position id indexes a table of
relational embeddings (`poi_jax.data.features.graph_layout`: `EDGE_POS_MAX`, `edge_position`).

Edges arrive per window as ``(B, E)`` int arrays (local node ids, ``-1`` = padding edge), so a
batch can be split over devices like any other feature; the layers flatten them to
``node + N*b`` (what the original batches) internally.

* `LevelAttention`: self-attention inside one level with Shaw-style relative keys and values,
  ``S_ij = q_i.k_j/sqrt(d) + q_i.relK[clip(j-i+R, 0, 2R)]`` (the relative term NOT scaled, as the
  original; the paper scales it), ``-10000`` on missing keys, ``out_i = sum_j P_ij (v_j +
  relV[r_ij])``; relK/relV ``(2R+1, d)`` shared by the heads.
* `Integration`: attention of every node over its incoming edges, ``k_e = k_src + relK[pos]``,
  ``v_e = v_src + relV[pos]``, ``a = softmax over the target's edges of q_tgt.k_e/sqrt(d)``;
  a node without incoming edges gets 0. Two formulations that agree to float rounding:
  ``"segment"`` (per edge, `jax.ops.segment_max` / `segment_sum`: memory O(E)) and ``"dense"``
  (the node graph as a masked ``(N, N)`` attention with matmuls: faster on an accelerator when
  N^2 is affordable). The original normalises a raw ``exp`` without subtracting the maximum, which
  overflows to inf/NaN on large scores; both formulations subtract the per-target maximum, which
  is identical wherever the original is finite.
* `initialize_nodes`: the original's initializer (position embedding per non-token node, then
  bottom-up mean pooling T->S, S->P, P->D, each step on the already-updated table).
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.data.features.graph_layout import (DOCUMENT, NUM_EDGE_POSITIONS, PARAGRAPH,
                                                SENTENCE, TOKEN, NodeLayout, edge_type,
                                                relative_indices)
from poi_jax.layers import common

FORMULATIONS = ("segment", "dense")
MASK_VALUE = -10000.0  # the original's additive mask for missing keys / logits of missing nodes


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Edges:
  """A batch of windows' edge lists, flattened: ``src``/``tgt`` ``(B*E,)`` global node ids
  ``node + N*b``; padding edges have ``tgt = B*N`` (out of range: segment ops drop them) and
  ``src = 0``; ``etype``/``pos`` ``(B*E,)``; ``valid`` ``(B*E,)`` bool."""
  src: jax.Array
  tgt: jax.Array
  etype: jax.Array
  pos: jax.Array
  valid: jax.Array


def flatten_edges(src, tgt, etype, pos, num_nodes: int) -> Edges:
  """Per-window ``(B, E)`` local edges (``-1`` in src or tgt = padding) -> `Edges`."""
  b = src.shape[0]
  valid = (src >= 0) & (tgt >= 0) & (src < num_nodes) & (tgt < num_nodes)
  offset = (jnp.arange(b, dtype=jnp.int32) * num_nodes)[:, None]
  total = b * num_nodes
  gsrc = jnp.where(valid, src + offset, 0).reshape(-1).astype(jnp.int32)
  gtgt = jnp.where(valid, tgt + offset, total).reshape(-1).astype(jnp.int32)
  return Edges(gsrc, gtgt, jnp.where(valid, etype, -1).reshape(-1).astype(jnp.int32),
               jnp.where(valid, pos, 0).reshape(-1).astype(jnp.int32), valid.reshape(-1))


def segment_softmax(logits: jax.Array, segments: jax.Array, num_segments: int) -> jax.Array:
  """Softmax of ``logits (E, ...)`` within each segment (``segments (E,)``; ids outside
  ``[0, num_segments)`` are dropped and get weight 0). Subtracts the per-segment maximum: equal
  to ``exp(x) / segment_sum(exp(x))`` wherever that is finite."""
  seg_max = jax.ops.segment_max(logits, segments, num_segments)
  # The max only stabilises; it cancels mathematically, so no gradient flows through it.
  seg_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(seg_max), seg_max, 0.0))
  inside = (segments >= 0) & (segments < num_segments)
  safe = jnp.where(inside, segments, 0)
  shifted = logits - seg_max[safe]
  w = jnp.where(inside.reshape((-1,) + (1,) * (logits.ndim - 1)), jnp.exp(shifted), 0.0)
  denom = jax.ops.segment_sum(w, segments, num_segments)
  return w / jnp.where(denom[safe] > 0, denom[safe], 1.0)


def initialize_nodes(x: jax.Array, st_mask: jax.Array, position_embeddings: jax.Array,
                     edges: Edges, layout: NodeLayout) -> jax.Array:
  """The original initializer.

  Args:
    x: ``(B, T, H)`` sequence output (token nodes).
    st_mask: ``(B, N)`` {0,1}: which nodes exist.
    position_embeddings: ``(S + P + 1, H)``: row k belongs to node ``T + k``.
    edges: the batch's `Edges`.
  Returns:
    ``(B, N, H)``: tokens = x, other existing nodes = their position embedding, then, in order,
    for edge types T->S, S->P, P->D: ``G[t] += mean over that type's edges s->t of G[s]``.
  """
  b, t, h = x.shape
  n = layout.num_nodes
  upper = position_embeddings[None].astype(jnp.float32) * st_mask[:, t:, None].astype(
      jnp.float32)
  g = jnp.concatenate([x.astype(jnp.float32), upper], axis=1).reshape(b * n, h)
  for src_level, tgt_level in ((TOKEN, SENTENCE), (SENTENCE, PARAGRAPH), (PARAGRAPH, DOCUMENT)):
    w = (edges.valid & (edges.etype == edge_type(src_level, tgt_level))).astype(jnp.float32)
    sums = jax.ops.segment_sum(g[edges.src] * w[:, None], edges.tgt, b * n)
    counts = jax.ops.segment_sum(w, edges.tgt, b * n)
    g = g + jnp.where(counts[:, None] > 0, sums / jnp.maximum(counts, 1.0)[:, None], 0.0)
  return g.reshape(b, n, h)


def _heads(x, num_heads):
  return x.reshape(x.shape[:-1] + (num_heads, x.shape[-1] // num_heads))


class LevelAttention(nnx.Module):
  """Self-attention among the nodes of one level with relative-position keys and values.

  Parameters (original names): ``query``/``key``/``value`` (H -> H, bias),
  ``relative_key_embeddings``/``relative_value_embeddings`` ``(2R+1, H/heads)``.
  """

  def __init__(self, hidden: int, num_heads: int, max_relative: int, *, init_std: float = 0.02,
               dropout: float = 0.0, dtype=jnp.float32, rngs: nnx.Rngs):
    if hidden % num_heads:
      raise ValueError(f"hidden size {hidden} is not a multiple of {num_heads} heads")
    d = hidden // num_heads
    mk = lambda: common.dense(hidden, hidden, ("embed", "heads"), init_std=init_std, dtype=dtype,
                              rngs=rngs)
    self.query, self.key, self.value = mk(), mk(), mk()
    emb = lambda: common.embed(2 * max_relative + 1, d, (None, "kv"), init_std=init_std,
                               dtype=jnp.float32, rngs=rngs)
    self.relative_key_embeddings, self.relative_value_embeddings = emb(), emb()
    self.num_heads, self.max_relative, self.dropout = num_heads, int(max_relative), dropout

  def __call__(self, x: jax.Array, mask: jax.Array, *, key=None, deterministic: bool = True):
    """``x (B, n, H)``, ``mask (B, n)`` {0,1} -> ``(B, n, H)`` (masked query rows computed too)."""
    n = x.shape[1]
    q, k, v = (_heads(f(x).astype(jnp.float32), self.num_heads)
               for f in (self.query, self.key, self.value))
    d = q.shape[-1]
    # One-hot of the clipped relative index (n, n, 2R+1): both relative terms become matmuls
    # (no gathers/scatters, whose gradients are slow scatters on accelerators).
    onehot = jax.nn.one_hot(relative_indices(n, self.max_relative), 2 * self.max_relative + 1,
                            dtype=jnp.float32)
    rel_k = self.relative_key_embeddings.embedding.get_value().astype(jnp.float32)
    rel_v = self.relative_value_embeddings.embedding.get_value().astype(jnp.float32)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    q_rel = jnp.einsum("bqhd,rd->bhqr", q, rel_k)
    scores = scores + jnp.einsum("bhqr,qkr->bhqk", q_rel, onehot)  # not scaled (the original)
    scores = scores + (1.0 - mask.astype(jnp.float32))[:, None, None, :] * MASK_VALUE
    probs = jax.nn.softmax(scores, axis=-1)
    probs = common.dropout(probs, self.dropout, key, deterministic)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
    bins = jnp.einsum("bhqk,qkr->bhqr", probs, onehot)
    out = out + jnp.einsum("bhqr,rd->bqhd", bins, rel_v)
    return out.reshape(x.shape[:-1] + (-1,))


class Integration(nnx.Module):
  """Attention of each node over its incoming edges (the graph integration layer).

  Parameters (original names): ``query``/``key``/``value`` (H -> H, bias),
  ``relative_key_embeddings``/``relative_value_embeddings`` ``(num_edge_positions, H/heads)``.
  Returns the aggregation only ``(B, N, H)``; the caller concatenates it to its input.
  """

  def __init__(self, hidden: int, num_heads: int, num_edge_positions: int = NUM_EDGE_POSITIONS,
               *, init_std: float = 0.02, dropout: float = 0.0, formulation: str = "segment",
               dtype=jnp.float32, rngs: nnx.Rngs):
    if formulation not in FORMULATIONS:
      raise ValueError(f"formulation must be one of {FORMULATIONS}, got {formulation!r}")
    d = hidden // num_heads
    mk = lambda: common.dense(hidden, hidden, ("embed", "heads"), init_std=init_std, dtype=dtype,
                              rngs=rngs)
    self.query, self.key, self.value = mk(), mk(), mk()
    emb = lambda: common.embed(num_edge_positions, d, (None, "kv"), init_std=init_std,
                               dtype=jnp.float32, rngs=rngs)
    self.relative_key_embeddings, self.relative_value_embeddings = emb(), emb()
    self.num_heads, self.dropout, self.formulation = num_heads, dropout, formulation

  def __call__(self, s: jax.Array, edges: Edges, *, key=None, deterministic: bool = True,
               formulation: str | None = None):
    """``s (B, N, H)``, `Edges` -> aggregation ``(B, N, H)``."""
    b, n, hidden = s.shape
    q, k, v = (_heads(f(s).astype(jnp.float32), self.num_heads)
               for f in (self.query, self.key, self.value))
    rel_k = self.relative_key_embeddings.embedding.get_value().astype(jnp.float32)
    rel_v = self.relative_value_embeddings.embedding.get_value().astype(jnp.float32)
    form = formulation or self.formulation
    if form == "segment":
      agg = self._segment(q, k, v, rel_k, rel_v, edges, b * n, key, deterministic)
    elif form == "dense":
      agg = self._dense(q, k, v, rel_k, rel_v, edges, key, deterministic)
    else:
      raise ValueError(f"formulation must be one of {FORMULATIONS}, got {form!r}")
    return agg.reshape(b, n, hidden)

  def _segment(self, q, k, v, rel_k, rel_v, edges, total, key, deterministic):
    """Per edge: memory O(E * H). q/k/v ``(B, N, h, d)`` -> ``(B*N, h, d)``."""
    h, d = q.shape[-2:]
    q, k, v = (x.reshape(total, h, d) for x in (q, k, v))
    safe_tgt = jnp.minimum(edges.tgt, total - 1)  # padding edges: gathered, then dropped
    k_e = k[edges.src] + rel_k[edges.pos][:, None, :]
    v_e = v[edges.src] + rel_v[edges.pos][:, None, :]
    logits = jnp.sum(q[safe_tgt] * k_e, axis=-1) / math.sqrt(d)  # (E, h)
    a = segment_softmax(logits, edges.tgt, total)
    a = common.dropout(a, self.dropout, key, deterministic)
    return jax.ops.segment_sum(a[..., None] * v_e, edges.tgt, total)

  def _dense(self, q, k, v, rel_k, rel_v, edges, key, deterministic):
    """The node graph as a masked ``(N, N)`` attention per window (needs at most one edge per
    (src, tgt) pair, which the document graph has). Scores and the value sum are matmuls; the
    relative key term is ``q @ relK^T`` gathered at the pair's position id, the relative value
    term is summed over the edges (O(E))."""
    b, n, h, d = q.shape
    local_src = edges.src.reshape(b, -1) % n
    local_tgt = jnp.where(edges.valid.reshape(b, -1), edges.tgt.reshape(b, -1) % n, n)
    rows = jnp.arange(b)[:, None]
    # Padding edges point at row n (out of range) and are dropped by the scatter.
    adj = jnp.zeros((b, n, n), bool).at[rows, local_tgt, local_src].set(True, mode="drop")
    posm = jnp.zeros((b, n, n), jnp.int32).at[rows, local_tgt, local_src].set(
        edges.pos.reshape(b, -1), mode="drop")
    q_rel = jnp.einsum("bthd,rd->bhtr", q, rel_k)
    rel_scores = jnp.take_along_axis(q_rel, posm[:, None], axis=-1)
    scores = (jnp.einsum("bthd,bshd->bhts", q, k) + rel_scores) / math.sqrt(d)
    scores = jnp.where(adj[:, None], scores, -jnp.inf)
    top = jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    w = jnp.where(adj[:, None], jnp.exp(scores - top), 0.0)
    denom = jnp.sum(w, axis=-1, keepdims=True)
    probs = w / jnp.where(denom > 0, denom, 1.0)
    probs = common.dropout(probs, self.dropout, key, deterministic)
    out = jnp.einsum("bhts,bshd->bthd", probs, v)
    # relV term: sum over the target's edges of P(tgt, src) relV[pos].
    a_e = probs[rows, :, jnp.minimum(local_tgt, n - 1), local_src]  # (B, E, h)
    a_e = jnp.where(edges.valid.reshape(b, -1)[..., None], a_e, 0.0)
    rel = jax.ops.segment_sum((a_e[..., None] * rel_v[edges.pos.reshape(b, -1)][:, :, None, :]
                               ).reshape(-1, h, d), edges.tgt, b * n)
    return out.reshape(b * n, h, d) + rel
