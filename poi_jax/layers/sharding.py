"""Logical axis names -> mesh placement, for parameters and activations.

One vocabulary of logical names for the whole package: ``batch``, ``length`` (sequence),
``vocab``, ``embed`` (model width), ``mlp`` (feed-forward width), ``heads`` (the heads x head_dim
projection width), ``kv``, ``layers`` (the stacked axis of scanned layers). ``mesh.rules`` in the
config maps each to mesh axes (or None = replicated).

Parameters carry their names as metadata (`poi_jax.layers.common`) and the engine places the
whole state at once (`poi_jax.train.mesh.state_shardings`). Activations are constrained by name
after each sublayer with `constrain`, as MaxText does: the engine traces its steps inside
`axis_rules(mesh, rules)`, and outside it (or on one device) `constrain` is the identity, so the
modules run unchanged in tests, notebooks and parity checks.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Sequence

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

_active = threading.local()


class MeshError(ValueError):
  pass


def rules_dict(rules: Sequence) -> dict[str, tuple[str, ...]]:
  """``((name, axes), ...)`` with axes None, a mesh axis or a tuple -> ``{name: tuple}``."""
  out = {}
  for name, axes in rules:
    if axes is None:
      out[name] = ()
    elif isinstance(axes, str):
      out[name] = (axes,)
    else:
      out[name] = tuple(axes)
    for a in out[name]:
      if a not in MESH_AXES:
        raise MeshError(f"mesh.rules: logical axis {name!r} maps to unknown mesh axis {a!r} "
                        f"(mesh axes: {MESH_AXES})")
  return out


def logical_to_mesh(logical: Sequence[str | None], shape: Sequence[int], mesh,
                    rules: Sequence) -> P:
  """The `PartitionSpec` of an array with logical axis names ``logical`` and ``shape``.

  A dimension is sharded only when its size is divisible by the product of its mesh axes (of
  size > 1), and a mesh axis is used at most once per array (first come, first served);
  otherwise that dimension stays replicated.
  """
  table = rules_dict(rules)
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


@contextlib.contextmanager
def axis_rules(mesh, rules: Sequence):
  """Within this context (while tracing a step) `constrain` places activations on ``mesh``
  (``mesh`` None: a no-op context)."""
  if mesh is None:
    yield
    return
  rules_dict(rules)  # validate before tracing
  previous = getattr(_active, "value", None)
  _active.value = (mesh, tuple(rules))
  try:
    yield
  finally:
    _active.value = previous


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
  """``x`` with a sharding constraint from its logical axis ``names`` (one per dimension);
  the identity outside `axis_rules` or on a one-device mesh."""
  active = getattr(_active, "value", None)
  if active is None:
    return x
  mesh, rules = active
  if mesh.size == 1:
    return x
  if len(names) != x.ndim:
    raise ValueError(f"constrain: {len(names)} names {tuple(names)} for an array of shape "
                     f"{x.shape}")
  spec = logical_to_mesh(names, x.shape, mesh, rules)
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


# Logical names of the encoders' activations.
BLD = ("batch", "length", "embed")  # the residual stream (B, L, D)
BLH = ("batch", "length", "heads")  # q, k, v and the attention context (B, L, H*Dh)
BLM = ("batch", "length", "mlp")  # the feed-forward hidden layer (B, L, I)
