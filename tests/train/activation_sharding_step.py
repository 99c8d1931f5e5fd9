"""Lowers and compiles the tiny SQuAD train step on a (1, 4, 2) mesh of 8 simulated CPU devices;
run as a script by `test_activation_sharding.py` (the device count is fixed when JAX starts).

  python tests/train/activation_sharding_step.py OUT.json
"""
import json
import sys


def main(out_path):
  import jax
  import numpy as np
  from flax import nnx

  from configs import squad2
  from poi_jax import tasks
  from poi_jax.train import optim, placement
  from poi_jax.train import step as step_lib
  from poi_jax.train import mesh as mesh_lib

  config = squad2.get_config("tiny")
  with config.unlocked():
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 1, 4, 2
  mesh = mesh_lib.make_mesh(config.mesh)
  model = tasks.build_model(config, nnx.Rngs(0))
  tx, _ = optim.make_optimizer(config.optim, 10)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  b, l = 8, 32
  batch = {
      "input_ids": np.ones((b, l), np.int32), "attention_mask": np.ones((b, l), np.int32),
      "token_type_ids": np.zeros((b, l), np.int32), "pos_tags": np.ones((b, l), np.int32),
      "con_start": np.full((b,), 9, np.int32), "con_end": np.full((b,), l - 1, np.int32),
      "start_positions": np.full((b,), 10, np.int32),
      "end_positions": np.full((b,), 12, np.int32)}
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, optimizer, mesh, config.mesh.rules,
                          {k: v.ndim for k, v in batch.items()})
    gb = placement.global_batch(dict(batch, example_mask=np.ones((b,), np.float32)), mesh)
    lowered = run.train_step.lower(run.state, gb)
    compiled = lowered.compile()
    run.state, out = compiled(run.state, gb)
  specs = {jax.tree_util.keystr(p): str(tuple(x.sharding.spec))
           for p, x in jax.tree_util.tree_leaves_with_path(run.state)
           if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)}
  # A replicated 2M-element parameter on this mesh: a warning, or an error when required.
  big = {"w": jax.ShapeDtypeStruct((2048, 1024), np.float32)}
  rep = {"w": jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())}
  warned = mesh_lib.check_sharded(big, rep, mesh)
  try:
    mesh_lib.check_sharded(big, rep, mesh, require=True)
    raised = ""
  except mesh_lib.MeshError as e:
    raised = str(e)
  with open(out_path, "w") as f:
    json.dump({"lowered": lowered.as_text(), "compiled": compiled.as_text(), "specs": specs,
               "loss": float(out["loss"]), "warned": warned, "raised": raised,
               "model_warned": mesh_lib.check_sharded(run.state, run.shardings, mesh)}, f)


if __name__ == "__main__":
  main(sys.argv[1])
