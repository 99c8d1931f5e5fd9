"""One training step of the tiny SQuAD model on each given mesh; run as a script by
`test_sharding.py` in a subprocess with simulated CPU devices (one process for the meshes of one
device count: the count is fixed when JAX starts, and a process's start costs more than a step).

  python tests/train/mesh_step.py OUT_DIR DATA,FSDP,TENSOR [DATA,FSDP,TENSOR ...]

writes ``OUT_DIR/m<DATA><FSDP><TENSOR>.npz`` for each mesh.
"""
import os
import sys

import numpy as np


def main(data, fsdp, tensor, out_path):
  import jax
  from flax import nnx

  from configs import squad2
  from poi_jax import tasks
  from poi_jax.train import optim, placement
  from poi_jax.train import step as step_lib

  config = squad2.get_config("tiny")
  with config.unlocked():
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = data, fsdp, tensor
    # The same attention kernel on every mesh: `auto` takes the native kernel on one CPU device
    # and `explicit_vjp` on several, and their attention-dropout bits differ.
    config.model.attention = "explicit_vjp"
    config.train.batch_size = 8
    config.model.encoder.hidden_size = 64
    config.model.encoder.num_attention_heads = 4
    # lr > 0 at the first step (the tiny config warms up from 0: its first step would not move
    # the parameters, and equal parameters across meshes would prove nothing)
    config.optim.warmup_steps = 0
  from poi_jax.train import mesh as mesh_lib
  mesh = mesh_lib.make_mesh(config.mesh)
  model = tasks.build_model(config, nnx.Rngs(0))
  tx, schedule = optim.make_optimizer(config.optim, 10)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  rng = np.random.default_rng(0)
  b, l = 8, 32
  batch = {
      "input_ids": rng.integers(1, 1000, (b, l)).astype(np.int32),
      "attention_mask": np.ones((b, l), np.int32),
      "token_type_ids": np.concatenate([np.zeros((b, 10)), np.ones((b, l - 10))], 1)
                          .astype(np.int32),
      "pos_tags": rng.integers(1, 39, (b, l)).astype(np.int32),
      "con_start": np.full((b,), 9, np.int32),
      "con_end": np.full((b,), l - 1, np.int32),
      "start_positions": rng.integers(10, l - 1, (b,)).astype(np.int32),
      "end_positions": rng.integers(10, l - 1, (b,)).astype(np.int32),
      "example_mask": np.ones((b,), np.float32),
  }
  batch["end_positions"] = np.maximum(batch["start_positions"], batch["end_positions"])
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, optimizer, mesh, config.mesh.rules,
                          {k: v.ndim for k, v in batch.items() if k != "example_mask"})
    before = _leaves(run.state)
    run.state, out = run.train_step(run.state, placement.global_batch(batch, mesh))
  params = {}
  specs = {}
  for path, x in jax.tree_util.tree_leaves_with_path(run.state):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      continue
    name = jax.tree_util.keystr(path)
    params[name] = np.asarray(x)
    specs[name] = str(tuple(x.sharding.spec))
  np.savez(out_path, loss=np.asarray(out["loss"]), lr0=np.asarray(schedule(0)),
           names=np.array(sorted(params)), specs=np.array([specs[k] for k in sorted(params)]),
           **{f"p{i}": params[k] for i, k in enumerate(sorted(params))},
           **{f"b{i}": before[k] for i, k in enumerate(sorted(params))})


def _leaves(state) -> dict:
  """``{key path: numpy copy}`` of every array of the train state (PRNG keys left out)."""
  import jax
  return {jax.tree_util.keystr(path): np.array(x)
          for path, x in jax.tree_util.tree_leaves_with_path(state)
          if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)}


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  for shape in sys.argv[2:]:
    data, fsdp, tensor = map(int, shape.split(","))
    main(data, fsdp, tensor, os.path.join(sys.argv[1], f"m{data}{fsdp}{tensor}.npz"))
