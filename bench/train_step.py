r"""Training-step throughput at the papers' scale: the JAX engine's step and the same model in
PyTorch on the same device, float32 and bfloat16 side by side in one run.

  python bench/train_step.py                                   # MiniLM-shaped POI-Net, 8 x 256
  python bench/train_step.py --shape=bert-large --seq=384 --batch=32 --dtype=bfloat16
  python bench/train_step.py --shape=albert-xxlarge --seq=512 --batch=24 --remat=full \
      --compile_only                      # does it fit? (compiled memory estimate, no run)
  python bench/train_step.py --devices    # + the JAX step on 1 vs 8 simulated CPU devices
  python bench/train_step.py --batch=32 --seq=384 --dtype=bfloat16 --steps=20 \
      --torch_compile=default,max-autotune-no-cudagraphs --profile_dir=/tmp/prof   # a GPU

Model: ``--shape`` encoder (random weights, dropout off) + ``--head=poi`` (POS table + the
paper's co-attention, forgetting, 3 turns + span head) or ``--head=none`` (span head on the
encoder: the difference is what POS + co-attention cost). One step = forward, backward, AdamW
update. JAX: the engine's jitted step with donated state (`poi_jax.train.step.create_sharded_state`;
``--dtype=bfloat16``: bf16 compute, float32 parameters; ``--attention``, ``--remat``,
``--scan``; on a CPU the bfloat16 group also has a float32 JAX row with bfloat16 matmul
precision, PyTorch's CPU autocast's counterpart, on AMX tiles where the CPU has them:
`poi_jax/layers/matmul.py`). PyTorch, the same model (`bench/torch_poi.py`: transformers' BERT or ALBERT with SDPA
attention), TF32 on a GPU, ``torch.autocast(bfloat16)`` beside JAX's bf16, in two forms: eager
with the default `torch.optim.AdamW`, and ``torch.compile`` (``--torch_compile`` modes, default
``default``) with the fused AdamW, the strongest step a PyTorch user gets for two lines.

Columns: ms/step (the median step; every step ends with a device sync) and the steps' min-max;
host ms (JAX: the median time until the step's call returned, i.e. dispatch, which runs ahead of
the device; near ms/step when the host sets the pace); examples/s; MFU = matmul FLOPs of the
step / time / the device's bf16 dense peak (`PEAK_BF16_TFLOPS`; n/a on a CPU); memory = the
compiled JAX step's footprint (arguments + outputs + temporaries, `Compiled.memory_analysis`, on
any backend) and PyTorch's
``max_memory_allocated`` (GPU only); warm-up s = tracing + compilation + first step, apart from
the timed steps; vs eager / vs best torch = PyTorch eager's / the fastest PyTorch row's time in the
same dtype over the row's (a JAX row's ``vs best torch`` above 1.00 beats every PyTorch step).
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

_DROPOUT_OFF = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                    max_position_embeddings=512, type_vocab_size=2, vocab_size=30522)
SHAPES = {
    "minilm": dict(model_type="bert", hidden_size=384, num_hidden_layers=6,
                   num_attention_heads=12, intermediate_size=1536, hidden_act="gelu"),
    "bert-base": dict(model_type="bert", hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, hidden_act="gelu"),
    "bert-large": dict(model_type="bert", hidden_size=1024, num_hidden_layers=24,
                       num_attention_heads=16, intermediate_size=4096, hidden_act="gelu"),
    "albert-base": dict(model_type="albert", embedding_size=128, hidden_size=768,
                        num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                        num_hidden_groups=1, inner_group_num=1, hidden_act="gelu_new"),
    "albert-xxlarge": dict(model_type="albert", embedding_size=128, hidden_size=4096,
                           num_hidden_layers=12, num_attention_heads=64,
                           intermediate_size=16384, num_hidden_groups=1, inner_group_num=1,
                           hidden_act="gelu_new"),
}
for _s in SHAPES.values():
  _s.update(_DROPOUT_OFF)
# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity), by a substring of `device_kind`.
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10": 125.0,
                    "TPU v5 lite": 197.0, "TPU v5": 459.0, "TPU v4": 275.0}


def make_batch(batch, seq, vocab=30522, seed=0):
  import numpy as np
  rng = np.random.default_rng(seed)
  q = seq // 8
  return {
      "input_ids": rng.integers(1000, vocab, (batch, seq)).astype(np.int32),
      "attention_mask": np.ones((batch, seq), np.int32),
      "token_type_ids": np.concatenate([np.zeros((batch, q + 2)), np.ones((batch, seq - q - 2))],
                                       1).astype(np.int32),
      "pos_tags": rng.integers(1, 39, (batch, seq)).astype(np.int32),
      "con_start": np.full((batch,), q + 1, np.int32),
      "con_end": np.full((batch,), seq - 1, np.int32),
      "start_positions": rng.integers(q + 2, seq - 1, (batch,)).astype(np.int32),
      "end_positions": np.full((batch,), seq - 2, np.int32),
  }


def _jax_config(args, dtype):
  from ml_collections import ConfigDict

  from configs import squad2
  config = squad2.get_config("tiny")
  with config.unlocked():
    config.model.encoder = ConfigDict(SHAPES[args.shape])
    config.model.dtype = dtype
    config.model.head = args.head
    config.model.remat = args.remat
    config.model.scan_layers = args.scan
    config.model.attention = args.attention
  return config


def _build(config, abstract: bool):
  from flax import nnx

  from poi_jax import tasks
  from poi_jax.train import optim

  def make():
    model = tasks.build_model(config, nnx.Rngs(0))
    tx, _ = optim.make_optimizer(config.optim, 1000)
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

  return nnx.eval_shape(make) if abstract else make()


def _memory_gb(compiled):
  m = compiled.memory_analysis()
  if m is None:
    return None
  total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
           - m.alias_size_in_bytes)
  return total / 2**30


def jax_compile_only(args, dtype):
  """The compiled step's memory footprint (GB) without allocating the state."""
  import jax
  import numpy as np
  from flax import nnx

  from poi_jax.train import mesh as mesh_lib
  from poi_jax.train import step as step_lib
  config = _jax_config(args, dtype)
  mesh = mesh_lib.make_mesh(config.mesh)
  model, optimizer = _build(config, abstract=True)
  batch = make_batch(args.batch, args.seq)
  batch["example_mask"] = np.ones(args.batch, np.float32)
  with jax.set_mesh(mesh):
    graphdef, state = nnx.split((model, optimizer))
    shardings = mesh_lib.state_shardings(state, mesh, config.mesh.rules)
    train, _ = step_lib.jit_steps(graphdef, shardings, mesh, config.mesh.rules,
                                  {k: v.ndim for k, v in batch.items()})
    gb = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in batch.items()}
    t0 = time.perf_counter()
    compiled = train.lower(nnx.as_pure(state), gb).compile()
  return _memory_gb(compiled), time.perf_counter() - t0


def engine_step(args, dtype, batch_np):
  """The engine's jitted training step at the bench's shape, compiled, its state donated:
  ``(one, compiled, mesh)``, ``one()`` running one step (under ``jax.set_mesh(mesh)``)."""
  import jax
  import numpy as np

  from poi_jax.train import mesh as mesh_lib
  from poi_jax.train import placement
  from poi_jax.train import step as step_lib
  config = _jax_config(args, dtype)
  mesh = mesh_lib.make_mesh(config.mesh)
  model, optimizer = _build(config, abstract=False)
  batch = dict(batch_np, example_mask=np.ones(len(batch_np["input_ids"]), np.float32))
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, optimizer, mesh, config.mesh.rules,
                                        {k: v.ndim for k, v in batch_np.items()})
    gb = placement.global_batch(batch, mesh)
    compiled = run.train_step.lower(run.state, gb).compile()

  def one():
    """One step; returns the seconds until the call returned (the host's dispatch: Python,
    argument handling and launching the step's kernels, which runs ahead of the device)."""
    t0 = time.perf_counter()
    run.state, out = compiled(run.state, gb)
    dispatched = time.perf_counter() - t0
    jax.block_until_ready(out["loss"])
    return dispatched
  return one, compiled, mesh


def timed(one, steps):
  """``(seconds of each step, what each call of one() returned)``: every step ends with a
  device sync, so the spread shows outliers (a collection, a recompilation) a mean would hide."""
  times, results = [], []
  for _ in range(steps):
    t0 = time.perf_counter()
    results.append(one())
    times.append(time.perf_counter() - t0)
  return times, results


def jax_step(args, dtype, batch_np):
  """``(seconds of each step, compiled memory GB, warm-up seconds, host dispatch seconds of
  each step)`` of the engine's step; the warm-up holds tracing, compilation and the first step.
  ``args.profile_dir``: also a trace of 3 steps after the timed ones (`jax.profiler`, with a
  Perfetto ``*.trace.json.gz``)."""
  import jax
  t0 = time.perf_counter()
  one, compiled, mesh = engine_step(args, dtype, batch_np)
  with jax.set_mesh(mesh):
    one()  # warm-up
    warm = time.perf_counter() - t0
    times, dispatch = timed(one, args.steps)
    if args.profile_dir:  # the compiled HLO names each traced op's model part (step_profile.py)
      os.makedirs(args.profile_dir, exist_ok=True)
      with open(os.path.join(args.profile_dir, "step.hlo.txt"), "w") as f:
        f.write(compiled.as_text())
      with jax.profiler.trace(args.profile_dir, create_perfetto_trace=True):
        for _ in range(3):
          one()
    return times, _memory_gb(compiled), warm, dispatch


def torch_one_step(shape, head, batch_np, device="cpu", autocast_bf16=False, compile_mode=None):
  """A callable running one PyTorch training step (forward, backward, clipping, AdamW) on
  ``device``: eager with PyTorch's default AdamW, or (``compile_mode``) the model compiled by
  TorchInductor with the fused AdamW; `torch_step` times it, `bench/cpu_ab.py` interleaves it."""
  import contextlib

  import torch

  from bench.torch_device import prepare
  from bench.torch_poi import training_setup
  sync = prepare(device)
  model, opt, batch = training_setup(SHAPES[shape], head, batch_np, device,
                                     optimizer="fused" if compile_mode else "default")
  loss_of = torch.compile(model, mode=compile_mode) if compile_mode else model
  cast = (torch.autocast(device.split(":")[0], dtype=torch.bfloat16) if autocast_bf16
          else contextlib.nullcontext())

  def one():
    opt.zero_grad(set_to_none=True)
    with cast:
      loss = loss_of(batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sync()
  return one


def torch_step(args, batch_np, device="cpu", autocast_bf16=False, compile_mode=None):
  """``(seconds of each step, peak GB or None, warm-up seconds)`` of the PyTorch step on ``device``:
  eager with PyTorch's default AdamW, or (``compile_mode``: a `torch.compile` mode, e.g.
  ``default``) the model compiled by TorchInductor with the fused AdamW, the strongest step a
  PyTorch user gets by changing two lines. The warm-up (first) step holds the compilation."""
  import torch

  one = torch_one_step(args.shape, args.head, batch_np, device, autocast_bf16, compile_mode)
  if device != "cpu":
    torch.cuda.reset_peak_memory_stats()
  t0 = time.perf_counter()
  one()
  one()  # a compiled step may recompile once its inputs' strides or grads settle
  warm = time.perf_counter() - t0
  times, _ = timed(one, args.steps)
  mem = torch.cuda.max_memory_allocated() / 2**30 if device != "cpu" else None
  del one
  if compile_mode:
    torch.compiler.reset()  # frees the compiled graphs before the next row
  return times, mem, warm


def train_flops(shape, batch, seq):
  """Matmul FLOPs of one training step (backward = 2x forward): projections, attention scores
  and context, feed-forward; ALBERT's shared layers count once per application."""
  s = SHAPES[shape]
  d, f, n = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"]
  per_token_layer = 2 * (4 * d * d + 2 * d * f) + 2 * 2 * seq * d
  return 3 * batch * seq * n * per_token_layer


def _peak(kind):
  return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in kind), None)


def _child(argv, env=None):
  """``(seconds of each step, compiled memory GB, allocator peak GB or None, warm-up seconds,
  host dispatch seconds of each step, the attention kernels it ran)`` of the JAX step in a fresh
  process (its own runtime settings)."""
  out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *argv],
                       env=env, capture_output=True, text=True, cwd=ROOT)
  if out.returncode:
    raise RuntimeError(f"JAX child {argv} failed:\n{out.stderr[-3000:]}")
  result = json.loads(out.stdout.strip().splitlines()[-1])
  return (result["step_s"], result["memory_gb"], result.get("peak_gb"), result["warm_s"],
          result["dispatch_s"], result.get("attention") or {})


def _profile_env():
  """The profiling process's environment: on a GPU, XLA's command buffers (CUDA graphs) off, as
  a trace shows a command buffer as one op and `bench/step_profile.py` could not split it."""
  flags = os.environ.get("XLA_FLAGS", "")
  return dict(os.environ, XLA_FLAGS=f"{flags} --xla_gpu_enable_command_buffer=".strip())


def _subprocess_time(args, devices):
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu")
  argv = [a for a in sys.argv[1:] if not a.startswith(("--devices", "--dtype"))]
  return _child([*argv, "--dtype=float32"], env)[0]  # seconds of each step


def _runtime_args(args) -> dict:
  return dict(cpu_malloc=args.cpu_malloc, xla_cpu_flags=args.xla_cpu_flags,
              compilation_cache_dir=args.compilation_cache_dir,
              matmul_precision=args.matmul_precision)


def _fmt(x, spec):
  return "n/a" if x is None else format(x, spec)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--shape", default="minilm", choices=sorted(SHAPES))
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--dtype", default="float32,bfloat16",
                  help="comma-separated: float32, bfloat16")
  ap.add_argument("--head", default="poi", choices=["poi", "none"])
  ap.add_argument("--remat", default="none",
                  choices=["none", "full", "dots_saveable", "dots_with_no_batch_dims_saveable"])
  ap.add_argument("--scan", action="store_true", help="model.scan_layers")
  ap.add_argument("--attention", default="auto", choices=["auto", "xla", "explicit", "cudnn"])
  ap.add_argument("--no_torch", action="store_true", help="JAX rows only")
  ap.add_argument("--torch_compile", default="default",
                  help="comma-separated torch.compile modes for the compiled PyTorch rows "
                       "(default, reduce-overhead, max-autotune, ...; each with the fused "
                       "AdamW), or 'none' for the eager row alone")
  ap.add_argument("--profile_dir", default="",
                  help="also trace 3 JAX steps (each dtype, in a process of its own, GPU "
                       "command buffers off) into this directory (jax.profiler); "
                       "bench/step_profile.py DIR/<dtype> sums them by model part")
  ap.add_argument("--compile_only", action="store_true",
                  help="compile the JAX step and print its memory estimate (no run)")
  ap.add_argument("--devices", action="store_true",
                  help="CPU: also the JAX float32 step on 1 vs 8 simulated devices")
  # The engine's runtime settings (poi_jax/runtime.py, config.runtime); defaults = the engine's.
  ap.add_argument("--cpu_malloc", default="reuse", choices=["reuse", "system"])
  ap.add_argument("--xla_cpu_flags", default=None,
                  help="default: the engine's runtime.xla_cpu_flags")
  ap.add_argument("--compilation_cache_dir", default="")
  ap.add_argument("--matmul_precision", default="",
                  help="runtime.matmul_precision of the JAX rows (\"\": JAX's default); on a "
                       "CPU the bf16 group also gets a float32 row with bfloat16 matmuls")
  ap.add_argument("--compare_runtime", action="store_true",
                  help="CPU: also the JAX step with glibc's malloc defaults and no XLA CPU flags "
                       "(each JAX variant in its own process; PyTorch with glibc's defaults)")
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.xla_cpu_flags is None:
    from poi_jax import runtime
    args.xla_cpu_flags = runtime.defaults().xla_cpu_flags
  dtypes = args.dtype.split(",")
  if args.child:
    from poi_jax import runtime
    if args.profile_dir:  # a cached executable keeps the HLO names of whatever first compiled it
      args.compilation_cache_dir = "none"
    runtime.configure(_runtime_args(args))
    batch = make_batch(args.batch, args.seq)
    times, mem, warm, dispatch = jax_step(args, dtypes[0], batch)
    # The allocator's peak is this process's (the parent's JAX runs nothing): GPU/TPU only.
    import jax
    stats = getattr(jax.devices()[0], "memory_stats", lambda: None)() or {}
    peak = stats.get("peak_bytes_in_use")
    from poi_jax.layers import attention
    print(json.dumps({"step_s": times, "dispatch_s": dispatch, "memory_gb": mem, "warm_s": warm,
                      "peak_gb": None if peak is None else peak / 2**30,
                      "attention": attention.kernels_used()}))
    return
  import jax
  dev = jax.devices()[0]
  platform, kind = dev.platform, dev.device_kind
  print(f"# {' '.join(sys.argv)}")
  print(f"# {kind} ({platform}); POI-Net QA head={args.head}, {args.shape} encoder, batch "
        f"{args.batch} x {args.seq}, remat={args.remat}, scan={args.scan}, "
        f"attention={args.attention}; {args.steps} timed steps after one warm-up")
  if platform == "cpu":  # a CPU figure holds for the CPU it was taken on (issue 51)
    from poi_jax.layers import cpu_attention_choice
    print(f"# CPU: {cpu_attention_choice.cpu_identity()}; attention=auto's measured choices: "
          f"{cpu_attention_choice.cache_path()}")
  if args.compile_only:
    from poi_jax import runtime
    runtime.configure(_runtime_args(args))
    for dtype in dtypes:
      gb, secs = jax_compile_only(args, dtype)
      print(f"jax {dtype}: compiled step memory {_fmt(gb, '.2f')} GB (arguments + outputs + "
            f"temporaries; compiled in {secs:.0f} s)")
    return
  batch = make_batch(args.batch, args.seq)
  from bench.torch_device import torch_device as device_of
  torch_dev = device_of(platform)
  peak = _peak(kind) if platform != "cpu" else None
  flops = train_flops(args.shape, args.batch, args.seq)
  modes = [] if args.torch_compile == "none" else args.torch_compile.split(",")
  # rows: (name, seconds of each step, memory GB, warm-up s, dtype, host dispatch seconds of each
  # step or None); ran: the attention kernels of each JAX step, one line per dtype
  rows, peaks, ran = [], [], []
  for dtype in dtypes:
    short = 'bf16' if dtype == 'bfloat16' else 'f32'
    if not args.no_torch:
      t, mem, warm = torch_step(args, batch, torch_dev, autocast_bf16=dtype == "bfloat16")
      cast = "bf16 autocast" if dtype == "bfloat16" else "f32"
      rows.append((f"torch eager {cast}", t, mem, warm, dtype, None))
      for mode in modes:
        try:
          t, mem, warm = torch_step(args, batch, torch_dev, autocast_bf16=dtype == "bfloat16",
                                    compile_mode=mode)
        except Exception as e:  # pylint: disable=broad-except  # a mode this build lacks
          print(f"# torch.compile {mode} {short}: failed, no row ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:200] if str(e) else ''})")
          continue
        rows.append((f"torch.compile {mode} {short}", t, mem, warm, dtype, None))
    argv = [a for a in sys.argv[1:]
            if not a.startswith(("--dtype", "--compare_runtime", "--profile_dir"))]
    if args.compare_runtime and platform == "cpu":
      t, mem, _, warm, host, _ = _child([*argv, f"--dtype={dtype}", "--cpu_malloc=system",
                                         "--xla_cpu_flags="])
      rows.append((f"jax jit {short}, glibc malloc, no flags", t, mem, warm, dtype, host))
    t, mem, peak_jax, warm, host, kernels = _child([*argv, f"--dtype={dtype}"])
    rows.append((f"jax jit {short}", t, mem, warm, dtype, host))
    ran.append(f"{short} " + ", ".join(f"{k}: {v['kernel']} ({v['chosen_by']})"
                                      for k, v in kernels.items()))
    if dtype == "bfloat16" and platform == "cpu":
      # PyTorch's CPU autocast keeps float32 activations and runs the linear layers in
      # bfloat16; JAX's counterpart: float32 with bfloat16 matmul precision, which puts the
      # dense layers on the AMX kernel where the CPU has one (poi_jax/layers/matmul.py).
      t, mem, _, warm, host, _ = _child(
          [*[a for a in argv if not a.startswith("--matmul_precision")], "--dtype=float32",
           "--matmul_precision=bfloat16"])
      rows.append(("jax jit f32, bf16 matmuls", t, mem, warm, dtype, host))
    if peak_jax is not None:
      peaks.append(f"{short} {peak_jax:.2f} GB")
    if args.profile_dir:  # its own process: the timed one runs as a user's would
      _child([*argv, f"--dtype={dtype}", "--steps=1",
              f"--profile_dir={os.path.join(args.profile_dir, short)}"], _profile_env())
  if args.devices and platform == "cpu":
    for n in (1, 8):
      rows.append((f"jax jit f32, {n} simulated CPU dev", _subprocess_time(args, n), None, None,
                   "float32", None))
  print_table(rows, args, flops, peak)
  print(f"jax attention kernels (per traced problem; `auto` chooses per machine): {'; '.join(ran)}")
  if peaks:  # read in each JAX child: the parent process allocates nothing on the device
    print(f"jax allocator peak device memory (each step's own process): {', '.join(peaks)}")
  if peak:
    print(f"MFU: {flops / 1e12:.2f} TFLOP per step (matmuls) / time / {peak} TFLOP/s ({kind})")


def print_table(rows, args, flops, peak):
  """One line per row; every time is the median of the timed steps (each ends with a device
  sync), ``min-max`` their spread. ``host ms``: JAX only, the median time until the step's call
  returned (dispatch: Python, arguments, launching the kernels; n/a for PyTorch, whose call
  returns per op); a value near ms/step means the host, not the device, sets the pace.
  ``vs eager``: the PyTorch eager step's time in the same dtype over the row's; ``vs best
  torch``: the fastest PyTorch row (eager or compiled) in the same dtype over the row's, so a JAX
  row above 1.00 beats every PyTorch step measured; ``warm-up s``: the first steps with tracing
  and compilation (PyTorch: two steps; JAX: compile + one step)."""
  med = statistics.median
  eager = {d: med(t) for n, t, _, _, d, _ in rows if n.startswith("torch eager")}
  best = {}
  for n, t, _, _, d, _ in rows:
    if n.startswith("torch"):
      best[d] = min(best.get(d, float("inf")), med(t))
  header = (f"{'step':<36} {'ms/step':>9} {'min-max':>13} {'host ms':>8} {'examples/s':>11} "
            f"{'MFU':>6} {'mem GB':>7} {'warm-up s':>9} {'vs eager':>9} {'vs best torch':>14}")
  print(header)
  print("-" * len(header))
  for name, times, mem, warm, dtype, host in rows:
    t = med(times)
    spread = f"{1e3 * min(times):.1f}-{1e3 * max(times):.1f}"
    mfu = f"{100 * flops / t / (peak * 1e12):.1f}%" if peak else "n/a"
    vs_eager = f"{eager[dtype] / t:.2f}" if dtype in eager else "n/a"
    vs_best = f"{best[dtype] / t:.2f}" if dtype in best else "n/a"
    host_ms = _fmt(None if host is None else 1e3 * med(host), ".1f")
    print(f"{name:<36} {1e3 * t:>9.1f} {spread:>13} {host_ms:>8} {args.batch / t:>11.2f} "
          f"{mfu:>6} {_fmt(mem, '.2f'):>7} {_fmt(warm, '.1f'):>9} {vs_eager:>9} "
          f"{vs_best:>14}")


if __name__ == "__main__":
  main()
