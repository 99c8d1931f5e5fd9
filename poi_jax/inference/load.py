"""Loading a trained model for `poi_jax.inference.reader.Reader`: from a workdir (the model's
values at a checkpoint step, without the optimizer state) or from a self-sufficient ``export/`` directory,
with the config adjusted for reading (no feature cache, no worker processes, the encoder and
tokenizer from the export where the config names a hub checkpoint)."""
from __future__ import annotations

import json
import os

import jax
import ml_collections
import numpy as np
from flax import nnx

from poi_jax import tasks
from poi_jax.model_files import export as export_files



def _is_export(path: str) -> bool:
  # model.safetensors: an encoder-only export (refused by export_files.read, saying why).
  return any(os.path.exists(os.path.join(path, f))
             for f in (export_files.CONFIG_FILE, "model.safetensors"))


def _has_tokenizer(directory: str) -> bool:
  return any(os.path.exists(os.path.join(directory, f))
             for f in ("tokenizer.json", "tokenizer_config.json"))


def readable_tasks() -> tuple[str, ...]:
  """The registered tasks the Reader serves (``Task.answers`` set), sorted."""
  return tuple(sorted(name for name in tasks.names() if tasks.get_task(name).answers))


def _point_at_export(config: ml_collections.ConfigDict, export_dir: str) -> None:
  """The encoder architecture and tokenizer from ``export_dir`` where the config names a hub or
  package checkpoint, so that loading needs no network and no other files."""
  if config.model.init_from and os.path.exists(os.path.join(export_dir, "config.json")):
    config.model.init_from = export_dir
  if _has_tokenizer(export_dir):
    config.model.tokenizer = export_dir


def _for_reading(config_dict: dict, path: str) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(config_dict)
  readable = readable_tasks()
  if config.task not in readable:
    raise ValueError(f"{path}: task {config.task!r}; the Reader reads {', '.join(readable)} "
                     f"(the tasks whose Task.answers is set)")
  config.data.cache_dir = ""  # each call is new text: nothing to reuse
  config.data.num_workers = 0  # a few questions: workers would cost more than they save
  return config


def _build(config, task) -> nnx.Module:
  # The logical axis names stay metadata: one device, nothing to shard. One jitted
  # initialisation instead of one compiled initializer per parameter (seconds saved on a CPU).
  with nnx.use_eager_sharding(False):
    return nnx.jit(lambda: task.build_model(config, nnx.Rngs(config.seed)))()


def _restore_model_only(checkpointer, step: int, model: nnx.Module) -> nnx.Module:
  """``model`` with its values at ``step``, read from the engine's checkpoint of (model,
  optimizer) without building or reading the optimizer state (AdamW's two moments would double
  the parameters' memory and the restore's reads). The checkpoint's ``state`` item is the pure
  dict of ``nnx.split((model, optimizer))``: key 0 is the model's state; orbax's partial restore
  reads that subtree only."""
  import orbax.checkpoint as ocp
  graphdef, state = nnx.split(model)
  template = nnx.to_pure_dict(state)
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), template)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])  # one device: nothing to shard
  restore_args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(dtype=x.dtype, sharding=device),
                              abstract)
  out = checkpointer.manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.PyTreeRestore({0: abstract}, restore_args={0: restore_args},
                                   partial_restore=True)))
  nnx.replace_by_pure_dict(state, out.state[0])
  return nnx.merge(graphdef, state)


def _from_workdir(path: str, step: int | None):
  from poi_jax.model_files import checkpoint as ckpt_lib
  with open(os.path.join(path, "config.json")) as f:
    raw = json.load(f)
  config = _for_reading(raw, path)
  _point_at_export(config, os.path.join(path, "export"))
  task = tasks.get_task(config.task)
  model = _build(config, task)
  checkpointer = ckpt_lib.Checkpointer(path, keep=config.train.keep_checkpoints,
                                       best_metric=config.train.best_metric or task.metric,
                                       higher_is_better=task.higher_is_better)
  try:
    if step is None:
      step = checkpointer.best_step()
      step = checkpointer.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"{path} has no checkpoint: train first (--mode=train)")
    model = _restore_model_only(checkpointer, step, model)
    scores = checkpointer.manager.metrics(step)
  finally:
    checkpointer.close()
  delta, _ = export_files.null_threshold(raw, scores)
  return config, task, model, step, delta


def _from_export(path: str):
  raw, tensors, settings = export_files.read(path)
  config = _for_reading(raw, path)
  _point_at_export(config, path)
  task = tasks.get_task(config.task)
  model = _build(config, task)
  export_files.load_tensors(model, tensors, os.path.join(path, export_files.MODEL_FILE))
  return config, task, model, settings.get("step"), float(settings["null_threshold"])


def saved_runtime(path: str) -> dict | None:
  """The ``runtime`` section of the run's saved config, if it has one and it can be read."""
  for name in (export_files.CONFIG_FILE, "config.json"):
    try:
      with open(os.path.join(path, name)) as f:
        return json.load(f).get("runtime")
    except (OSError, ValueError, AttributeError):
      continue
  return None




def load_model(path: str, step: int | None):
  """``(config, task, model, step, null_threshold)`` of the workdir or export at ``path``."""
  if _is_export(path):
    return _from_export(path)
  if os.path.exists(os.path.join(path, "config.json")):
    return _from_workdir(path, step)
  raise FileNotFoundError(f"{path} is neither a poi-jax workdir (config.json, checkpoints/) "
                          f"nor a complete export ({export_files.CONFIG_FILE})")
