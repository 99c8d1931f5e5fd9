r"""What a run needs, before renting it: a config's training step compiled for a mesh (no step is
run), its per-device memory, FLOPs and collectives, and a roofline projection of a step and of the
whole paper run on named hardware.

  python bench/sizing.py --config=configs/squad2.py:minilm --mesh=1,8,1
  python bench/sizing.py --config=configs/squad2.py --mesh=1,8,1 --batch=24 --seq=512
  python bench/sizing.py --config=configs/race.py:duma --topology=v5e:4x4     # the TPU compiler
  python bench/sizing.py --config=configs/race.py --topology=v5e:4x4 --config.model.remat=full

Without ``--topology``: ``--mesh``'s product of simulated CPU devices (``XLA_FLAGS`` set before
JAX starts); the projection is a roofline for each accelerator of `poi_jax.sizing.HARDWARE`
(a CPU compile picks CPU kernels: the GPU's cuDNN attention would hold less memory). With
``--topology`` (needs ``pip install ".[tpu-plan]"``, i.e. ``libtpu``): the slice's devices, the
real TPU compiler; ``--mesh`` defaults to ``1,<chips>,1``. The library is
`poi_jax.sizing` (and `poi_jax.sizing.hlo_stats` for the HLO reading); this is its CLI.

FLOPs: ``cost`` is ``Compiled.cost_analysis()`` raw (a loop body counted once); ``hlo`` counts
every dot/convolution times its loops' trip counts (the figure the projection uses); ``6NT`` is
(6 x matmul parameters + 12 x layers x seq x hidden) x tokens per device.

Any other config field is set the way ``python -m poi_jax.main`` sets it:
``--config.model.remat=full``, ``--config.model.attention=xla`` (applied after ``--batch``,
``--seq``, ``--dtype``; the value is read as the field's type).
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Training examples per epoch of each paper task (their train splits' questions; NQ: windows
# kept after null down-sampling, BERT-joint's ~500k: an approximation).
PAPER_EXAMPLES = {"squad2": 130_319, "squad1": 87_599, "race": 87_866, "dream": 6_116,
                  "newsqa": 92_549, "nlquad": 78_130, "nq": 500_000}
# ALLOW_MULTIPLE_LIBTPU_LOAD: two planning processes at once (else libtpu's lockfile aborts one).
_TPU_NOISE = dict(TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1",
                  TPU_WORKER_HOSTNAMES="localhost",
                  TPU_ACCELERATOR_TYPE="v5litepod-1", TF_CPP_MIN_LOG_LEVEL="3",
                  GRPC_VERBOSITY="ERROR")


def load_config(spec: str):
  """``configs/<task>.py[:variant,...]`` -> the locked ConfigDict."""
  path, _, arg = spec.partition(":")
  mod_spec = importlib.util.spec_from_file_location("sizing_config_module",
                                                    os.path.join(ROOT, path) if not
                                                    os.path.isabs(path) else path)
  module = importlib.util.module_from_spec(mod_spec)
  mod_spec.loader.exec_module(module)
  return module.get_config(arg or None)


def apply_overrides(config, overrides: list[str]):
  """Sets each ``--config.a.b=value`` of ``overrides`` on ``config``, ``value`` read as the
  field's current type (bool: true/false; a tuple or list: a Python literal); an unknown field
  or an unreadable value is an error naming it."""
  for item in overrides:
    if not item.startswith("--config.") or "=" not in item:
      raise SystemExit(f"sizing.py: unrecognized argument {item!r} (expected --config.FIELD=VALUE)")
    key, _, text = item[len("--config."):].partition("=")
    *parents, leaf = key.split(".")
    node = config
    for name in parents:
      if name not in node:
        raise SystemExit(f"sizing.py: --config.{key}: the config has no field {name!r}")
      node = node[name]
    if leaf not in node:
      raise SystemExit(f"sizing.py: --config.{key}: the config has no field {leaf!r}")
    current = node[leaf]
    try:
      if isinstance(current, bool):
        if text.lower() not in ("true", "false", "1", "0"):
          raise ValueError("expected true or false")
        value = text.lower() in ("true", "1")
      elif isinstance(current, (int, float)):
        value = int(text) if type(current) is int else float(text)
      elif isinstance(current, (tuple, list)):
        value = type(current)(ast.literal_eval(text))
      else:
        value = text
    except (ValueError, SyntaxError) as e:
      raise SystemExit(f"sizing.py: --config.{key}={text}: not a {type(current).__name__} ({e})")
    node[leaf] = value
  return config


def _gb(x):
  return "n/a" if x is None else f"{x / 2**30:.2f}"


def _e(x):
  return "n/a" if x is None else f"{x:.3g}"


def _loops(loops) -> str:
  counts = {}
  for _, trip in loops:
    counts[trip] = counts.get(trip, 0) + 1
  return ", ".join(f"{t} x{n}" for t, n in sorted(counts.items(), key=lambda x: -x[1])) or "none"


def report(size, config, args) -> str:
  from poi_jax import sizing
  lines = []
  add = lines.append
  m = size.memory
  add(f"# {size.devices} x {size.device_kind}, mesh data x fsdp x tensor = "
      f"{'x'.join(map(str, size.mesh))}; {config.task} {config.model.head} on "
      f"{size.encoder['model_type']} {size.encoder['layers']}L/{size.encoder['hidden']}; "
      f"batch {size.batch['input_ids'][0]} {config.model.dtype}; attention={size.attention}; "
      f"compiled in {size.compile_seconds:.1f} s"
      + (f"; each device is one of a chip's {size.cores_per_chip} TensorCores"
         if size.cores_per_chip > 1 else ""))
  add(f"{'per device, per step':<44} {'value':>14}")
  add("-" * 59)
  rows = [
      ("parameters (model, all devices)", f"{size.params:,}"),
      ("params + optimizer state, GiB", _gb(size.state_bytes)),
      ("  (whole state, GiB)", _gb(size.state_bytes_total)),
      ("compiled arguments, GiB", _gb(m.get("argument"))),
      ("compiled temporaries (activations), GiB", _gb(m.get("temp"))),
      ("compiled total (args+out+temp-alias), GiB", _gb(m.get("total"))),
      ("FLOPs, cost_analysis (loop bodies once)", _e(size.cost_flops)),
      ("FLOPs, HLO matmuls x loop trip counts", _e(size.hlo.matmul_flops)),
      ("FLOPs, 6NT estimate", _e(size.estimate_flops)),
      ("  hlo / 6NT", f"{size.hlo.matmul_flops / size.estimate_flops:.2f}"),
      ("while loops: trip count x loops", _loops(size.hlo.loops)),
  ]
  if size.cost_optimal_seconds is not None:
    rows.append(("compiler's optimal_seconds (raw)", _e(size.cost_optimal_seconds)))
  coll = size.hlo.collectives
  for kind in sorted(coll.bytes):
    rows.append((f"{kind}: ops, MiB (buffer) / MiB (ring)",
                 f"{coll.count[kind]:.0f}, {coll.bytes[kind] / 2**20:.1f} / "
                 f"{coll.wire[kind] / 2**20:.1f}"))
  rows.append(("replicated params > 1M elements", str(len(size.large_replicated))))
  for name, value in rows:
    add(f"{name:<44} {value:>14}")
  for name in size.large_replicated:
    add(f"  replicated: {name}")
  examples = args.examples or PAPER_EXAMPLES.get(config.task, 0)
  steps = sizing.run_steps(config, examples) if examples else 0
  add("")
  add(f"projection: roofline at MFU {args.mfu:.0%}, collectives overlapped; run = "
      f"{config.train.epochs:g} epochs x {examples:,} examples / batch "
      f"{config.train.batch_size} = {steps:,} steps")
  hdr = (f"{'hardware':<8} {'compute ms':>10} {'HBM ms':>8} {'collect. ms':>11} {'step ms':>9} "
         f"{'run h':>8} {'mem GiB':>8} {'fits':>5}")
  add(hdr)
  add("-" * len(hdr))
  names = args.hardware.split(",") if args.hardware else list(sizing.HARDWARE)
  if args.topology and not args.hardware:
    names = [sizing.TPU_KINDS.get(size.device_kind, "v5e")]
  for name in names:
    p = sizing.project(size, sizing.HARDWARE[name], args.mfu)
    add(f"{p.hardware.name:<8} {1e3 * p.compute_s:>10.3g} {1e3 * p.hbm_s:>8.3g} {1e3 * p.comm_s:>11.3g} "
        f"{1e3 * p.step_s:>9.3g} {steps * p.step_s / 3600:>8.3g} {p.memory / 2**30:>8.2f} "
        f"{'yes' if p.fits else 'NO':>5}")
  add("sources: " + "; ".join(f"{n}: {sizing.HARDWARE[n].source}" for n in names))
  return "\n".join(lines)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--config", required=True, help="configs/<task>.py[:variant,...]")
  ap.add_argument("--mesh", default="", help="DATA,FSDP,TENSOR (default: 1,<devices>,1)")
  ap.add_argument("--topology", default="", help="a TPU slice, e.g. v5e:4x4, v4:2x2x2")
  ap.add_argument("--batch", type=int, default=0, help="global batch (default: the config's)")
  ap.add_argument("--seq", type=int, default=0, help="sequence length (default: the config's)")
  ap.add_argument("--dtype", default="", help="model.dtype (default: the config's)")
  ap.add_argument("--init_from", default="",
                  help="another encoder: a name of sizing.PAPER_ENCODERS (e.g. "
                       "google-bert/bert-large-uncased) or minilm")
  ap.add_argument("--dropout", type=float, default=-1.0, help="model.dropout (< 0: config's)")
  ap.add_argument("--mfu", type=float, default=0.4, help="assumed model FLOPs utilisation")
  ap.add_argument("--examples", type=int, default=0, help="training examples per epoch")
  ap.add_argument("--hardware", default="", help="comma-separated names of HARDWARE")
  args, overrides = ap.parse_known_args()
  if args.topology:
    for k, v in _TPU_NOISE.items():
      os.environ.setdefault(k, v)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
  else:
    if not args.mesh:
      ap.error("--mesh=DATA,FSDP,TENSOR is needed without --topology")
    n = 1
    for x in args.mesh.split(","):
      n *= int(x)
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={n}").strip()
  from poi_jax import sizing  # JAX starts here, after XLA_FLAGS
  devices = sizing.tpu_devices(args.topology) if args.topology else None
  mesh = ([int(x) for x in args.mesh.split(",")] if args.mesh
          else [1, len(devices), 1])
  config = load_config(args.config)
  if args.init_from:
    with config.unlocked():
      config.model.init_from = args.init_from
  config = sizing.sizing_config(config, mesh, batch=args.batch, seq=args.seq)
  if args.dtype:
    config.model.dtype = args.dtype
  if args.dropout >= 0:
    config.model.dropout = args.dropout
  apply_overrides(config, overrides)
  size = sizing.size_step(config, devices)
  print(f"# python bench/sizing.py {' '.join(sys.argv[1:])}")
  print(report(size, config, args))


if __name__ == "__main__":
  main()
