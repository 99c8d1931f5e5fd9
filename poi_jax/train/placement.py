"""Host values <-> global (sharded) arrays, for one process or many.

Every process holds the same host values (same seed, same checkpoint, same features) and each
materialises only its own shards, which also works when the mesh spans processes (where
`jax.device_put` cannot target other hosts' devices).
"""
from __future__ import annotations

import jax
import numpy as np

from poi_jax.train import mesh as mesh_lib


def global_batch(local: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
  """This process's rows of a batch (leading axis) -> global arrays split over ``data x fsdp``."""
  return {k: jax.make_array_from_process_local_data(mesh_lib.batch_sharding(mesh, np.ndim(v)),
                                                    np.asarray(v))
          for k, v in local.items()}


def place(tree, shardings):
  """Host values -> global arrays with ``shardings`` (PRNG key arrays keep their key type)."""
  def one(x, sharding):
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      data = np.asarray(jax.random.key_data(x))
      arr = jax.make_array_from_callback(data.shape, sharding, lambda i: data[i])
      return jax.random.wrap_key_data(arr, impl=jax.random.key_impl(x))
    value = np.asarray(x)
    return jax.make_array_from_callback(value.shape, sharding, lambda i: value[i])
  return jax.tree.map(one, tree, shardings)


def to_host(tree):
  """Global arrays -> numpy on every process (gathers across processes when there are several).
  PRNG key arrays (replicated RNG state) stay JAX arrays: this process's copy."""
  def one(x):
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      return x.addressable_data(0)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils
      return multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(x)
  return jax.tree.map(one, tree)
