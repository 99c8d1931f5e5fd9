"""Child of test_fsdp_bytes.py (8 simulated CPU devices, set before JAX starts): the abstract
train state (model + AdamW) of a POI-Net config at an encoder shape, its shardings on a
``fsdp=8`` mesh, and per-device bytes; prints one JSON line. Nothing is allocated or compiled.

  python tests/train/fsdp_bytes.py SHAPE      # SHAPE: a bench/train_step.py shape name
"""
import json
import sys

import jax
import numpy as np
from flax import nnx
from ml_collections import ConfigDict

from bench.train_step import SHAPES
from configs import squad2
from poi_jax import tasks
from poi_jax.train import mesh as mesh_lib
from poi_jax.train import optim


def main(shape: str) -> None:
  config = squad2.get_config("tiny")
  with config.unlocked():
    config.model.encoder = ConfigDict(SHAPES[shape])
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 1, 8, 1
  mesh = mesh_lib.make_mesh(config.mesh)

  def make():
    model = tasks.build_model(config, nnx.Rngs(0))
    tx, _ = optim.make_optimizer(config.optim, 1000)
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

  model, optimizer = nnx.eval_shape(make)
  with jax.set_mesh(mesh):
    _, state = nnx.split((model, optimizer))
    shardings = mesh_lib.state_shardings(state, mesh, config.mesh.rules)
  leaves = jax.tree_util.tree_leaves_with_path(state)
  shards = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.NamedSharding))
  total = per_device = replicated_small = 0
  large_replicated = []
  for (path, x), sh in zip(leaves, shards):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      continue  # the dropout RNG's key: a few bytes, no numpy dtype
    full = int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
    local = int(np.prod(sh.shard_shape(x.shape))) * np.dtype(x.dtype).itemsize
    total += full
    per_device += local
    if sh.is_fully_replicated:
      if np.prod(x.shape) > mesh_lib.LARGE_PARAM:
        large_replicated.append(f"{jax.tree_util.keystr(path)} {tuple(x.shape)}")
      else:
        replicated_small += full
  print(json.dumps({"total": total, "per_device": per_device, "replicated_small": replicated_small,
                    "large_replicated": large_replicated, "devices": len(jax.devices())}))


if __name__ == "__main__":
  main(sys.argv[1])
