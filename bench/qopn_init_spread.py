r"""How much of the spread of the rows across positions survives 1..N QOPN reasoning blocks at
initialisation, per block style (the measurement behind the default ``paper_residual``;
docs/qopn.md).

  python bench/qopn_init_spread.py                    # MiniLM width: D=384, 12 heads, std 0.02
  python bench/qopn_init_spread.py --dim=64 --heads=4

Input: standard-normal rows (an encoder's LayerNorm output is on that scale) for 2 articles of up
to 3 segments; spread = std across a segment's real context rows, averaged over features and
segments (`tests.layers.qopn_utils.position_spread`). Columns: spread after n blocks / the input's.
A span head cannot tell positions apart once the ratio is ~0.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

STYLES = (("paper_residual", False), ("paper_residual", True), ("paper", False), ("paper", True),
          ("transformer", True))


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--dim", type=int, default=384)
  p.add_argument("--heads", type=int, default=12)
  p.add_argument("--init-std", type=float, default=0.02, help="BERT's initializer_range")
  p.add_argument("--blocks", type=int, default=3)
  args = p.parse_args(argv)

  import jax.numpy as jnp
  import numpy as np
  from flax import nnx

  from poi_jax.layers import qopn
  from tests.layers import qopn_utils as U

  rng = np.random.default_rng(0)
  layout, k, length = U.random_layout(rng, batch=2, k_max=3, max_seg=12)
  att, _, seg, qr = U.masks(layout, k, length)
  h = rng.standard_normal((len(layout), k, length, args.dim)).astype(np.float32)
  inputs = [jnp.asarray(x) for x in (h, att, qr, seg)]
  base = U.position_spread(h, att, qr)
  print(f"D={args.dim} heads={args.heads} init std {args.init_std}: spread after n blocks / input")
  cols = " ".join(f"{f'n={n}':>9}" for n in range(1, args.blocks + 1))
  print(f"{'style':>15} {'W^O':>5} {cols}")
  for style, w_o in STYLES:
    row = []
    for n in range(1, args.blocks + 1):
      blocks = qopn.Reasoning(args.dim, args.heads, num_blocks=n, scan_blocks=False,
                              question_window=6, block_style=style, output_projection=w_o,
                              init_std=args.init_std, rngs=nnx.Rngs(0))
      row.append(U.position_spread(np.asarray(blocks(*inputs)), att, qr) / base)
    print(f"{style:>15} {str(w_o):>5} " + " ".join(f"{r:9.2e}" for r in row), flush=True)


if __name__ == "__main__":
  main()
