"""The NumPy graph builder vs the fixtures' edge multisets (every ``nq_graph_encoder*`` fixture;
each window's token layout is read from the fixture itself), capacities and overflow."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from poi_jax.data.features import graph_layout as g
from poi_jax.data.features import nq_graph as builder
from tests.conftest import fixture_id, load_fixture, parity_fixtures

FIXTURES = parity_fixtures("nq_graph_encoder")


def fixture_layout(fx) -> g.NodeLayout:
  tokens = fx["input.sequence_output"].shape[1]
  paragraphs = fx["output.para_logits"].shape[1]
  n = fx["input.st_mask"].shape[1]
  return g.NodeLayout(tokens, n - tokens - paragraphs - 1, paragraphs)


def window_edges(fx, b, n):
  """Window ``b``'s edges as local ``(src, tgt, type, pos)`` tuples (the fixture's are
  batch-flattened: ``node + n*b``)."""
  sel = fx["input.edges_tgt"] // n == b
  return list(zip((fx["input.edges_src"][sel] - n * b).tolist(),
                  (fx["input.edges_tgt"][sel] - n * b).tolist(),
                  fx["input.edges_type"][sel].tolist(), fx["input.edges_pos"][sel].tolist()))


def token_ids(fx, b, layout):
  """Window ``b``'s per-token sentence and paragraph ids, read from the fixture: its real tokens
  are the set ``st_mask`` token slots, and token t belongs to the sentence (paragraph) node its
  token -> sentence (paragraph) edge points to (node index - the level's first node)."""
  n_tok = int(fx["input.st_mask"][b, :layout.tokens].sum())
  assert np.all(fx["input.st_mask"][b, :n_tok] == 1), "real tokens must come first"
  out = []
  for level, first in ((g.SENTENCE, layout.sentence_start), (g.PARAGRAPH, layout.paragraph_start)):
    ids = np.full(n_tok, -1, np.int64)
    for src, tgt, etype, _ in window_edges(fx, b, layout.num_nodes):
      if etype == g.edge_type(g.TOKEN, level):
        assert ids[src] in (-1, tgt - first), (b, src)
        ids[src] = tgt - first
    assert np.all(ids >= 0), f"window {b}: a token without a level-{level} edge"
    out.append(ids)
  return out


def test_the_public_fixture_is_found():
  assert "nq_graph_encoder.public" in {fixture_id(p) for p in FIXTURES}


@pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)
def test_fixture_layouts_reproduce_the_fixture_edges_and_masks(path):
  fx = load_fixture(path)
  layout = fixture_layout(fx)
  for b in range(fx["input.st_mask"].shape[0]):
    sent, para = token_ids(fx, b, layout)
    graph = builder.build_graph(sent, para, layout)
    e = graph.edges[:, :graph.num_edges]
    got = collections.Counter(map(tuple, e.T.tolist()))
    assert got == collections.Counter(window_edges(fx, b, layout.num_nodes)), f"window {b}"
    np.testing.assert_array_equal(graph.st_mask, fx["input.st_mask"][b])
    assert graph.overflow == 0
    assert np.all(graph.edges[:, graph.num_edges:] == -1)


def test_public_fixture_layouts_are_the_spec_windows():
  """The layouts read from the public fixture are parity/SPEC.md §3's two windows (question
  sub-tokens, per paragraph its sentences' lengths), so `token_ids` reads what it should."""
  fx = load_fixture(next(p for p in FIXTURES if fixture_id(p) == "nq_graph_encoder.public"))
  layout = fixture_layout(fx)
  for b, (q, paras) in enumerate([(4, [[5, 4], [6], [3, 2, 4]]), (7, [[70, 3], [1], [9, 12]])]):
    want = builder.window_layout(q, paras)
    for got, w in zip(token_ids(fx, b, layout), want):
      np.testing.assert_array_equal(got, w)


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
