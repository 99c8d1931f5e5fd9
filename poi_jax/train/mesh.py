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
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


class MeshError(ValueError):
  pass


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


def _rules_dict(rules: Sequence) -> dict[str, tuple[str, ...]]:
  out = {}
  for name, axes in rules:
    if axes is None:
      out[name] = ()
    elif isinstance(axes, str):
      out[name] = (axes,)
    else:
      out[name] = tuple(axes)
    for a in out[name]:
      if a not in AXES:
        raise MeshError(f"mesh.rules: logical axis {name!r} maps to unknown mesh axis {a!r} "
                        f"(mesh axes: {AXES})")
  return out


def logical_to_mesh(logical: Sequence[str | None], shape: Sequence[int], mesh,
                    rules: Sequence) -> P:
  """The `PartitionSpec` of an array with logical axis names ``logical`` and ``shape``."""
  table = _rules_dict(rules)
  used: set[str] = set()
  spec = []
  for name, size in zip(logical, shape):
    axes = tuple(a for a in table.get(name, ()) if a not in used and mesh.shape[a] > 1) \
        if name is not None else ()
    n = int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
    if not axes or size % n:
      spec.append(None)
      continue
    used.update(axes)
    spec.append(axes[0] if len(axes) == 1 else axes)
  return P(*spec)


def state_shardings(state: nnx.State, mesh, rules: Sequence) -> Any:
  """`NamedSharding` for every array of ``state`` (same tree), from its logical axis names."""
  logical = nnx.get_partition_spec(state)

  def one(spec, x):
    names = tuple(spec) if isinstance(spec, P) else ()
    names = names + (None,) * (np.ndim(x) - len(names))
    return NamedSharding(mesh, logical_to_mesh(names, np.shape(x), mesh, rules))

  return jax.tree.map(one, logical, state,
                      is_leaf=lambda x: isinstance(x, P))
