r"""QOPN training-step time vs the number of segments K and of reasoning blocks, against the
sliding-window baseline, side by side in one run.

  python bench/qopn.py                                   # MiniLM-shaped encoder, B=2, L=256
  python bench/qopn.py --segments=1,6 --blocks=0,3 --steps=3 --seq=128   # a quick look

One step = forward, backward and an AdamW update, jitted (`nnx.jit`), random weights, dropout off,
float32 (``--dtype=bfloat16`` for bf16 compute). QOPN reads B articles of K segments of L tokens
(B*K encoder sequences + the blocks + one softmax over K*L positions); the baseline is the same
encoder and a span head on the same B*K windows of L tokens, each window on its own (no blocks),
so the table isolates what the reasoning blocks and the global head cost. Columns: ms/step (median
of ``--steps`` after one compile step) and the ratio to the baseline at the same K.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPE = dict(model_type="bert", vocab_size=30522, hidden_size=384, num_hidden_layers=6,
             num_attention_heads=12, intermediate_size=1536, hidden_act="gelu",
             max_position_embeddings=512, type_vocab_size=2, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)


def qopn_batch(b, k, seq, q_rows=17, seed=0):
  import numpy as np
  rng = np.random.default_rng(seed)
  ids = rng.integers(1000, SHAPE["vocab_size"], (b, k, seq)).astype(np.int32)
  types = np.zeros((b, k, seq), np.int32)
  types[..., q_rows + 1:] = 1
  span = np.zeros((b, k, seq), np.int32)
  span[..., q_rows + 1:seq - 1] = 1
  start = (k - 1) * seq + q_rows + 3
  return dict(input_ids=ids, attention_mask=np.ones_like(ids), token_type_ids=types,
              question_rows=np.full((b,), q_rows, np.int32),
              segment_mask=np.ones((b, k), np.int32), span_mask=span,
              start_positions=np.full((b,), start, np.int32),
              end_positions=np.full((b,), start + 4, np.int32),
              example_mask=np.ones((b,), np.float32))


def window_batch(qb):
  """The same B*K windows as independent sequences (the sliding-window baseline)."""
  import numpy as np
  b, k, seq = qb["input_ids"].shape
  flat = lambda x: x.reshape(b * k, seq)
  q = int(qb["question_rows"][0])
  return dict(input_ids=flat(qb["input_ids"]), attention_mask=flat(qb["attention_mask"]),
              token_type_ids=flat(qb["token_type_ids"]),
              start_positions=np.full((b * k,), q + 3, np.int32),
              end_positions=np.full((b * k,), q + 7, np.int32),
              con_start=np.full((b * k,), q, np.int32),
              con_end=np.full((b * k,), seq - 1, np.int32),
              example_mask=np.ones((b * k,), np.float32))


def step_time(model, batch, steps):
  import jax
  import jax.numpy as jnp
  import numpy as np
  import optax
  from flax import nnx

  opt = nnx.Optimizer(model, optax.adamw(1e-5), wrt=nnx.Param)
  batch = {k: jnp.asarray(v) for k, v in batch.items()}

  @nnx.jit
  def step(m, o, b):
    loss, g = nnx.value_and_grad(lambda mm: mm.loss(b, mm(b, deterministic=True)))(m)
    o.update(m, g)
    return loss

  jax.block_until_ready(step(model, opt, batch))  # compile
  times = []
  for _ in range(steps):
    t = time.perf_counter()
    jax.block_until_ready(step(model, opt, batch))
    times.append(time.perf_counter() - t)
  return 1000.0 * float(np.median(times))


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--batch", type=int, default=2, help="articles per step (B)")
  p.add_argument("--seq", type=int, default=256, help="tokens per segment / window (L)")
  p.add_argument("--segments", default="1,2,4,6", help="K values")
  p.add_argument("--blocks", default="0,1,3", help="numbers of reasoning blocks")
  p.add_argument("--style", default="paper_residual",
                 choices=("paper_residual", "paper", "transformer"))
  p.add_argument("--output-projection", action="store_true", help="W^O after the heads")
  p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
  p.add_argument("--steps", type=int, default=5)
  args = p.parse_args(argv)

  import jax
  from flax import nnx

  from poi_jax.models import encoders, poi_net, qopn

  cfg = encoders.EncoderConfig.from_hf(SHAPE, dtype=args.dtype)
  blocks = [int(x) for x in args.blocks.split(",")]
  print(f"device {jax.devices()[0].device_kind}; encoder {SHAPE['num_hidden_layers']} x "
        f"{SHAPE['hidden_size']}; B={args.batch} L={args.seq} {args.dtype} {args.style} blocks")
  header = f"{'K':>3} {'window ms':>10} " + " ".join(f"{f'QOPN {n}b ms':>12} {'x':>5}"
                                                       for n in blocks)
  print(header)
  for k in (int(x) for x in args.segments.split(",")):
    qb = qopn_batch(args.batch, k, args.seq)
    base = poi_net.PoiNetForQuestionAnswering(cfg, variant="none", pos_embedding=False,
                                              rngs=nnx.Rngs(0))
    t_base = step_time(base, window_batch(qb), args.steps)
    row = f"{k:>3} {t_base:>10.1f} "
    for n in blocks:
      model = qopn.QopnForQuestionAnswering(cfg, num_blocks=n, block_style=args.style,
                                            output_projection=args.output_projection,
                                            question_window=32, dropout=0.0, rngs=nnx.Rngs(0))
      t = step_time(model, qb, args.steps)
      row += f"{t:>12.1f} {t / t_base:>5.2f} "
    print(row, flush=True)


if __name__ == "__main__":
  main()
