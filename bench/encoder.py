r"""Flax encoder vs transformers' PyTorch model, side by side in one run.

  python bench/encoder.py                       # BERT-base and ALBERT-base, batch 8 x 384
  python bench/encoder.py --batch=2 --seq=128 --steps=3   # a quick look

Same config, random weights, same inputs; forward and forward+backward (gradient of the sum of
the last hidden state w.r.t. all parameters), examples/s and the ratio JAX / PyTorch (> 1: JAX
faster). float32 on CPU; on a GPU both run there (TF32 matmuls, JAX's float32 default), and JAX
also in bfloat16 compute (float32 parameters).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from bench.torch_device import torch_device  # noqa: E402
from poi_jax.models import encoders  # noqa: E402

SHAPES = {
    "minilm": dict(model_type="bert", vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                   num_attention_heads=12, intermediate_size=1536, hidden_act="gelu"),
    "bert-base": dict(model_type="bert", vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, hidden_act="gelu"),
    "albert-base": dict(model_type="albert", vocab_size=30000, embedding_size=128,
                        hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, hidden_act="gelu_new"),
}


def _time(fn, steps: int) -> float:
  fn()  # compile / warm up
  t0 = time.perf_counter()
  for _ in range(steps):
    fn()
  return (time.perf_counter() - t0) / steps


def bench_jax(shape: dict, ids, mask, steps: int, dtype: str, scan: bool):
  cfg = encoders.EncoderConfig(**shape, dtype=dtype, scan_layers=scan, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
  enc = encoders.build_encoder(cfg, rngs=nnx.Rngs(0))
  graphdef, params, rest = nnx.split(enc, nnx.Param, ...)
  ids, mask = jnp.asarray(ids), jnp.asarray(mask)

  def loss(p):
    out = nnx.merge(graphdef, p, rest)(ids, mask).last_hidden_state
    return jnp.sum(out.astype(jnp.float32))

  fwd = jax.jit(loss)
  bwd = jax.jit(jax.grad(loss))
  t_f = _time(lambda: jax.block_until_ready(fwd(params)), steps)
  t_b = _time(lambda: jax.block_until_ready(bwd(params)), steps)
  return t_f, t_b


def bench_torch(shape: dict, ids, mask, steps: int, device: str = "cpu"):
  """PyTorch eager on `device` (cuda: TF32 matmuls, as JAX's float32 default there)."""
  import torch
  import transformers

  from bench.torch_device import prepare
  sync = prepare(device)
  kind = shape["model_type"]
  kw = {k: v for k, v in shape.items() if k != "model_type"}
  cfg_cls = {"bert": transformers.BertConfig, "albert": transformers.AlbertConfig}[kind]
  model_cls = {"bert": transformers.BertModel, "albert": transformers.AlbertModel}[kind]
  model = model_cls(cfg_cls(**kw, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  model.to(device).eval()
  ids_t, mask_t = torch.tensor(ids, device=device), torch.tensor(mask, device=device)

  def fwd():
    with torch.no_grad():
      model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state.sum()
    sync()

  def bwd():
    model.zero_grad(set_to_none=True)
    model(input_ids=ids_t, attention_mask=mask_t).last_hidden_state.sum().backward()
    sync()

  return _time(fwd, steps), _time(bwd, steps)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=384)
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--models", default="bert-base,albert-base")
  ap.add_argument("--scan", action="store_true", help="JAX: run the layer stack with scan")
  # The engine's runtime settings (poi_jax/runtime.py): JAX runs in a child process that applies
  # them before its backend starts; PyTorch runs here, with glibc's malloc defaults.
  ap.add_argument("--cpu_malloc", default="reuse", choices=["reuse", "system"])
  ap.add_argument("--xla_cpu_flags", default=None,
                  help="default: the engine's runtime.xla_cpu_flags")
  ap.add_argument("--compare_runtime", action="store_true",
                  help="also JAX with glibc's malloc defaults and no XLA CPU flags")
  ap.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child:  # one JAX measurement: --child=<model>,<dtype>
    from poi_jax import runtime
    runtime.configure(dict(cpu_malloc=args.cpu_malloc, **(
        {} if args.xla_cpu_flags is None else {"xla_cpu_flags": args.xla_cpu_flags})))
    name, dtype = args.child.split(",")
    ids, mask = _inputs(SHAPES[name], args)
    print(json.dumps(bench_jax(SHAPES[name], ids, mask, args.steps, dtype, args.scan)))
    return
  platform = jax.devices()[0].platform
  print(f"# {' '.join(sys.argv)}  (jax on {platform}, batch {args.batch} x {args.seq}, "
        f"{args.steps} timed steps after one warm-up)")
  header = (f"{'model':<12} {'pass':<9} {'dtype':<9} {'jax ex/s':>10} {'torch ex/s':>11} "
            f"{'jax/torch':>10}")
  print(header)
  print("-" * len(header))
  for name in args.models.split(","):
    shape = SHAPES[name]
    ids, mask = _inputs(shape, args)
    t_tf, t_tb = bench_torch(shape, ids, mask, args.steps, torch_device(platform))
    dtypes = ["float32"] + (["bfloat16"] if platform == "gpu" else [])
    argv = [a for a in sys.argv[1:] if not a.startswith("--compare_runtime")]
    variants = [("", [])]
    if args.compare_runtime and platform == "cpu":
      variants.insert(0, (" (glibc malloc, no flags)", ["--cpu_malloc=system", "--xla_cpu_flags="]))
    for dtype in dtypes:
      for label, extra in variants:
        j_f, j_b = _child([*argv, *extra, f"--child={name},{dtype}"])
        for pass_name, jt, tt in (("fwd", j_f, t_tf), ("fwd+bwd", j_b, t_tb)):
          t_col = f"{args.batch / tt:>11.2f}" if dtype == "float32" else f"{'-':>11}"
          ratio = f"{tt / jt:>10.2f}" if dtype == "float32" else f"{'-':>10}"
          print(f"{name:<12} {pass_name:<9} {dtype:<9} {args.batch / jt:>10.2f} {t_col} {ratio}"
                f"{label}")


def _inputs(shape, args):
  rng = np.random.default_rng(0)
  ids = rng.integers(5, shape["vocab_size"], size=(args.batch, args.seq)).astype(np.int64)
  mask = np.ones_like(ids)
  mask[:, int(args.seq * 0.8):] = 0  # some padding, as real batches have
  return ids, mask


def _child(argv):
  """``(forward s, forward+backward s)`` of JAX in a fresh process (its own runtime settings)."""
  out = subprocess.run([sys.executable, os.path.abspath(__file__), *argv], capture_output=True,
                       text=True)
  if out.returncode:
    raise RuntimeError(f"JAX child {argv} failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
  main()
