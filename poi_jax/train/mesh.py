"""Device mesh from the config (``mesh.data`` x ``mesh.fsdp`` x ``mesh.tensor``).

Today the engine is data-parallel: parameters are replicated and the batch is split over
``data`` x ``fsdp``. Sharding parameters by the logical-axis rules (``mesh.rules``; every
parameter already carries its logical names) is the next step of the engine issue.
"""
from __future__ import annotations

import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tensor")


class MeshError(ValueError):
  pass


def mesh_shape(mesh_cfg: ml_collections.ConfigDict, n_devices: int) -> tuple[int, int, int]:
  """``(data, fsdp, tensor)`` with at most one ``-1`` meaning "the rest"; product = devices."""
  sizes = [int(mesh_cfg.data), int(mesh_cfg.fsdp), int(mesh_cfg.tensor)]
  if sizes.count(-1) > 1:
    raise MeshError(f"mesh {sizes}: at most one axis may be -1")
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


def batch_sharding(mesh, ndim: int) -> NamedSharding:
  return NamedSharding(mesh, P(("data", "fsdp"), *([None] * (ndim - 1))))
