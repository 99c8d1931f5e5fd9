"""Task registry: the config's ``task`` name -> `poi_jax.tasks.base.Task`.

Each system lives in its own module defining ``TASKS = {name: Task}``; modules are imported on
first use, so a task whose optional dependencies are missing does not break the others.
"""
from __future__ import annotations

import importlib

from poi_jax.tasks.base import Task, cap, local_path

# name -> module defining it.
REGISTRY = {
    "squad1": "poi_jax.tasks.squad",
    "squad2": "poi_jax.tasks.squad",
    "race": "poi_jax.tasks.choice",
    "dream": "poi_jax.tasks.choice",
    "nq": "poi_jax.tasks.nq",
    "newsqa": "poi_jax.tasks.qopn",
    "nlquad": "poi_jax.tasks.qopn",
    "narrativeqa": "poi_jax.tasks.narrativeqa",
}


def get_task(name: str) -> Task:
  if name not in REGISTRY:
    raise ValueError(f"unknown task {name!r}; known: {sorted(REGISTRY)}")
  try:
    module = importlib.import_module(REGISTRY[name])
  except ModuleNotFoundError as e:
    if e.name == REGISTRY[name]:
      raise ValueError(f"task {name!r} is not available in this version of poi-jax "
                       f"(module {REGISTRY[name]} is missing)") from None
    raise
  return module.TASKS[name]


def build_model(config, rngs):
  """The model ``config`` describes, with random weights."""
  return get_task(config.task).build_model(config, rngs)


def abstract_model(config):
  """The model with shape-only parameters (no memory, no compute): for parameter counts."""
  from flax import nnx
  return nnx.eval_shape(lambda: build_model(config, nnx.Rngs(0)))


__all__ = ["Task", "REGISTRY", "get_task", "build_model", "abstract_model", "cap", "local_path"]
