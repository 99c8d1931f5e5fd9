"""Task registry: the config's ``task`` name -> `poi_jax.tasks.base.Task`.

A system registers in one place: its module in this package defines ``TASKS = {name: Task}``
(e.g. `poi_jax.tasks.squad`). The registry finds those modules itself, importing them on first
use, so a task whose optional dependencies are missing does not break the others: asking for it
names the module and the missing dependency.

A task outside the package (your own system, kept in your own code): name its module in
``POI_JAX_TASK_MODULES`` (comma-separated importable modules, each defining ``TASKS``); the
engine, the Reader and the CLIs then find it as they find the built-in ones, no list edited.
"""
from __future__ import annotations

import importlib
import os
import pkgutil

from poi_jax.tasks.base import Evaluator, Task, cap, local_path, uses_pos

# Modules of this package that define no task.
_NOT_TASKS = frozenset({"base"})
MODULES_ENV = "POI_JAX_TASK_MODULES"  # extra modules defining TASKS, comma-separated
_registry: dict[str, Task] | None = None
_unavailable: dict[str, str] = {}  # module -> why it could not be imported


def _discover() -> dict[str, Task]:
  global _registry
  if _registry is None:
    found: dict[str, Task] = {}
    modules = [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__)
               if info.name not in _NOT_TASKS and not info.name.startswith("_")]
    extra = [m.strip() for m in os.environ.get(MODULES_ENV, "").split(",") if m.strip()]
    for name in modules + extra:
      try:
        module = importlib.import_module(name)
      except ImportError as e:  # an optional dependency of that system is missing
        if name in extra and getattr(e, "name", None) == name:
          raise ImportError(f"{MODULES_ENV} names {name!r}, which cannot be imported: {e}") from e
        _unavailable[name] = str(e)
        continue
      for task_name, task in getattr(module, "TASKS", {}).items():
        if task_name in found:
          raise RuntimeError(f"task {task_name!r} is defined twice ({name} and another module)")
        found[task_name] = task
    _registry = found
  return _registry


def names() -> list[str]:
  """Every available task name."""
  return sorted(_discover())


def get_task(name: str) -> Task:
  registry = _discover()
  if name not in registry:
    why = "".join(f"; {m} could not be imported ({e})" for m, e in _unavailable.items())
    raise ValueError(f"unknown task {name!r}; known: {sorted(registry)}{why}")
  return registry[name]


def build_model(config, rngs):
  """The model ``config`` describes, with random weights."""
  return get_task(config.task).build_model(config, rngs)


def abstract_model(config):
  """The model with shape-only parameters (no memory, no compute): for parameter counts."""
  from flax import nnx
  return nnx.eval_shape(lambda: build_model(config, nnx.Rngs(0)))


__all__ = ["Evaluator", "Task", "names", "get_task", "build_model", "abstract_model", "cap",
           "local_path", "uses_pos"]
