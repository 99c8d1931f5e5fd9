r"""NQ graph encoder: segment vs dense integration, and the graph's share of a training step,
side by side in one run.

  python bench/nq_graph.py                          # CPU-sized: MiniLM-shaped, 4 x 256 windows
  python bench/nq_graph.py --paper                  # BERT-base, 8 x 512, capacities 128/64, 2 layers

Per formulation (`model.graph.formulation`): the graph encoder + heads alone (forward+backward
w.r.t. its parameters and the token features), and a full training step of BERT + graph + heads
(forward, backward, SGD-style update; random weights, dropout off), ms per step (median of
``--steps`` after a compile + warm-up). The graph's share = graph step / full step. Windows have
the paper's shape: ~7 paragraphs and ~18 sentences per window (§4.1).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def windows(batch, layout, seed=0):
  import numpy as np

  from poi_jax.data.features import nq_graph as builder
  rng = np.random.default_rng(seed)
  feats = []
  for _ in range(batch):
    q = 12
    budget = layout.tokens - q - 3 - 7
    cuts = np.sort(rng.choice(np.arange(1, budget), 17, replace=False))
    lengths = np.diff(np.r_[0, cuts, budget])  # 18 sentences
    paras, k = [], 0
    for n in np.diff(np.r_[0, np.sort(rng.choice(np.arange(1, 18), 6, replace=False)), 18]):
      paras.append(lengths[k:k + n].tolist())
      k += n
    sent, para = builder.window_layout(q, paras)
    feats.append(builder.build_graph(sent, para, layout).as_features())
  return {k: np.stack([f[k] for f in feats]) for k in feats[0]}


def timed(fn, args, steps):
  import jax
  import numpy as np
  out = fn(*args)
  jax.block_until_ready(out)
  out = fn(*args)
  jax.block_until_ready(out)
  ts = []
  for _ in range(steps):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    ts.append(time.perf_counter() - t)
  return 1000 * float(np.median(ts))


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--paper", action="store_true", help="BERT-base, 8 x 512, 128/64, 2 layers")
  p.add_argument("--batch", type=int, default=0)
  p.add_argument("--steps", type=int, default=5)
  a = p.parse_args()

  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax
  from flax import nnx

  from poi_jax.data.features import graph_layout
  from poi_jax.layers import graph as g
  from poi_jax.models import encoders, nq_graph

  if a.paper:
    enc = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072)
    batch, tokens, sentences, paragraphs, layers = a.batch or 8, 512, 128, 64, 2
  else:
    enc = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
               intermediate_size=1536)
    batch, tokens, sentences, paragraphs, layers = a.batch or 4, 256, 64, 32, 2
  enc_cfg = encoders.EncoderConfig(model_type="bert", hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0, **enc)
  layout = graph_layout.NodeLayout(tokens, sentences, paragraphs)
  feats = windows(batch, layout)
  rng = np.random.default_rng(0)
  batch_np = dict(feats,
                  input_ids=rng.integers(1000, 30000, (batch, tokens)).astype(np.int32),
                  attention_mask=np.ones((batch, tokens), np.int32),
                  token_type_ids=np.zeros((batch, tokens), np.int32),
                  start_positions=np.full(batch, 20, np.int32),
                  end_positions=np.full(batch, 22, np.int32),
                  paragraph_label=np.full(batch, 3, np.int32),
                  answer_type=np.full(batch, 3, np.int32))
  batch_j = {k: jnp.asarray(v) for k, v in batch_np.items()}
  seq = jnp.asarray(rng.standard_normal((batch, tokens, enc["hidden_size"])), jnp.float32)
  print(f"device: {jax.devices()[0].device_kind}; batch {batch} x {tokens} tokens, "
        f"{sentences}/{paragraphs} sentence/paragraph slots, {layers} graph layers, "
        f"hidden {enc['hidden_size']}, encoder {enc['num_hidden_layers']} layers")
  rows = []
  for form in g.FORMULATIONS:
    gcfg = nq_graph.GraphConfig(hidden=enc["hidden_size"], num_heads=enc["num_attention_heads"],
                                intermediate_size=enc["intermediate_size"], tokens=tokens,
                                sentences=sentences, paragraphs=paragraphs, num_layers=layers,
                                dropout=0.0, formulation=form)
    graph_only = nq_graph.NqGraphModel(None, gcfg, rngs=nnx.Rngs(0))
    gdef, gstate, grest = nnx.split(graph_only, nnx.Param, ...)

    @jax.jit
    def graph_step(state, x, b):
      def f(state, x):
        m = nnx.merge(gdef, state, grest)
        edges = g.flatten_edges(b["edge_src"], b["edge_tgt"], b["edge_type"], b["edge_pos"],
                                layout.num_nodes)
        return nq_graph.nq_loss(m.graph_forward(x, b["st_mask"], edges), b)
      return jax.grad(f, argnums=(0, 1))(state, x)

    full = nq_graph.NqGraphModel(enc_cfg, gcfg, rngs=nnx.Rngs(0))
    fdef, fstate, frest = nnx.split(full, nnx.Param, ...)

    @jax.jit
    def full_step(state, b):
      def f(state):
        m = nnx.merge(fdef, state, frest)
        return m.loss(b, m(b, deterministic=True))
      loss, grads = jax.value_and_grad(f)(state)
      return loss, jax.tree.map(lambda p, d: p - 1e-5 * d, state, grads)

    t_graph = timed(graph_step, (gstate, seq, batch_j), a.steps)
    t_full = timed(full_step, (fstate, batch_j), a.steps)
    rows.append((form, t_graph, t_full))
  print(f"{'formulation':<12} {'graph fwd+bwd ms':>17} {'full step ms':>13} {'graph share':>12}")
  for form, tg, tf in rows:
    print(f"{form:<12} {tg:>17.1f} {tf:>13.1f} {100 * tg / tf:>11.1f}%")
  seg, den = rows[0][1], rows[1][1]
  print(f"dense / segment (graph step): {den / seg:.2f}x")


if __name__ == "__main__":
  main()
