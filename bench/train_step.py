r"""Training-step throughput: the JAX engine's step vs the same model in PyTorch eager, and the
JAX step on 1 vs 8 simulated devices, side by side in one run.

  python bench/train_step.py                      # MiniLM-shaped POI-Net (6 x 384), 8 x 256
  python bench/train_step.py --steps=3 --seq=128  # a quick look

Model: BERT encoder + POS table + the paper's co-attention (forgetting, 3 turns) + span head,
random weights, dropout off; one step = forward, backward, AdamW update (JAX: the engine's jitted
step with donated state, `poi_jax.train.step.create_sharded_state`; PyTorch: `bench/torch_poi.py`, eager,
`torch.optim.AdamW`). On a CPU the device comparison re-runs this script in subprocesses with
``--xla_force_host_platform_device_count`` (data-parallel mesh over the simulated devices; they
share the same cores, so this shows the sharding overhead, not a speed-up). On a GPU PyTorch runs
there too (TF32 matmuls, as JAX's float32 default there), both also in bfloat16 (PyTorch autocast;
JAX bfloat16 compute, float32 parameters), with the JAX bfloat16 step's model FLOPs utilisation.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPE = dict(model_type="bert", vocab_size=30522, hidden_size=384, num_hidden_layers=6,
             num_attention_heads=12, intermediate_size=1536, hidden_act="gelu",
             max_position_embeddings=512, type_vocab_size=2, hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0)
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def make_batch(batch, seq, seed=0):
  import numpy as np
  rng = np.random.default_rng(seed)
  q = seq // 8
  return {
      "input_ids": rng.integers(1000, SHAPE["vocab_size"], (batch, seq)).astype(np.int32),
      "attention_mask": np.ones((batch, seq), np.int32),
      "token_type_ids": np.concatenate([np.zeros((batch, q + 2)), np.ones((batch, seq - q - 2))],
                                       1).astype(np.int32),
      "pos_tags": rng.integers(1, 39, (batch, seq)).astype(np.int32),
      "con_start": np.full((batch,), q + 1, np.int32),
      "con_end": np.full((batch,), seq - 1, np.int32),
      "start_positions": rng.integers(q + 2, seq - 1, (batch,)).astype(np.int32),
      "end_positions": np.full((batch,), seq - 2, np.int32),
  }


def jax_step_time(batch_np, steps, dtype="float32", devices=None):
  import jax
  import numpy as np
  from flax import nnx
  from ml_collections import ConfigDict

  from configs import squad2
  from poi_jax import tasks
  from poi_jax.train import optim, placement
  from poi_jax.train import step as step_lib
  from poi_jax.train import mesh as mesh_lib

  config = squad2.get_config("tiny")
  with config.unlocked():
    config.model.encoder = ConfigDict(SHAPE)
    config.model.dtype = dtype
  mesh = mesh_lib.make_mesh(config.mesh)
  model = tasks.build_model(config, nnx.Rngs(0))
  tx, _ = optim.make_optimizer(config.optim, 1000)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  batch = dict(batch_np, example_mask=np.ones(len(batch_np["input_ids"]), np.float32))
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, optimizer, mesh, config.mesh.rules,
                          {k: v.ndim for k, v in batch_np.items()})
    gb = placement.global_batch(batch, mesh)

    def one():
      run.state, out = run.train_step(run.state, gb)
      jax.block_until_ready(out["loss"])

    one()  # compile
    t0 = time.perf_counter()
    for _ in range(steps):
      one()
    return (time.perf_counter() - t0) / steps


def torch_step_time(batch_np, steps, device="cpu", autocast_bf16=False):
  """PyTorch eager step time on `device` (cuda: TF32 matmuls, as JAX's float32 default there;
  `autocast_bf16`: bfloat16 autocast, float32 parameters)."""
  import contextlib

  import torch
  import transformers

  from bench.torch_device import prepare
  from bench.torch_poi import PoiNetQA
  torch.manual_seed(0)
  sync = prepare(device)
  kw = {k: v for k, v in SHAPE.items() if k != "model_type"}
  model = PoiNetQA(transformers.BertConfig(**kw)).to(device)
  opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
  batch = {k: torch.tensor(v, dtype=torch.long, device=device) for k, v in batch_np.items()}
  cast = (torch.autocast("cuda", dtype=torch.bfloat16) if autocast_bf16
          else contextlib.nullcontext())

  def one():
    opt.zero_grad(set_to_none=True)
    with cast:
      loss = model(batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sync()

  one()
  t0 = time.perf_counter()
  for _ in range(steps):
    one()
  return (time.perf_counter() - t0) / steps


def train_flops(batch, seq):
  """Model FLOPs of one training step (forward + backward = 3x forward), matmuls only."""
  d, f, n = SHAPE["hidden_size"], SHAPE["intermediate_size"], SHAPE["num_hidden_layers"]
  per_token_layer = 2 * (4 * d * d + 2 * d * f) + 2 * 2 * seq * d
  return 3 * batch * seq * n * per_token_layer


def _subprocess_time(args, devices):
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                        f"--batch={args.batch}", f"--seq={args.seq}", f"--steps={args.steps}"],
                       env=env, capture_output=True, text=True, check=True, cwd=ROOT)
  return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  batch = make_batch(args.batch, args.seq)
  if args.child:
    print(json.dumps({"seconds": jax_step_time(batch, args.steps)}))
    return
  import jax
  platform = jax.devices()[0].platform
  print(f"# {' '.join(sys.argv)}  (jax on {platform}; POI-Net QA, BERT 6x384, batch "
        f"{args.batch} x {args.seq}; {args.steps} timed steps after one warm-up)")
  rows = []
  from bench.torch_device import torch_device as device_of
  torch_device = device_of(platform)  # PyTorch on the device JAX runs on
  t_torch = torch_step_time(batch, args.steps, torch_device)
  t_jax = jax_step_time(batch, args.steps)
  rows.append((f"torch eager, 1 device ({torch_device})", t_torch, "1.00"))
  rows.append(("jax jit, 1 device", t_jax, f"{t_torch / t_jax:.2f}"))
  if platform == "cpu":
    t1 = _subprocess_time(args, 1)
    t8 = _subprocess_time(args, 8)
    rows.append(("jax jit, 1 simulated CPU device", t1, f"{t_torch / t1:.2f}"))
    rows.append(("jax jit, 8 simulated CPU devices", t8, f"{t_torch / t8:.2f}"))
  else:
    t_tbf = torch_step_time(batch, args.steps, torch_device, autocast_bf16=True)
    rows.append(("torch eager bf16 autocast, 1 device", t_tbf, f"{t_torch / t_tbf:.2f}"))
    t_bf = jax_step_time(batch, args.steps, dtype="bfloat16")
    rows.append(("jax jit bf16, 1 device", t_bf, f"{t_torch / t_bf:.2f}"))
  header = f"{'step':<34} {'ms/step':>9} {'examples/s':>11} {'speed vs torch':>15}"
  print(header)
  print("-" * len(header))
  for name, t, ratio in rows:
    print(f"{name:<34} {1e3 * t:>9.1f} {args.batch / t:>11.2f} {ratio:>15}")
  if platform == "gpu":
    kind = jax.devices()[0].device_kind
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in kind), None)
    if peak:
      mfu = train_flops(args.batch, args.seq) / rows[-1][1] / (peak * 1e12)
      print(f"bf16 MFU on {kind}: {100 * mfu:.1f}% (matmul FLOPs / peak {peak} TFLOP/s)")


if __name__ == "__main__":
  main()
