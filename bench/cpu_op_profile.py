r"""Where a compiled CPU step spends its time, op by op: the MiniLM-shaped POI-Net's forward+backward
(or the whole training step, the encoder alone, or the engine's predict forward) traced with
`jax.profiler`, each XLA instruction's time summed over ``--calls`` calls and grouped by what it
computes.

  python bench/cpu_op_profile.py                       # POI-Net forward+backward, 8 x 256
  python bench/cpu_op_profile.py --piece=step --top=30
  python bench/cpu_op_profile.py --piece=encoder --attention=explicit
  python bench/cpu_op_profile.py --piece=step --batch=16 --seq=192 --dropout=0.1  # the quickstart
  python bench/cpu_op_profile.py --piece=predict --batch=32 --seq=256   # evaluation, the Reader

``--piece=predict`` is `bench/forward_fusion.py`'s JAX forward (padded windows, the forward's
compiler options: no YNNPACK fusions), so its matmuls are asynchronous Eigen calls whose events
are only their dispatch; the last line gives the wall less every instruction but the dots, i.e.
the matmuls' time, and the rate at which the encoder's dense FLOPs ran in it (with
``--head=poi`` the co-attention's products are in that time, not in those FLOPs).

Rows: the instruction's kind (its opcode; a fusion by the opcodes inside it, e.g.
``fusion[dot]`` for a matmul YNNPACK runs, ``fusion[transpose,copy]`` for a layout copy) and its
output shape, with the count per call and ms per call. Read the groups, not the sum: XLA runs
independent instructions on two executor threads at once, and an Eigen matmul that runs
asynchronously shows a short dispatch while the instruction beside it is slowed down; the total
is printed beside the wall time of a call for that reason. docs/cpu_profile.md has what these
tables showed.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_SKIP = {"parameter", "constant", "bitcast", "broadcast", "get-tuple-element", "tuple"}


def _compiled_piece(args):
  """``(run, compiled)``: a no-argument callable running one call, and its compiled program."""
  import jax
  if args.piece == "predict":
    return _predict_piece(args)
  if args.piece == "encoder":
    from bench import cpu_ab
    ns = argparse.Namespace(workload="encoder", shape=args.shape, batch=args.batch, seq=args.seq,
                            attention=args.attention, cpu_malloc="reuse", prng=None,
                            dropout=args.dropout)
    run = cpu_ab._jax_fn(ns)
    name = "grad"
  else:
    from bench import cpu_pieces
    from bench import train_step as ts
    for shape in ts.SHAPES.values():  # dropout off there unless asked
      shape.update(hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    ns = argparse.Namespace(shape=args.shape, head="poi", batch=args.batch, seq=args.seq,
                            remat="none", scan=False, attention=args.attention)
    run = cpu_pieces.jax_pieces(ns, ts.make_batch(args.batch, args.seq))[args.piece]
    name = {"fwd+bwd": "fwd_bwd", "forward": "forward", "step": "step"}[args.piece]
  cells = dict(zip(run.__code__.co_freevars, (c.cell_contents for c in run.__closure__ or ())))
  compiled = cells[name]
  assert hasattr(compiled, "as_text"), f"no compiled program for {args.piece}"
  return (lambda: jax.block_until_ready(run())), compiled


def _predict_piece(args):
  """The engine's predict forward (evaluation, the Reader): SQuAD 1.1's model at ``--shape``
  (``--head``, no POS), deterministic, compiled with the forward's CPU options
  (`poi_jax.runtime.forward_compiler_options`) on ``--batch`` padded windows of ``--seq`` tokens
  (`bench.forward_fusion.padded_windows`). Random weights: the time is the same."""
  import jax
  import numpy as np
  from flax import nnx

  from bench import forward_fusion
  from configs import squad1
  from poi_jax import runtime, tasks
  config = squad1.get_config(args.shape)
  with config.unlocked():
    config.model.head, config.model.pos_embedding = args.head, False
    config.model.attention = args.attention
  model = tasks.get_task("squad1").build_model(config, nnx.Rngs(0))
  ec = model.encoder.config  # the checkpoint's shape (``init_from``), not the config's default
  args.dense_flops = 2 * args.batch * args.seq * ec.num_hidden_layers * (
      4 * ec.hidden_size ** 2 + 2 * ec.hidden_size * ec.intermediate_size)
  graphdef, state = nnx.split(model)
  batch = forward_fusion.padded_windows(args.batch, args.seq, np.random.default_rng(0))

  def forward(s, b):
    return nnx.merge(graphdef, s)(b, deterministic=True)
  compiled = jax.jit(forward, compiler_options=runtime.forward_compiler_options()).lower(
      state, batch).compile()
  return (lambda: jax.block_until_ready(compiled(state, batch))), compiled


def _kinds(hlo: str) -> dict[str, str]:
  """``{instruction name: "opcode[inner opcodes] -> shape"}`` from the compiled HLO text."""
  bodies, current = {}, None
  for line in hlo.splitlines():
    head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
    if head and not line.startswith(" "):
      current = head.group(1)
      bodies[current] = []
    elif current:
      bodies[current].append(line)
  kinds = {}
  for lines in bodies.values():
    for line in lines:
      # A tuple-shaped result (a custom call's) has spaces inside its parentheses.
      m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\([^)]*\)|\S+) (\w[\w-]*)\(", line)
      if not m:
        continue
      name, shape, op = m.groups()
      shape = re.sub(r"\{[^}]*\}", "", shape)
      called = re.search(r"calls=%?([\w.\-]+)", line)
      if called and called.group(1) in bodies:
        inner = collections.Counter()
        for body_line in bodies[called.group(1)]:
          o = re.match(r"\s*(?:ROOT )?%?[\w.\-]+ = \S+ (\w[\w-]*)\(", body_line)
          if o and o.group(1) not in _SKIP:
            inner[o.group(1)] += 1
        op = f"{op}[{','.join(sorted(inner))}]"
      target = re.search(r'custom_call_target="([^"]+)"', line)
      if target:
        op = f"{op}[{target.group(1)}]"
      kinds[name] = f"{op} -> {shape}"
  return kinds


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--piece", default="fwd+bwd",
                  choices=["forward", "fwd+bwd", "step", "encoder", "predict"])
  ap.add_argument("--head", default="none", choices=["none", "poi"],
                  help="--piece=predict: the span head alone (none) or POI-Net's (poi)")
  ap.add_argument("--shape", default="minilm")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--attention", default="auto")
  ap.add_argument("--dropout", type=float, default=0.0,
                  help="hidden and attention dropout (0.1: BERT fine-tuning's; the masks' cost)")
  ap.add_argument("--calls", type=int, default=3)
  ap.add_argument("--cpu_malloc", default="reuse", choices=["reuse", "system"],
                  help="runtime.cpu_malloc (reuse, as the step benchmarks time it: with system, "
                       "every call first-touches its temporaries and the ops writing them slow)")
  ap.add_argument("--top", type=int, default=25)
  args = ap.parse_args()
  from poi_jax import runtime
  runtime.configure({"cpu_malloc": args.cpu_malloc})  # else the engine's defaults
  import jax

  run, compiled = _compiled_piece(args)
  for _ in range(2):
    run()
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir):
      for _ in range(args.calls):
        run()
    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    profile = jax.profiler.ProfileData.from_file(path)
  kinds = _kinds(compiled.as_text())
  by_kind, count, wall_ns = collections.Counter(), collections.Counter(), 0
  for plane in profile.planes:
    for line in plane.lines:
      for event in line.events:
        if "wait for completion" in event.name:
          wall_ns += event.duration_ns
        elif line.name.startswith("tf_XLAEigen") and event.name in kinds:
          by_kind[kinds[event.name]] += event.duration_ns
          count[kinds[event.name]] += 1
  per_call = lambda ns: ns / args.calls / 1e6
  print(f"# {' '.join(sys.argv)}")
  print(f"# {args.piece}, {args.shape} {args.batch} x {args.seq}, attention={args.attention}, "
        f"dropout {args.dropout}; "
        f"{args.calls} calls; wall {per_call(wall_ns):.1f} ms a call, instructions' sum "
        f"{per_call(sum(by_kind.values())):.1f} ms; load average {os.getloadavg()[0]:.1f}")
  print(f"{'ms/call':>8} {'n/call':>7}  kind -> output shape")
  for kind, ns in by_kind.most_common(args.top):
    print(f"{per_call(ns):>8.2f} {count[kind] / args.calls:>7.0f}  {kind}")
  if args.piece == "predict":
    # Without YNNPACK's fusions a matmul is an asynchronous Eigen call: its event is the dispatch
    # (a fraction of a millisecond), its work runs on Eigen's pool while the next instruction
    # waits for it, so the wall's remainder is the matmuls' time.
    synchronous = sum(ns for kind, ns in by_kind.items() if not kind.startswith("dot "))
    rest, flops = per_call(wall_ns - synchronous), args.dense_flops
    print(f"wall less the other instructions: {rest:.1f} ms a call (the asynchronous matmuls); "
          f"the encoder's dense matmuls, {flops / 1e9:.1f} GFLOP, at {flops / rest / 1e6:.1f} "
          f"GFLOP/s in it")


if __name__ == "__main__":
  main()
