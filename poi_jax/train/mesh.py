"""Device mesh and shardings from the config.

The mesh is ``mesh.data`` x ``mesh.fsdp`` x ``mesh.tensor`` (product = device count, one ``-1``
for "the rest"), built with `jax.make_mesh` and set with `jax.set_mesh` by the engine.

Every parameter carries logical axis names (``poi_jax.layers.common``: ``vocab``, ``embed``,
``mlp``, ``heads``, ``kv``, ``layers``, ...). ``mesh.rules`` maps each logical name to mesh axes
(or None = replicated); `state_shardings` turns the names of a whole ``nnx.State`` (model and
optimizer: optax moments inherit their parameter's names) into `NamedSharding`s. A dimension is
sharded only when its size is divisible by the product of its mesh axes, and a mesh axis is used
at most once per array; otherwise that dimension stays replicated (e.g. a 30522-row vocabulary on
``tensor=4``). The batch is split over ``data`` x ``fsdp``.
"""
from __future__ import annotations

from typing import Any, Sequence

import jax
import ml_collections
from absl import logging
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

# The rules' machinery is shared with the activation constraints of the layers.
from poi_jax.layers.sharding import (  # noqa: F401
    MESH_AXES, MeshError, logical_to_mesh, rules_dict)

AXES = MESH_AXES
BATCH_AXES = ("data", "fsdp")


def mesh_shape(mesh_cfg: ml_collections.ConfigDict, n_devices: int) -> tuple[int, int, int]:
  """``(data, fsdp, tensor)`` with at most one ``-1`` meaning "the rest"; product = devices."""
  sizes = [int(mesh_cfg.data), int(mesh_cfg.fsdp), int(mesh_cfg.tensor)]
  if sizes.count(-1) > 1:
    raise MeshError(f"mesh {sizes}: at most one axis may be -1")
  if any(s == 0 or s < -1 for s in sizes):
    raise MeshError(f"mesh {sizes}: sizes must be positive or -1")
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if n_devices % known:
      raise MeshError(f"mesh {sizes}: {n_devices} devices are not divisible by {known}")
    sizes[sizes.index(-1)] = n_devices // known
  if int(np.prod(sizes)) != n_devices:
    raise MeshError(f"mesh data={sizes[0]} x fsdp={sizes[1]} x tensor={sizes[2]} = "
                    f"{int(np.prod(sizes))} devices, but {n_devices} are available")
  return tuple(sizes)


def make_mesh(mesh_cfg: ml_collections.ConfigDict) -> jax.sharding.Mesh:
  shape = mesh_shape(mesh_cfg, jax.device_count())
  return jax.make_mesh(shape, AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3)


def data_parallel_size(mesh) -> int:
  return int(np.prod([mesh.shape[a] for a in BATCH_AXES]))


def batch_sharding(mesh, ndim: int) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES, *([None] * (ndim - 1))))


def state_shardings(state: nnx.State, mesh, rules: Sequence) -> Any:
  """`NamedSharding` for every array of ``state`` (same tree), from its logical axis names."""
  logical = nnx.get_partition_spec(state)

  def one(spec, x):
    names = tuple(spec) if isinstance(spec, P) else ()
    names = names + (None,) * (np.ndim(x) - len(names))
    return NamedSharding(mesh, logical_to_mesh(names, np.shape(x), mesh, rules))

  return jax.tree.map(one, logical, state,
                      is_leaf=lambda x: isinstance(x, P))


# A parameter this large left whole on every device of a sharded mesh wastes memory.
LARGE_PARAM = 1 << 20


def check_sharded(state: nnx.State, shardings: Any, mesh, *, require: bool = False,
                  min_size: int = LARGE_PARAM) -> list[str]:
  """Names of arrays over ``min_size`` elements left replicated on a mesh with ``fsdp`` or
  ``tensor`` > 1 (MaxText's ``assert_params_sufficiently_sharded``): logged as a warning, or a
  `MeshError` when ``require`` (config ``mesh.require_sharded_params``). Causes: a logical name
  the rules map to None, or sizes not divisible by the mesh axes."""
  if mesh.shape["fsdp"] * mesh.shape["tensor"] == 1:
    return []
  leaves = jax.tree_util.tree_leaves_with_path(state)
  shards = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, NamedSharding))
  bad = [f"{jax.tree_util.keystr(path)} {tuple(np.shape(x))}"
         for (path, x), sh in zip(leaves, shards)
         if np.size(x) > min_size and sh.is_fully_replicated]
  if bad:
    msg = (f"{len(bad)} arrays over {min_size} elements are replicated on mesh "
           f"{dict(mesh.shape)} (check mesh.rules): " + "; ".join(bad))
    if require:
      raise MeshError(msg)
    logging.warning(msg)
  return bad
