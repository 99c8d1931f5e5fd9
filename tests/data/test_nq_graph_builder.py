"""The NumPy graph builder vs the fixture's edge multiset, capacities and overflow."""
from __future__ import annotations

import collections

import numpy as np
import pytest
from safetensors.numpy import load_file

from poi_jax.data.features import nq_graph as builder
from poi_jax import graph_layout as g
from tests.conftest import PARITY

FIXTURE = PARITY / "nq_graph_encoder.public.safetensors"
# The two public token layouts of parity/SPEC.md §3: question sub-tokens, per paragraph its
# sentences' lengths.
PUBLIC_LAYOUTS = [(4, [[5, 4], [6], [3, 2, 4]]), (7, [[70, 3], [1], [9, 12]])]


def fixture_layout(fx) -> g.NodeLayout:
  tokens = fx["input.sequence_output"].shape[1]
  paragraphs = fx["output.para_logits"].shape[1]
  n = fx["input.st_mask"].shape[1]
  return g.NodeLayout(tokens, n - tokens - paragraphs - 1, paragraphs)


def test_public_layouts_reproduce_the_fixture_edges_and_masks():
  fx = load_file(FIXTURE)
  layout = fixture_layout(fx)
  n = layout.num_nodes
  which = fx["input.edges_tgt"] // n
  for b, (q, paras) in enumerate(PUBLIC_LAYOUTS):
    sent, para = builder.window_layout(q, paras)
    assert len(sent) == int(fx["input.st_mask"][b, :layout.tokens].sum())
    graph = builder.build_graph(sent, para, layout)
    e = graph.edges[:, :graph.num_edges]
    got = collections.Counter(map(tuple, e.T.tolist()))
    sel = which == b
    want = collections.Counter(zip((fx["input.edges_src"][sel] - n * b).tolist(),
                                   (fx["input.edges_tgt"][sel] - n * b).tolist(),
                                   fx["input.edges_type"][sel].tolist(),
                                   fx["input.edges_pos"][sel].tolist()))
    assert got == want
    np.testing.assert_array_equal(graph.st_mask, fx["input.st_mask"][b])
    assert graph.overflow == 0
    assert np.all(graph.edges[:, graph.num_edges:] == -1)


def test_capacity_is_six_per_token_four_per_sentence_two_per_paragraph():
  layout = g.NodeLayout(16, 4, 2)
  # every slot used: 16 tokens in 4 sentences in 2 paragraphs
  sent = np.repeat(np.arange(4), 4)
  para = np.repeat(np.arange(2), 8)
  graph = builder.build_graph(sent, para, layout)
  assert graph.num_edges == builder.edge_capacity(16, 4, 2) == graph.edges.shape[1]


def test_overflowing_sentences_and_paragraphs_drop_their_edges():
  layout = g.NodeLayout(12, 3, 2)
  sent = np.array([0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 5])  # 6 sentences > 3
  para = np.array([0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2])  # 3 paragraphs > 2
  graph = builder.build_graph(sent, para, layout)
  assert (graph.sentence_overflow, graph.paragraph_overflow) == (3, 1)
  e = graph.edges[:, :graph.num_edges]
  assert e.min() >= 0 and e[:2].max() < layout.num_nodes
  existing = np.flatnonzero(graph.st_mask)
  assert set(e[0].tolist()) <= set(existing.tolist())
  assert set(e[1].tolist()) <= set(existing.tolist())
  # tokens of the overflowed sentences/paragraph keep their document edge
  tok_doc = e[:, e[2] == g.edge_type(g.TOKEN, g.DOCUMENT)]
  assert sorted(tok_doc[0].tolist()) == list(range(12))
  # token 5.. (sentence 3+, paragraph 2) have no sentence or paragraph edges
  tok_up = e[:, np.isin(e[2], [g.edge_type(g.TOKEN, g.SENTENCE), g.edge_type(g.TOKEN,
                                                                           g.PARAGRAPH)])]
  assert tok_up[0].max() == 4
  np.testing.assert_array_equal(graph.st_mask[12:], [1, 1, 1, 1, 1, 1])


def test_position_ids_clip_at_the_type_maximum():
  layout = g.NodeLayout(300, 4, 2)
  sent = np.r_[0, np.ones(299, int)]
  para = sent.copy()
  graph = builder.build_graph(sent, para, layout)
  e = graph.edges[:, :graph.num_edges]
  ts = e[:, e[2] == g.edge_type(g.TOKEN, g.SENTENCE)]
  assert ts[3].max() == g.EDGE_POS_START[1] + 63
  tp = e[:, e[2] == g.edge_type(g.TOKEN, g.PARAGRAPH)]
  assert tp[3].max() == g.EDGE_POS_START[2] + 255


def test_bad_ids_are_refused():
  layout = g.NodeLayout(8, 4, 2)
  with pytest.raises(ValueError, match="non-decreasing"):
    builder.build_graph(np.array([0, 2, 1]), np.array([0, 1, 1]), layout)
  with pytest.raises(ValueError, match="spans two paragraphs"):
    builder.build_graph(np.array([0, 1, 1]), np.array([0, 1, 2]), layout)
  with pytest.raises(ValueError, match="capacity"):
    builder.build_graph(np.zeros(9, int), np.zeros(9, int), layout)
