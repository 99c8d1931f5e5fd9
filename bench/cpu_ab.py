r"""CPU training step, several variants interleaved step by step: each variant (PyTorch eager, the
JAX engine with given runtime settings, XLA flags or attention kernel) lives in its own process,
compiled and warm; the parent asks each in turn for one timed step, round after round, and
reports each variant's **minimum** and median, and its speed relative to the first variant
(> 1: faster than the first, PyTorch unless ``--no_torch``).

  python bench/cpu_ab.py                                # torch vs the engine's defaults
  python bench/cpu_ab.py --torch_compile --rounds=10    # and torch.compile + fused AdamW
  python bench/cpu_ab.py --torch_compile --floor        # and the dense matmuls alone
  python bench/cpu_ab.py --torch_compile --bf16         # PyTorch bf16 autocast against JAX's
                                                        # bfloat16 matmul precision (AMX)
  python bench/cpu_ab.py --variant="attention xla::--attention=xla" \
      --variant="xnn greedy:--xla_gpu_...=1:" --rounds=8

Why: on a shared machine the load changes from second to second. Timing variant A for a minute
and then variant B compares two different loads; alternating single steps across warm processes
gives every variant the same mix of load, and the minimum over rounds estimates the
least-disturbed step. ``--variant=LABEL:XLA_FLAGS:EXTRA`` (repeatable): ``XLA_FLAGS`` for the
child's environment (added to the engine's ``runtime.xla_cpu_flags``), ``EXTRA`` space-separated
`bench/train_step.py`-style options for that child (``--attention=xla``, ``--cpu_malloc=system``,
``--prng=rbg``), and ``NAME=VALUE`` words for its environment (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``:
read by glibc when the process starts, so it cannot be set from inside). The workload is `bench/train_step.py`'s (POI-Net on a random ``--shape`` encoder,
dropout off unless ``--dropout``, ``--batch`` x ``--seq``, float32); ``--workload=encoder`` times BERT-style encoder
forward+backward only, as `bench/encoder.py` does (``--dropout`` too: both in training mode).
``--bf16`` (the step workload): the PyTorch rows under ``torch.autocast("cpu", torch.bfloat16)``
and every JAX variant under ``--matmul_precision=bfloat16`` (unless it sets its own): float32
parameters and activations, bfloat16 matmuls, on AMX tiles where the CPU has them (both sides).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _torch_fn(args):
  import torch

  from bench import train_step as ts
  if args.workload == "encoder":
    import transformers

    from bench.encoder import SHAPES
    shape = dict(SHAPES[args.shape])
    kind = shape.pop("model_type")
    cfg_cls = {"bert": transformers.BertConfig, "albert": transformers.AlbertConfig}[kind]
    model_cls = {"bert": transformers.BertModel, "albert": transformers.AlbertModel}[kind]
    model = model_cls(cfg_cls(**shape, hidden_dropout_prob=args.dropout,
                              attention_probs_dropout_prob=args.dropout))  # train mode
    ids, mask = _encoder_inputs(args, shape["vocab_size"])
    ids_t, mask_t = torch.tensor(ids), torch.tensor(mask)

    def fwd_bwd():
      model.zero_grad(set_to_none=True)
      model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state.sum().backward()
    return fwd_bwd

  class A:
    shape, head = args.shape, "poi"
  batch_np = ts.make_batch(args.batch, args.seq)
  return lambda: _torch_step(A, batch_np, args.torch_compile_mode, args.bf16)


def _torch_step(a, batch_np, compile_mode="", autocast_bf16=False, _cache={}):
  """One PyTorch training step on the CPU, as `bench/train_step.py`'s rows (eager, or
  ``compile_mode``: torch.compile with the fused AdamW; ``autocast_bf16``: under bf16 autocast)."""
  if "one" not in _cache:
    from bench import train_step as ts
    _cache["one"] = ts.torch_one_step(a.shape, a.head, batch_np, autocast_bf16=autocast_bf16,
                                      compile_mode=compile_mode or None)
  _cache["one"]()


def _floor_fn(args):
  """The step's dense matmuls and nothing else, by PyTorch (MKL): for every encoder layer's
  query, key, value, output and two feed-forward matmuls, the forward ``x @ W``, ``dx = dy @ W.T``
  and ``dW = x.T @ dy`` at the step's tokens, into preallocated outputs. No step can be faster
  than the same FLOPs at the same rate: the floor row."""
  import torch

  from bench import train_step as ts
  s = ts.SHAPES[args.shape]
  tokens, h, i = args.batch * args.seq, s["hidden_size"], s["intermediate_size"]
  g = torch.Generator().manual_seed(0)
  act = {n: torch.randn(tokens, n, generator=g) for n in (h, i)}
  out = {n: torch.empty(tokens, n) for n in (h, i)}
  mats = [(h, h)] * 4 + [(h, i), (i, h)]
  weights = [(torch.randn(k, n, generator=g), torch.empty(k, n)) for k, n in mats]

  def step():
    for _ in range(s["num_hidden_layers"]):
      for (k, n), (w, dw) in zip(mats, weights):
        torch.mm(act[k], w, out=out[n])  # forward
        torch.mm(act[n], w.T, out=out[k])  # dx
        torch.mm(act[k].T, act[n], out=dw)  # dW
  return step


def _encoder_inputs(args, vocab):
  import numpy as np
  rng = np.random.default_rng(0)
  ids = rng.integers(5, vocab, size=(args.batch, args.seq)).astype(np.int64)
  mask = np.ones_like(ids)
  mask[:, int(args.seq * 0.8):] = 0  # some padding, as real batches have
  return ids, mask


def _jax_fn(args):
  from poi_jax import runtime
  runtime.configure(dict(cpu_malloc=args.cpu_malloc, matmul_precision=args.matmul_precision))
  if args.prng:
    import jax
    jax.config.update("jax_default_prng_impl", args.prng)
  import jax
  import jax.numpy as jnp
  from flax import nnx
  if args.workload == "encoder":
    from bench.encoder import SHAPES
    from poi_jax.models import encoders
    cfg = encoders.EncoderConfig(**SHAPES[args.shape], dtype="float32",
                                 hidden_dropout_prob=args.dropout,
                                 attention_probs_dropout_prob=args.dropout,
                                 attention=args.attention)
    enc = encoders.build_encoder(cfg, rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(enc, nnx.Param, ...)
    ids, mask = (jnp.asarray(x) for x in _encoder_inputs(args, SHAPES[args.shape]["vocab_size"]))

    def grad_of(p, r):  # merged in the trace: the dropout's RNG state may advance there
      return nnx.grad(lambda enc: jnp.sum(
          enc(ids, mask, deterministic=not args.dropout).last_hidden_state))(
              nnx.merge(graphdef, p, r))
    grad = jax.jit(grad_of).lower(params, rest).compile()
    return lambda: jax.block_until_ready(grad(params, rest))

  from bench import train_step as ts

  class A:
    shape, head, remat, scan, attention = args.shape, "poi", "none", False, args.attention
  one, _, mesh = ts.engine_step(A, "float32", ts.make_batch(args.batch, args.seq))
  jax.set_mesh(mesh).__enter__()  # for the life of this child process
  return one


def child(args):
  if args.floor_child:
    fn = _floor_fn(args)
  else:
    fn = _torch_fn(args) if args.torch else _jax_fn(args)
  fn()
  fn()  # warm: compiled, memory pages touched
  print("ready", flush=True)
  clock = time.process_time if args.clock == "process" else time.perf_counter
  for line in sys.stdin:
    if line.strip() != "go":
      break
    t0 = clock()
    fn()
    print(json.dumps(clock() - t0), flush=True)
  print(json.dumps(_peak_rss_gb()), flush=True)


def _peak_rss_gb() -> float:
  """This process's peak resident memory (VmHWM), GB."""
  with open("/proc/self/status") as f:
    return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 2**20


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--workload", default="step", choices=["step", "encoder"])
  ap.add_argument("--shape", default=None, help="default: minilm (step), bert-base (encoder)")
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=None, help="default: 256 (step), 384 (encoder)")
  ap.add_argument("--rounds", type=int, default=6)
  ap.add_argument("--variant", action="append", default=None,
                  help="LABEL:XLA_FLAGS:EXTRA (repeatable); default: the engine's defaults")
  ap.add_argument("--dropout", type=float, default=0.0,
                  help="hidden and attention-probability dropout, both libraries, both workloads "
                       "(default 0: the benchmarks' setting; 0.1: BERT fine-tuning's)")
  ap.add_argument("--no_torch", action="store_true")
  ap.add_argument("--torch_compile", action="store_true",
                  help="a second PyTorch row: torch.compile (default mode) and the fused AdamW, "
                       "the strongest PyTorch step on a CPU (step workload)")
  ap.add_argument("--clock", default="wall", choices=["wall", "process"],
                  help="process: each child's CPU time (user + system); with `taskset -c 0` "
                       "(one core, one thread each) the work per step, nearly load-independent")
  ap.add_argument("--floor", action="store_true",
                  help="a last row: the step's dense matmuls alone by PyTorch (forward, dx, dW of "
                       "every encoder layer's six matmuls), the least time any step with those "
                       "FLOPs can take here (step workload)")
  # child options
  ap.add_argument("--floor_child", action="store_true", help=argparse.SUPPRESS)
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  ap.add_argument("--torch", action="store_true", help=argparse.SUPPRESS)
  ap.add_argument("--attention", default="auto")
  ap.add_argument("--cpu_malloc", default="reuse")
  ap.add_argument("--prng", default="")
  ap.add_argument("--torch_compile_mode", default="")
  ap.add_argument("--bf16", action="store_true",
                  help="PyTorch rows under bf16 autocast, JAX variants under "
                       "--matmul_precision=bfloat16 (step workload)")
  ap.add_argument("--matmul_precision", default="", help="a JAX variant's runtime.matmul_precision")
  args = ap.parse_args()
  args.shape = args.shape or ("minilm" if args.workload == "step" else "bert-base")
  args.seq = args.seq or (256 if args.workload == "step" else 384)
  if args.child:
    if args.dropout:  # both children build from train_step's shapes (dropout off there)
      from bench import train_step as ts
      for shape in ts.SHAPES.values():
        shape.update(hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    child(args)
    return
  common = [f"--clock={args.clock}", f"--workload={args.workload}", f"--shape={args.shape}",
            f"--batch={args.batch}", f"--seq={args.seq}", f"--dropout={args.dropout}", "--child"]
  if args.bf16 and args.workload != "step":
    ap.error("--bf16: the step workload only")
  bf16 = ["--bf16"] if args.bf16 else []
  cast = ", bf16 autocast" if args.bf16 else ""
  specs = [] if args.no_torch else [(f"torch eager{cast}", None, ["--torch", *bf16])]
  if args.torch_compile and not args.no_torch:
    if args.workload != "step":
      ap.error("--torch_compile: the step workload only")
    specs.append((f"torch.compile, fused AdamW{cast}", None,
                  ["--torch", "--torch_compile_mode=default", *bf16]))
  torch_rows = [label for label, _, extra in specs if "--torch" in extra]
  for v in args.variant or ["jax (engine defaults)::"]:
    label, flags, extra = (v.split(":", 2) + ["", ""])[:3]
    extra = extra.split()
    if args.bf16 and not any(w.startswith("--matmul_precision") for w in extra):
      extra.append("--matmul_precision=bfloat16")
    specs.append((label, flags, extra))
  if args.floor:
    if args.workload != "step":
      ap.error("--floor: the step workload only")
    specs.append(("floor: the dense matmuls alone (PyTorch)", None, ["--floor_child"]))
  procs = []
  for label, flags, extra in specs:
    env = dict(os.environ)
    env.update(w.split("=", 1) for w in extra if not w.startswith("-") and "=" in w)
    extra = [w for w in extra if w.startswith("-")]
    if flags:
      env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), *common, *extra], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    procs.append(p)
  for (label, _, _), p in zip(specs, procs):  # one at a time compiles, but all start together
    line = p.stdout.readline()
    if line.strip() != "ready":
      raise RuntimeError(f"variant {label!r} failed to start (see its stderr above)")
  times = {label: [] for label, _, _ in specs}
  loads = []
  for _ in range(args.rounds):
    loads.append(os.getloadavg()[0])
    for (label, _, _), p in zip(specs, procs):
      p.stdin.write("go\n")
      p.stdin.flush()
      times[label].append(json.loads(p.stdout.readline()))
  peak = {}
  for (label, _, _), p in zip(specs, procs):
    p.stdin.write("stop\n")
    p.stdin.flush()
    peak[label] = json.loads(p.stdout.readline())
    p.wait()
  print(f"# {' '.join(sys.argv)}")
  print(f"# {args.workload}: {args.shape}, {args.batch} x {args.seq}, float32"
        f"{' (bf16 autocast / bfloat16 matmul precision)' if args.bf16 else ''}, dropout "
        f"{args.dropout}; {args.rounds} "
        f"rounds, variants interleaved step by step; {args.clock} clock, "
        f"{len(os.sched_getaffinity(0))} CPU(s) allowed; load average {min(loads):.1f}-"
        f"{max(loads):.1f} (machine shared with other jobs)")
  # The strongest PyTorch row by each statistic (eager may have the lower minimum, compile the
  # lower median).
  best_min = min((min(times[label]) for label in torch_rows), default=None)
  best_med = min((statistics.median(times[label]) for label in torch_rows), default=None)
  header = (f"{'variant':<44} {'min ms':>8} {'median ms':>10} {'vs first (min)':>15} "
            f"{'vs first (median)':>18} {'peak RSS GB':>12}"
            + (f" {'vs best torch (min / median)':>29}" if len(torch_rows) > 1 else ""))
  print(header)
  print("-" * len(header))
  ref = specs[0][0]
  for label, _, _ in specs:
    t = times[label]
    print(f"{label:<44} {1e3 * min(t):>8.0f} {1e3 * statistics.median(t):>10.0f} "
          f"{min(times[ref]) / min(t):>15.2f} "
          f"{statistics.median(times[ref]) / statistics.median(t):>18.2f} {peak[label]:>12.2f}"
          + (f" {best_min / min(t):>20.2f} / {best_med / statistics.median(t):.2f}"
             if len(torch_rows) > 1 else ""))


if __name__ == "__main__":
  main()
