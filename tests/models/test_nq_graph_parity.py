"""The NQ graph encoder + heads vs the golden fixtures ``nq_graph_encoder*.safetensors`` (the
public one and any other of the same format).

Every size comes from the file (``config.*`` and tensor shapes); the fixture's edges are
batch-flattened (``node + N*b``) and are turned back into per-window edge lists, the model's
input format.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from poi_jax.data.features import graph_layout
from poi_jax.layers import graph as g
from poi_jax.models import nq_graph
from tests.conftest import fixture_id, load_fixture, parity_fixtures

FIXTURES = parity_fixtures("nq_graph_encoder")
each_fixture = pytest.mark.parametrize("path", FIXTURES, ids=fixture_id)


def test_the_public_fixture_is_found():
  assert "nq_graph_encoder.public" in {fixture_id(p) for p in FIXTURES}


def graph_config(fx, formulation="segment") -> nq_graph.GraphConfig:
  c = lambda k: int(fx[f"config.{k}"])
  b, tokens, hidden = fx["input.sequence_output"].shape
  sentences = fx["output.layer.0.sentence_attention"].shape[1] if c("num_hidden_layers") else None
  paragraphs = fx["output.para_logits"].shape[1]
  n = fx["input.st_mask"].shape[1]
  if sentences is None:
    sentences = n - tokens - paragraphs - 1
  assert tokens + sentences + paragraphs + 1 == n
  return nq_graph.GraphConfig(
      hidden=c("hidden_size"), num_heads=c("num_attention_heads"),
      intermediate_size=c("intermediate_size"), tokens=tokens, sentences=sentences,
      paragraphs=paragraphs, num_layers=c("num_hidden_layers"),
      max_token_relative=c("max_token_relative"), max_sentence_relative=c("max_sentence_relative"),
      max_paragraph_relative=c("max_paragraph_relative"), num_edge_positions=c("num_edge_types"),
      formulation=formulation, dropout=0.0)


def local_edges(fx):
  """Batch-flattened fixture edges -> per-window ``(B, E)`` arrays padded with -1."""
  b, n = fx["input.st_mask"].shape
  src, tgt = fx["input.edges_src"], fx["input.edges_tgt"]
  which = tgt // n
  assert np.array_equal(which, src // n)
  e = int(np.bincount(which, minlength=b).max())
  out = {k: np.full((b, e), -1, np.int64) for k in ("edge_src", "edge_tgt", "edge_type",
                                                     "edge_pos")}
  for i in range(b):
    sel = which == i
    k = int(sel.sum())
    out["edge_src"][i, :k] = src[sel] - n * i
    out["edge_tgt"][i, :k] = tgt[sel] - n * i
    out["edge_type"][i, :k] = fx["input.edges_type"][sel]
    out["edge_pos"][i, :k] = fx["input.edges_pos"][sel]
  return out


def build(fx, formulation="segment", source="state_dict"):
  model = nq_graph.NqGraphModel(None, graph_config(fx, formulation), rngs=nnx.Rngs(0))
  unused = nq_graph.load_torch_state_dict(model, fx, source=source)
  assert all(k.startswith(("input.", "output.", "config.")) for k in unused), unused
  return model


def run(model, fx, edges=None):
  edges = local_edges(fx) if edges is None else edges
  n = fx["input.st_mask"].shape[1]
  flat = g.flatten_edges(*(jnp.asarray(edges[k]) for k in ("edge_src", "edge_tgt", "edge_type",
                                                           "edge_pos")), n)
  collect = {}
  out = model.graph_forward(jnp.asarray(fx["input.sequence_output"]),
                            jnp.asarray(fx["input.st_mask"]), flat, collect=collect)
  got = {f"output.{k}": np.asarray(v) for k, v in collect.items()}
  got["output.tok_start_logits"] = np.asarray(out["start_logits"])
  got["output.tok_end_logits"] = np.asarray(out["end_logits"])
  got["output.para_logits"] = np.asarray(out["paragraph_logits"])
  got["output.answer_type_logits"] = np.asarray(out["answer_type_logits"])
  return got


@each_fixture
@pytest.mark.parametrize("formulation", g.FORMULATIONS)
def test_every_output_tensor_matches_the_fixture(path, formulation):
  fx = load_fixture(path)
  got = run(build(fx, formulation, str(path)), fx)
  expected = {k: v for k, v in fx.items() if k.startswith("output.")}
  assert set(expected) <= set(got), sorted(set(expected) - set(got))
  for k, v in expected.items():
    assert got[k].shape == v.shape, k
    np.testing.assert_allclose(got[k], v, atol=1e-5, rtol=0, err_msg=k)


@each_fixture
def test_edge_order_does_not_change_outputs(path):
  fx = load_fixture(path)
  edges = local_edges(fx)
  rng = np.random.default_rng(0)
  perm = {k: v.copy() for k, v in edges.items()}
  for i in range(perm["edge_src"].shape[0]):
    order = rng.permutation(perm["edge_src"].shape[1])
    for k in perm:
      perm[k][i] = edges[k][i, order]
  model = build(fx)
  a, b = run(model, fx, edges), run(model, fx, perm)
  for k in a:
    np.testing.assert_allclose(a[k], b[k], atol=1e-5, rtol=0, err_msg=k)


@each_fixture
def test_relative_index_tables_match_the_fixture(path):
  fx = load_fixture(path)
  for level in ("token", "sentence", "paragraph"):
    ind = fx[f"encoder.layer.0.attention.{level}_attention.indices"]
    r = int(fx[f"config.max_{level}_relative"])
    np.testing.assert_array_equal(graph_layout.relative_indices(ind.shape[0], r), ind)


def test_a_wrongly_shaped_tensor_is_named():
  fx = load_fixture(FIXTURES[0])
  model = nq_graph.NqGraphModel(None, graph_config(fx), rngs=nnx.Rngs(0))
  bad = {"tok_dense.weight": np.zeros((3, 3), np.float32)}
  with pytest.raises(ValueError, match="tok_dense.weight"):
    nq_graph.load_torch_state_dict(model, bad)
