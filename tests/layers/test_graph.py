"""Graph layers + NQ heads vs the PyTorch reference (tests/reference/nq_graph_torch.py) on random
configs and graphs, and the invariances of the issue."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from poi_jax.data.features import graph_layout
from poi_jax.data.features import nq_graph as builder
from poi_jax.layers import graph as g
from poi_jax.models import nq_graph
from tests.reference import nq_graph_torch as ref


def random_window(rng, layout: graph_layout.NodeLayout, *, overflow=False):
  """Sentence/paragraph ids of a random window filling part of ``layout.tokens``."""
  q = int(rng.integers(1, 5))
  budget = layout.tokens - q - 3
  paras, used = [], 0
  while True:
    n_sent = int(rng.integers(1, 4))
    sents = [int(rng.integers(1, 6)) for _ in range(n_sent)]
    if used + sum(sents) + 1 > budget:
      break
    paras.append(sents)
    used += sum(sents) + 1
    if not overflow and (sum(map(len, paras)) + 2 >= layout.sentences - 3
                         or len(paras) + 2 >= layout.paragraphs - 1):
      break
    if rng.random() < 0.15:
      break
  return builder.window_layout(q, paras or [[1]])


def stack_graphs(graphs):
  feats = [gr.as_features() for gr in graphs]
  return {k: np.stack([f[k] for f in feats]) for k in feats[0]}


def flatten_for_torch(batch, n):
  b = batch["edge_src"].shape[0]
  valid = batch["edge_src"] >= 0
  off = (np.arange(b) * n)[:, None]
  pick = lambda a, o: (a + o)[valid]
  return (pick(batch["edge_src"], off), pick(batch["edge_tgt"], off), batch["edge_type"][valid],
          batch["edge_pos"][valid])


def make(rng, *, heads, layers, rel, hidden=16, intermediate=24,
         layout=graph_layout.NodeLayout(40, 8, 5), formulation="segment"):
  cfg = nq_graph.GraphConfig(hidden=hidden, num_heads=heads, intermediate_size=intermediate,
                             tokens=layout.tokens, sentences=layout.sentences,
                             paragraphs=layout.paragraphs, num_layers=layers,
                             max_token_relative=rel[0], max_sentence_relative=rel[1],
                             max_paragraph_relative=rel[2], formulation=formulation, dropout=0.0)
  sd = ref.random_state_dict(rng, hidden=hidden, intermediate=intermediate, heads=heads,
                             num_layers=layers, rel_ranges=rel,
                             num_positions=graph_layout.NUM_EDGE_POSITIONS,
                             sentences=layout.sentences, paragraphs=layout.paragraphs)
  model = nq_graph.NqGraphModel(None, cfg, rngs=nnx.Rngs(0))
  assert nq_graph.load_torch_state_dict(model, sd) == []
  return model, sd, cfg


def run_flax(model, x, batch, *, formulation=None):
  layout = model.graph_config.layout
  edges = g.flatten_edges(*(jnp.asarray(batch[k]) for k in builder.EDGE_FIELDS),
                          layout.num_nodes)
  # One compiled program instead of hundreds of eagerly dispatched ops (test time).
  @nnx.jit(static_argnums=(4,))
  def forward(m, seq, st_mask, edges, form):
    collect = {}
    out = m.graph_forward(seq, st_mask, edges, collect=collect, formulation=form)
    return out, collect

  out, collect = forward(model, jnp.asarray(x), jnp.asarray(batch["st_mask"]), edges, formulation)
  res = {k: np.asarray(v) for k, v in collect.items()}
  res.update(tok_start_logits=np.asarray(out["start_logits"]),
             tok_end_logits=np.asarray(out["end_logits"]),
             para_logits=np.asarray(out["paragraph_logits"]),
             answer_type_logits=np.asarray(out["answer_type_logits"]))
  return res


def run_torch(sd, cfg, x, batch, stable=False):
  lay = cfg.layout
  src, tgt, et, pos = flatten_for_torch(batch, lay.num_nodes)
  out = ref.forward(sd, x, batch["st_mask"], src, tgt, et, pos,
                    layout=(lay.tokens, lay.sentences, lay.paragraphs), heads=cfg.num_heads,
                    num_layers=cfg.num_layers,
                    rel_ranges=(cfg.max_token_relative, cfg.max_sentence_relative,
                                cfg.max_paragraph_relative), stable=stable)
  return {k: v.numpy() for k, v in out.items()}


def assert_close(a, b, atol=1e-5):
  assert set(b) <= set(a), sorted(set(b) - set(a))
  for k in b:
    np.testing.assert_allclose(a[k], b[k], atol=atol, rtol=0, err_msg=k)


def random_batch(rng, layout, b=3, overflow=False):
  graphs = [builder.build_graph(*random_window(rng, layout, overflow=overflow), layout)
            for _ in range(b)]
  x = rng.standard_normal((b, layout.tokens, 16)).astype(np.float32)
  return x, stack_graphs(graphs)


CONFIGS = [  # (heads, layers, (R_tok, R_sent, R_para), formulation)
    (1, 0, (16, 8, 4), "segment"),
    (2, 1, (3, 2, 1), "segment"),
    (4, 2, (16, 8, 4), "segment"),
    (4, 2, (5, 1, 2), "dense"),
    (2, 3, (1, 3, 0), "dense"),
]


@pytest.mark.parametrize("heads,layers,rel,formulation", CONFIGS)
def test_matches_the_pytorch_reference_on_random_configs(heads, layers, rel, formulation):
  rng = np.random.default_rng(heads * 10 + layers)
  model, sd, cfg = make(rng, heads=heads, layers=layers, rel=rel, formulation=formulation)
  x, batch = random_batch(rng, cfg.layout, overflow=layers == 1)
  assert_close(run_flax(model, x, batch), run_torch(sd, cfg, x, batch))


def test_empty_sentence_and_paragraph_slices_and_a_node_without_incoming_edges():
  rng = np.random.default_rng(7)
  model, sd, cfg = make(rng, heads=2, layers=2, rel=(4, 2, 1))
  lay = cfg.layout
  x, batch = random_batch(rng, lay, b=2)
  # Window 1: tokens and the document only (empty sentence and paragraph slices).
  n_tok = 10
  st = np.zeros(lay.num_nodes, np.int8)
  st[:n_tok] = 1
  st[lay.document] = 1
  tok = np.arange(n_tok)
  e = np.concatenate([
      np.stack([tok, np.full(n_tok, lay.document), np.full(n_tok, 3), graph_layout.edge_position(
          np.full(n_tok, 3), tok)]),
      np.stack([np.full(n_tok, lay.document), tok, np.full(n_tok, 12), graph_layout.edge_position(
          np.full(n_tok, 12), tok)])], axis=1)
  batch["st_mask"][1] = st
  for i, k in enumerate(builder.EDGE_FIELDS):
    batch[k][1] = -1
    batch[k][1, :e.shape[1]] = e[i]
  # Window 0: sentence node 2 exists but has no incoming edge.
  target = lay.sentence_start + 2
  keep = batch["edge_tgt"][0] != target
  for k in builder.EDGE_FIELDS:
    row = batch[k][0][keep]
    batch[k][0] = -1
    batch[k][0, :len(row)] = row
  got = run_flax(model, x, batch)
  want = run_torch(sd, cfg, x, batch)
  # Rows of a level whose every key is missing see only keys at s - 10000, which float32 (the
  # original's dtype, and ours) rounds to ~1e-3: those rows (nodes that do not exist, with no
  # edges, so they reach no existing node) agree to 1e-3 with the float64 reference; every
  # existing node and every logit agrees to 1e-5.
  assert_close(got, want, atol=1e-3)
  m = batch["st_mask"].astype(bool)
  slices = dict(zip(("token", "sentence", "paragraph"), lay.level_slices()))
  for k in want:
    if k.endswith("_attention"):
      start, size = slices[k.split(".")[-1].split("_")[0]]
      node = m[:, start:start + size]
    elif want[k].ndim == 3:
      node = m
    else:
      node = np.ones(want[k].shape, bool)
    np.testing.assert_allclose(got[k][node], want[k][node], atol=1e-5, rtol=0, err_msg=k)
  # No incoming edge: the aggregation half of the integration output is exactly 0.
  hidden = cfg.hidden
  assert np.all(got["layer.0.integration"][0, target, hidden:] == 0)
  assert np.all(got["layer.0.integration"][1, lay.sentence_start:lay.document, hidden:] == 0)


def test_segment_and_dense_formulations_agree():
  rng = np.random.default_rng(3)
  model, _, cfg = make(rng, heads=4, layers=2, rel=(16, 8, 4))
  x, batch = random_batch(rng, cfg.layout, b=4)
  assert_close(run_flax(model, x, batch, formulation="dense"),
               run_flax(model, x, batch, formulation="segment"))


def test_edge_order_other_windows_and_masked_tokens_do_not_matter():
  rng = np.random.default_rng(11)
  model, _, cfg = make(rng, heads=2, layers=2, rel=(4, 2, 1))
  x, batch = random_batch(rng, cfg.layout, b=3)
  base = run_flax(model, x, batch)
  # 1. A permutation of each window's edge list (padding interleaved too).
  perm = {k: v.copy() for k, v in batch.items()}
  for i in range(x.shape[0]):
    order = rng.permutation(batch["edge_src"].shape[1])
    for k in builder.EDGE_FIELDS:
      perm[k][i] = batch[k][i, order]
  assert_close(run_flax(model, x, perm), base)
  # 2. Window 0 alone equals window 0 in the batch.
  alone = run_flax(model, x[:1], {k: v[:1] for k, v in batch.items()})
  assert_close(alone, {k: v[:1] for k, v in base.items()})
  # 3. New features at token positions that are not nodes (st_mask 0) change no existing node.
  x2 = x.copy()
  absent = batch["st_mask"][:, :cfg.layout.tokens] == 0
  x2[absent] = rng.standard_normal((int(absent.sum()), x.shape[-1])) * 5
  other = run_flax(model, x2, batch)
  m = batch["st_mask"].astype(bool)
  for k in ("initializer", "layer.1.layer_output", "graph_output"):
    np.testing.assert_allclose(other[k][m], base[k][m], atol=1e-5, rtol=0, err_msg=k)
  for k in ("tok_start_logits", "tok_end_logits"):
    np.testing.assert_allclose(other[k], base[k], atol=1e-5, rtol=0, err_msg=k)


def test_stable_segment_softmax_equals_raw_exp_where_finite_and_stays_finite_beyond():
  rng = np.random.default_rng(0)
  seg = np.sort(rng.integers(0, 6, 40))
  logits = rng.standard_normal((40, 3)).astype(np.float32) * 3
  got = np.asarray(g.segment_softmax(jnp.asarray(logits), jnp.asarray(seg), 7))
  raw = np.exp(logits.astype(np.float64))
  denom = np.zeros((7, 3))
  np.add.at(denom, seg, raw)
  np.testing.assert_allclose(got, raw / denom[seg], atol=1e-6, rtol=0)
  # Scores of ~1000: the raw exp overflows to inf (inf/inf = NaN); the stable form does not.
  big = logits + 1000.0
  with np.errstate(over="ignore", invalid="ignore"):
    r = np.exp(big.astype(np.float32))
    assert not np.all(np.isfinite(r / r))
  stable = np.asarray(g.segment_softmax(jnp.asarray(big), jnp.asarray(seg), 7))
  np.testing.assert_allclose(stable, got, atol=1e-5, rtol=0)
  # Ids outside [0, num_segments) get weight 0.
  out = np.asarray(g.segment_softmax(jnp.asarray(logits), jnp.asarray(np.where(seg == 5, 9, seg)),
                                     7))
  assert np.all(out[seg == 5] == 0)


def test_integration_on_scores_where_the_raw_exp_overflows():
  rng = np.random.default_rng(5)
  model, sd, cfg = make(rng, heads=2, layers=1, rel=(2, 2, 2))
  lay = cfg.layout
  _, batch = random_batch(rng, lay, b=2)
  # Node features of ~60: edge scores in the hundreds, past float32's exp range (~88).
  s = (rng.standard_normal((2, lay.num_nodes, cfg.hidden)) * 60).astype(np.float32)
  edges = g.flatten_edges(*(jnp.asarray(batch[k]) for k in builder.EDGE_FIELDS), lay.num_nodes)
  src, tgt, _, pos = flatten_for_torch(batch, lay.num_nodes)
  name = "encoder.layer.0.attention.integration"
  raw = ref.integration(sd, name, torch.as_tensor(s.reshape(-1, cfg.hidden)).float(), src, tgt,
                        pos, cfg.num_heads)
  assert not torch.isfinite(raw).all()  # the original's raw exp in float32: inf/inf = NaN
  stable = ref.integration(sd, name, torch.as_tensor(s.reshape(-1, cfg.hidden)), src, tgt, pos,
                           cfg.num_heads, stable=True).numpy().reshape(s.shape)
  layer = model.encoder.layer[0].attention.integration
  for form in g.FORMULATIONS:
    got = np.asarray(layer(jnp.asarray(s), edges, formulation=form))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, stable, rtol=1e-4, atol=1e-3, err_msg=form)


def test_loss_equals_torch_and_an_all_ignored_term_counts_zero():
  rng = np.random.default_rng(0)
  b, t, p = 4, 12, 5
  logits = {"tok_start_logits": rng.standard_normal((b, t)), "tok_end_logits":
            rng.standard_normal((b, t)), "para_logits": rng.standard_normal((b, p)),
            "answer_type_logits": rng.standard_normal((b, 5))}
  ours = lambda lab, mask=None: float(nq_graph.nq_loss(
      {"start_logits": jnp.asarray(logits["tok_start_logits"], jnp.float32),
       "end_logits": jnp.asarray(logits["tok_end_logits"], jnp.float32),
       "paragraph_logits": jnp.asarray(logits["para_logits"], jnp.float32),
       "answer_type_logits": jnp.asarray(logits["answer_type_logits"], jnp.float32)},
      dict({k: jnp.asarray(v) for k, v in lab.items()},
           **({} if mask is None else {"example_mask": jnp.asarray(mask)}))))
  tl = {k: torch.as_tensor(v) for k, v in logits.items()}
  labels = {"start_positions": np.array([0, 3, -1, 5]), "end_positions": np.array([0, 4, -1, 7]),
            "paragraph_label": np.array([0, 2, 1, -1]), "answer_type": np.array([0, 3, 4, 3])}
  np.testing.assert_allclose(ours(labels), float(ref.loss(tl, labels)), atol=1e-5)
  # Every short target ignored (a batch of LONG windows): torch's term is NaN, ours 0.
  long_only = dict(labels, start_positions=np.full(b, -1), end_positions=np.full(b, -1))
  assert np.isnan(float(ref.loss(tl, long_only)))
  ce = torch.nn.CrossEntropyLoss(ignore_index=-1)
  lab = lambda k: torch.as_tensor(long_only[k])
  rest = ce(tl["para_logits"], lab("paragraph_label")) + ce(tl["answer_type_logits"],
                                                            lab("answer_type"))
  np.testing.assert_allclose(ours(long_only), float(rest), atol=1e-5)
  # example_mask 0 rows (batch padding) do not count: equal to dropping them.
  mask = np.array([1.0, 1.0, 1.0, 0.0])
  kept = {k: v[:3] for k, v in labels.items()}
  tl3 = {k: v[:3] for k, v in tl.items()}
  np.testing.assert_allclose(ours(labels, mask), float(ref.loss(tl3, kept)), atol=1e-5)


def test_loss_gradient_is_finite_when_every_short_target_is_ignored():
  rng = np.random.default_rng(1)
  start = jnp.asarray(rng.standard_normal((3, 6)), jnp.float32)
  outs = lambda s: {"start_logits": s, "end_logits": s, "paragraph_logits": s[:, :3],
                    "answer_type_logits": s[:, :5]}
  batch = {"start_positions": jnp.full((3,), -1), "end_positions": jnp.full((3,), -1),
           "paragraph_label": jnp.array([0, 1, 2]), "answer_type": jnp.array([4, 4, 0])}
  grad = jax.grad(lambda s: nq_graph.nq_loss(outs(s), batch))(start)
  assert np.all(np.isfinite(np.asarray(grad)))
