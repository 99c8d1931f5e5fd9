r"""The dense layers' matmuls on a CPU: XLA against PyTorch (MKL), alone and in the backward's
pattern, side by side in one run.

  python bench/cpu_matmul.py                      # MiniLM's shapes at 8 x 256 = 2,048 tokens
  python bench/cpu_matmul.py --shape=bert-base --tokens=3072 --repeats=20
  python bench/cpu_matmul.py --dtype=bfloat16     # bfloat16 operands and outputs on both sides

What it answers: how much of the CPU training step's distance from `torch.compile` is the matmul
library (docs/results.md, "Is the CPU training step as fast as PyTorch's?"). Each row is one
matmul of the step, in the layouts the engine asks for (`poi_jax/layers/matmul.py`'s custom VJP:
``y = x @ W``, ``dx = dy @ W.T``, ``dW = x.T @ dy`` with the tokens flattened), jitted alone;
the last row is the backward's pattern as one XLA program: per layer, ``dx`` and ``dW`` of the
feed-forward output matmul and the next matmul on ``tanh(dx)`` (what makes the layers depend on
each other), ``--layers`` times, against the same matmuls in PyTorch, eagerly. The two libraries
alternate call by call; each row is the fastest of ``--repeats`` calls after a warm-up, on every
core (``torch.set_num_threads(os.cpu_count())``; XLA uses them all). GFLOP/s counts ``2 m k n``
a matmul. float32 by default; ``--dtype=bfloat16`` gives both libraries bfloat16 operands and
outputs (float32 accumulation), which is where a CPU with AMX tiles (Intel Xeon from Sapphire
Rapids on) separates them: PyTorch's oneDNN runs them on the tiles, while jaxlib 0.10's XLA
converts bfloat16 dots to float32 around its float32 matmul (docs/cpu_profile.md). PyTorch's
OpenMP threads are told to sleep as soon as a call ends (``OMP_WAIT_POLICY=PASSIVE``, unless
set): by default they spin for a while after each call, and in this alternation that spinning
took a third of XLA's next call (230 against 300-320 GFLOP/s on a 2-core Intel Xeon) while
PyTorch's own rates did not move.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

SHAPES = {"minilm": (384, 1536), "bert-base": (768, 3072), "bert-large": (1024, 4096)}


def _fastest(calls, repeats: int) -> list[float]:
  """Alternates ``calls`` (no-argument callables that block until done) ``repeats`` times after
  one warm-up each; returns each one's fastest time in seconds."""
  for call in calls:
    call()
  best = [float("inf")] * len(calls)
  for _ in range(repeats):
    for i, call in enumerate(calls):
      start = time.perf_counter()
      call()
      best[i] = min(best[i], time.perf_counter() - start)
  return best


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--shape", default="minilm", choices=sorted(SHAPES))
  p.add_argument("--tokens", type=int, default=2048, help="batch x sequence, flattened")
  p.add_argument("--layers", type=int, default=6, help="layers of the backward-pattern row")
  p.add_argument("--repeats", type=int, default=10)
  p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                 help="operands' and outputs' type on both sides")
  args = p.parse_args(argv)

  os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (before torch starts its threads)
  import jax
  import jax.numpy as jnp
  import numpy as np
  import torch
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  from poi_jax.train import environment
  torch.set_num_threads(os.cpu_count())
  hidden, inner = SHAPES[args.shape]
  t = args.tokens
  rng = np.random.default_rng(0)
  arrays = {}
  jax_dtype, torch_dtype = getattr(jnp, args.dtype), getattr(torch, args.dtype)
  # Outputs are rounded to the operands' type: bfloat16 keeps 8 bits of mantissa.
  rel_tol = 1e-4 if args.dtype == "float32" else 2e-2

  def arr(name, shape):
    if name not in arrays:
      # Rounded to the type once here, so both libraries multiply the very same numbers.
      arrays[name] = np.asarray(jnp.asarray(
          rng.standard_normal(shape, dtype=np.float32) * 0.05, jax_dtype).astype(jnp.float32))
    return arrays[name]

  def dims(lhs_contract, rhs_contract):
    return (((lhs_contract,), (rhs_contract,)), ((), ()))

  # name, XLA function, PyTorch function, operand names and shapes, FLOPs.
  rows = []
  for a, b in ((hidden, inner), (inner, hidden), (hidden, hidden)):
    x, w, dy = arr(f"x{a}", (t, a)), arr(f"w{a}x{b}", (a, b)), arr(f"dy{b}", (t, b))
    flops = 2 * t * a * b
    rows.append((f"y = x @ W, {t} x {a} @ {a} x {b}",
                 lambda x, w: jax.lax.dot_general(x, w, dims(1, 0)),
                 lambda x, w: x @ w, (x, w), flops))
    rows.append((f"dx = dy @ W.T, {t} x {b} @ ({a} x {b}).T",
                 lambda dy, w: jax.lax.dot_general(dy, w, dims(1, 1)),
                 lambda dy, w: dy @ w.T, (dy, w), flops))
    rows.append((f"dW = x.T @ dy, ({t} x {a}).T @ {t} x {b}",
                 lambda x, dy: jax.lax.dot_general(x, dy, dims(0, 0)),
                 lambda x, dy: x.T @ dy, (x, dy), flops))

  x, w, dy = arr(f"x{hidden}", (t, hidden)), arr(f"w{inner}x{hidden}", (inner, hidden)), \
      arr(f"dy{hidden}", (t, hidden))
  x_in = arr(f"x{inner}", (t, inner))

  def pattern_xla(x_in, w, dy):
    grads = []
    for _ in range(args.layers):
      dx = jax.lax.dot_general(dy, w, dims(1, 1))             # (t, inner)
      grads.append(jax.lax.dot_general(x_in, dy, dims(0, 0)))  # (inner, hidden)
      dy = jax.lax.dot_general(jnp.tanh(dx), w, dims(1, 0))   # (t, hidden): the next layer's
    return dy, grads

  def pattern_torch(x_in, w, dy):
    grads = []
    for _ in range(args.layers):
      dx = dy @ w.T
      grads.append(x_in.T @ dy)
      dy = torch.tanh(dx) @ w
    return dy, grads

  rows.append((f"backward pattern: {args.layers} x (dx, dW, next matmul), {t} x {hidden} x {inner}",
               pattern_xla, pattern_torch, (x_in, w, dy), 3 * args.layers * 2 * t * hidden * inner))

  print(f"# bench/cpu_matmul.py {' '.join(argv)}")
  print(f"# {environment.describe()['device']}; jax {jax.__version__}, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads, OMP_WAIT_POLICY="
        f"{os.environ['OMP_WAIT_POLICY']}); {args.shape}: hidden {hidden}, "
        f"intermediate {inner}; {args.dtype}; fastest of {args.repeats} alternating calls; "
        f"load average {os.getloadavg()[0]:.1f}")
  header = f"{'matmul':<62} {'XLA ms':>8} {'GFLOP/s':>8} {'torch ms':>9} {'GFLOP/s':>8} {'XLA/torch':>10}"
  print(header)
  print("-" * len(header))
  with torch.inference_mode():
    for name, fx, ft, operands, flops in rows:
      jitted = jax.jit(fx)
      on_device = [jnp.asarray(o, jax_dtype) for o in operands]
      as_torch = [torch.from_numpy(np.array(o)).to(torch_dtype) for o in operands]
      xla_s, torch_s = _fastest(
          [lambda: jax.block_until_ready(jitted(*on_device)), lambda: ft(*as_torch)],
          args.repeats)
      # The same numbers from both (a wrong layout would pass the timing and fail here).
      got, want = jitted(*on_device), ft(*as_torch)
      got, want = jax.tree.leaves(got), jax.tree.leaves(want)
      got = [np.asarray(g, np.float32) for g in got]
      want = [r.float().numpy() for r in want]
      err = max(float(np.max(np.abs(g - r))) for g, r in zip(got, want))
      scale = max(float(np.max(np.abs(r))) for r in want)
      if err > rel_tol * max(scale, 1.0):
        raise SystemExit(f"error: {name}: XLA and PyTorch differ by {err:.2e} (scale {scale:.2e})")
      print(f"{name:<62} {xla_s * 1e3:>8.2f} {flops / xla_s / 1e9:>8.0f} {torch_s * 1e3:>9.2f} "
            f"{flops / torch_s / 1e9:>8.0f} {torch_s / xla_s:>9.2f}x")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
