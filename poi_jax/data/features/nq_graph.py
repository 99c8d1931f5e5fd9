"""The document graph of one NQ window (nodes, edges, position ids), vectorised in NumPy.

Input: for each used input position ``i`` of the window (``[CLS] question [SEP] doc... [SEP]``),
the window-local sentence ``sent[i]`` and paragraph ``para[i]`` it belongs to, both
non-decreasing from 0 ([CLS] is sentence 0 and paragraph 0, the question sentence 1 and paragraph
1, ...; a sentence never spans two paragraphs).

Node layout (`graph_layout.NodeLayout`): tokens ``[0, T)`` (= input positions),
sentences ``[T, T+S)``, paragraphs ``[T+S, T+S+P)``, the document ``T+S+P``; capacities from the
config (the original: 512/128/64).

Edges (both directions, never within a level): T<->S, T<->P, T<->D, S<->P, S<->D, P<->D; type
``4*src_level + tgt_level``; position id ``start[type] + min(idx, max[type] - 1)`` with ``idx``
the child's index in its parent (T->S/S->T: the token within its sentence; T->P/P->T: the token
within its paragraph; T->D/D->T: the token index; S->P/P->S: the sentence within its paragraph;
S->D/D->S: the sentence index; P->D/D->P: the paragraph index).

Overflow: the original's ``build_graph`` gives a sentence past ``S`` or a paragraph past ``P``
node index -1, which its batched gather then reads as the last node of the previous window.
Here such a node does not exist: every edge touching it is dropped (its tokens keep their
other edges), and `GraphArrays.overflow` counts the dropped sentences and paragraphs.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from poi_jax.data.features import graph_layout as g

EDGE_FIELDS = ("edge_src", "edge_tgt", "edge_type", "edge_pos")


def edge_capacity(tokens: int, sentences: int, paragraphs: int) -> int:
  """Most edges a window can have: 6 per token, 4 per sentence, 2 per paragraph."""
  return 6 * tokens + 4 * sentences + 2 * paragraphs


@dataclasses.dataclass
class GraphArrays:
  """One window's graph: ``st_mask (N,)`` int8, ``edges (4, E_cap)`` int32 rows src, tgt, type,
  pos (-1 padded), ``num_edges``, ``sentence_overflow``/``paragraph_overflow`` (nodes dropped)."""
  st_mask: np.ndarray
  edges: np.ndarray
  num_edges: int
  sentence_overflow: int
  paragraph_overflow: int

  @property
  def overflow(self) -> int:
    return self.sentence_overflow + self.paragraph_overflow

  def as_features(self) -> dict[str, np.ndarray]:
    return {"st_mask": self.st_mask, **{k: self.edges[i] for i, k in enumerate(EDGE_FIELDS)}}


def _index_in_group(group: np.ndarray) -> np.ndarray:
  """For non-decreasing group ids, each element's position within its group."""
  n = len(group)
  if n == 0:
    return np.zeros(0, np.int64)
  starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
  lengths = np.diff(np.r_[starts, n])
  return np.arange(n) - np.repeat(starts, lengths)


def build_graph(sent: np.ndarray, para: np.ndarray, layout: g.NodeLayout) -> GraphArrays:
  """``sent``/``para``: ``(n,)`` int ids of the window's ``n <= T`` used positions."""
  sent = np.asarray(sent, np.int64)
  para = np.asarray(para, np.int64)
  n = len(sent)
  if n > layout.tokens:
    raise ValueError(f"{n} tokens exceed the graph's token capacity {layout.tokens}")
  if n != len(para):
    raise ValueError(f"sentence ids ({n}) and paragraph ids ({len(para)}) differ in length")
  if n and (np.any(np.diff(sent) < 0) or np.any(np.diff(para) < 0) or sent[0] != 0
            or para[0] != 0):
    raise ValueError("sentence and paragraph ids must be non-decreasing from 0")
  n_sent = int(sent[-1]) + 1 if n else 0
  n_para = int(para[-1]) + 1 if n else 0
  sent_para = np.zeros(n_sent, np.int64)
  sent_para[sent] = para  # a sentence's paragraph (its tokens all share it)
  if n and np.any(sent_para[sent] != para):
    raise ValueError("a sentence spans two paragraphs")

  s0, p0, doc = layout.sentence_start, layout.paragraph_start, layout.document
  s_ok = np.arange(n_sent) < layout.sentences
  p_ok = np.arange(n_para) < layout.paragraphs
  tok = np.arange(n)
  tok_sent_node = np.where(s_ok[sent], s0 + sent, -1) if n else np.zeros(0, np.int64)
  tok_para_node = np.where(p_ok[para], p0 + para, -1) if n else np.zeros(0, np.int64)
  sidx = np.arange(n_sent)
  sent_node = np.where(s_ok, s0 + sidx, -1)
  sent_para_node = np.where(p_ok[sent_para], p0 + sent_para, -1)
  pidx = np.arange(n_para)
  para_node = np.where(p_ok, p0 + pidx, -1)

  T, S, P, D = g.TOKEN, g.SENTENCE, g.PARAGRAPH, g.DOCUMENT
  blocks = []

  def both(child, parent, child_level, parent_level, idx):
    """Child->parent and parent->child edges with the same idx."""
    for s, t, et in ((child, parent, g.edge_type(child_level, parent_level)),
                     (parent, child, g.edge_type(parent_level, child_level))):
      pos = g.edge_position(np.full(len(s), et), idx)
      blocks.append(np.stack([s, t, np.full(len(s), et), pos]))

  both(tok, tok_sent_node, T, S, _index_in_group(sent))
  both(tok, tok_para_node, T, P, _index_in_group(para))
  both(tok, np.full(n, doc), T, D, tok)
  both(sent_node, sent_para_node, S, P, _index_in_group(sent_para))
  both(sent_node, np.full(n_sent, doc), S, D, sidx)
  both(para_node, np.full(n_para, doc), P, D, pidx)
  edges = np.concatenate(blocks, axis=1) if blocks else np.zeros((4, 0), np.int64)
  edges = edges[:, (edges[0] >= 0) & (edges[1] >= 0)]  # overflowed nodes do not exist

  cap = edge_capacity(layout.tokens, layout.sentences, layout.paragraphs)
  out = np.full((4, cap), -1, np.int32)
  out[:, :edges.shape[1]] = edges
  st_mask = np.zeros(layout.num_nodes, np.int8)
  st_mask[:n] = 1
  st_mask[s0:s0 + min(n_sent, layout.sentences)] = 1
  st_mask[p0:p0 + min(n_para, layout.paragraphs)] = 1
  st_mask[doc] = 1
  return GraphArrays(st_mask, out, int(edges.shape[1]), int(max(n_sent - layout.sentences, 0)),
                     int(max(n_para - layout.paragraphs, 0)))


def window_layout(question_len: int, paragraphs: list[list[int]], *, markers: bool = True):
  """Sentence/paragraph ids of a window ``[CLS] q [SEP] (marker? sentences)* [SEP]``.

  ``paragraphs``: per paragraph, its sentences' token counts (without the marker). As the
  original: [CLS] is sentence/paragraph 0, the question sentence/paragraph 1, the first [SEP]
  joins the first document sentence, each paragraph's marker its first sentence, and the final
  [SEP] the last sentence. Returns ``(sent, para)``. (Used by tests and the synthetic data.)
  """
  sent, para = [0], [0]
  sent += [1] * question_len
  para += [1] * question_len
  s, p = 2, 2
  first = True
  for sentences in paragraphs:
    for j, length in enumerate(sentences):
      extra = (1 if first else 0) + (1 if markers and j == 0 else 0)
      first = False
      sent += [s] * (length + extra)
      para += [p] * (length + extra)
      s += 1
    p += 1
  sent.append(sent[-1])
  para.append(para[-1])
  return np.asarray(sent), np.asarray(para)
