"""The NQ document graph's layout, shared by the feature builder (`poi_jax.data.features.nq_graph`)
and the graph layers (`poi_jax.layers.graph`); NumPy only, so that the data pipeline never imports
Flax.

A window's nodes are one table of ``N = T + S + P + 1`` rows (`NodeLayout`): tokens ``[0, T)``,
sentences ``[T, T+S)``, paragraphs ``[T+S, T+S+P)`` and the document ``T+S+P``. The levels are
token, sentence, paragraph, document = 0..3; an edge's type is ``4*src_level + tgt_level``
(`edge_type`) and its position id indexes a table of relational embeddings (`EDGE_POS_MAX`,
`edge_position`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

TOKEN, SENTENCE, PARAGRAPH, DOCUMENT = 0, 1, 2, 3
NUM_LEVELS = 4
# Per edge type (4*src_level + tgt_level): how many position ids it has (the original's table;
# 0 = no such edge type: same-level edges do not exist).
EDGE_POS_MAX = (0, 64, 256, 512, 64, 0, 32, 64, 256, 32, 0, 32, 512, 64, 32, 0)
EDGE_POS_START = tuple(int(x) for x in np.concatenate([[0], np.cumsum(EDGE_POS_MAX)[:-1]]))
NUM_EDGE_POSITIONS = int(sum(EDGE_POS_MAX))  # 1920


def edge_type(src_level, tgt_level):
  return 4 * src_level + tgt_level


def edge_position(etype, idx):
  """Position id of an edge of type ``etype`` whose index in its parent/child is ``idx``:
  ``start[type] + min(idx, max[type] - 1)`` (numpy or jax int arrays)."""
  start = np.asarray(EDGE_POS_START)[etype]
  top = np.asarray(EDGE_POS_MAX)[etype] - 1
  return start + np.minimum(idx, top)


def relative_indices(n: int, max_relative: int) -> np.ndarray:
  """``(n, n)`` int32 ``clip(j - i + R, 0, 2R)`` with ``i`` the query and ``j`` the key."""
  r = np.arange(n)
  return np.clip(r[None, :] - r[:, None] + max_relative, 0, 2 * max_relative).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class NodeLayout:
  """Node capacities of one window: ``tokens`` (= the sequence length), ``sentences``,
  ``paragraphs``, and one document node."""
  tokens: int
  sentences: int
  paragraphs: int

  @property
  def num_nodes(self) -> int:
    return self.tokens + self.sentences + self.paragraphs + 1

  @property
  def sentence_start(self) -> int:
    return self.tokens

  @property
  def paragraph_start(self) -> int:
    return self.tokens + self.sentences

  @property
  def document(self) -> int:
    return self.tokens + self.sentences + self.paragraphs

  def level_slices(self):
    """``(start, size)`` of the token, sentence and paragraph slices."""
    return ((0, self.tokens), (self.sentence_start, self.sentences),
            (self.paragraph_start, self.paragraphs))
