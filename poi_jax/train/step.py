"""The jitted steps: a pure train step and a predict step over the sharded model + optimizer.

Both take the whole state of ``(model, optimizer)`` as one pytree with one set of shardings, so
that the loop and the checkpointer handle a single object. The train step donates it.

That state is *pure* (`nnx.as_pure`: the arrays of ``nnx.split``'s state, without their
``Variable`` wrappers; `nnx.merge` takes it as it is): a jitted call flattens its arguments and
unflattens its outputs in Python, and a state of ``Variable`` objects costs about 1.8 ms of host
time a step for MiniLM POI-Net's 323 arrays against 0.07 ms for the pure one (2-core AMD EPYC),
host time that sets the pace of a small model's GPU step. The logical axis names the shardings
come from are read once, from the ``Variable`` state, before it is made pure.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import optax
from flax import nnx

from poi_jax import runtime
from poi_jax.layers import sharding
from poi_jax.train import mesh as mesh_lib
from poi_jax.train import placement


def train_step(graphdef, state, batch, *, mesh=None, rules=()):
  """One optimizer update: ``state`` = pure nnx state of (model, optimizer); ``batch`` holds the
  model's arrays plus ``example_mask``. Returns the new (pure) state and ``{"loss",
  "grad_norm"}`` (scalars). Dropout keys come from the RNG state inside the model, so the step is
  a pure function. Activations are constrained by the logical ``rules`` on ``mesh``
  (`poi_jax.layers.sharding`)."""
  model, optimizer = nnx.merge(graphdef, state)

  def loss_fn(m):
    with sharding.axis_rules(mesh, rules):  # activations placed by the rules
      return m.loss(batch, m(batch, deterministic=False))

  loss, grads = nnx.value_and_grad(loss_fn)(model)
  optimizer.update(model, grads)
  return (nnx.as_pure(nnx.state((model, optimizer))),
          {"loss": loss, "grad_norm": optax.tree.norm(grads)})


def predict_step(graphdef, state, batch, *, mesh=None, rules=()):
  """The model's outputs (dict of arrays, leading axis = batch) in inference mode."""
  model, _ = nnx.merge(graphdef, state)
  with sharding.axis_rules(mesh, rules):
    return model(batch, deterministic=True)


@dataclasses.dataclass
class ShardedState:
  """The model + optimizer state placed on the mesh, and the steps compiled for it.

  ``train_step(state, batch) -> (state, metrics)`` (state donated);
  ``predict_step(state, batch) -> outputs``. ``state`` and ``shardings`` are pure (module
  docstring); ``nnx.merge(graphdef, state)`` gives the model and optimizer."""
  graphdef: Any
  state: nnx.State
  shardings: Any
  mesh: Any
  train_step: Callable
  predict_step: Callable


def jit_steps(graphdef, shardings, mesh, rules, batch_ndims: dict[str, int]):
  """``(train_step, predict_step)`` jitted for state ``shardings`` on ``mesh`` (compiled on first
  use; ``.lower(nnx.as_pure(state), ...)`` works on abstract state too, e.g. for a memory
  estimate). Both take and the train step returns the pure state (module docstring)."""
  rules = tuple(rules)
  shardings = nnx.as_pure(shardings)
  batch_sh = {k: mesh_lib.batch_sharding(mesh, nd)
              for k, nd in dict(batch_ndims, example_mask=1).items()}
  train = jax.jit(functools.partial(train_step, graphdef, mesh=mesh, rules=rules),
                  in_shardings=(shardings, batch_sh), out_shardings=(shardings, None),
                  donate_argnums=0)
  # Forward-only: on a CPU without XLA's YNNPACK fusions (poi_jax/runtime.py: 1.2-1.3x faster);
  # the train step keeps XLA's defaults.
  predict = jax.jit(functools.partial(predict_step, graphdef, mesh=mesh, rules=rules),
                    in_shardings=(shardings, None),
                    compiler_options=runtime.forward_compiler_options(_platform(mesh)))
  return train, predict


def _platform(mesh) -> str | None:
  """The platform of ``mesh``'s devices (None for a mesh without devices)."""
  devices = getattr(mesh, "devices", None)
  return getattr(devices.flat[0], "platform", None) if getattr(devices, "size", 0) else None


def create_sharded_state(model: nnx.Module, optimizer: nnx.Optimizer, mesh, rules,
                         batch_ndims: dict[str, int], *,
                         require_sharded_params: bool = False) -> ShardedState:
  """Places model + optimizer state on ``mesh`` by the logical ``rules`` and jits the train and
  predict steps with explicit shardings (activations constrained by the same rules).
  ``batch_ndims``: the model's batch arrays and their ranks (``example_mask`` is added). A large
  parameter left replicated on an fsdp / tensor mesh warns, or fails with
  ``require_sharded_params`` (`poi_jax.train.mesh.check_sharded`)."""
  graphdef, state = nnx.split((model, optimizer))
  shardings = mesh_lib.state_shardings(state, mesh, rules)  # from the Variables' axis names
  mesh_lib.check_sharded(state, shardings, mesh, require=require_sharded_params)
  train, predict = jit_steps(graphdef, shardings, mesh, rules, batch_ndims)
  shardings = nnx.as_pure(shardings)
  return ShardedState(graphdef, placement.place(nnx.as_pure(state), shardings), shardings, mesh,
                      train, predict)
