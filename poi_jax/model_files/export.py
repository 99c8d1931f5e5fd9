"""What `poi_jax.inference.reader.Reader` needs beside the HuggingFace files of
``<workdir>/export``, written by the engine with the export (`poi_jax.train.evaluate`).

The engine's export (`Task.export_pretrained`) is the fine-tuned *encoder* as a HuggingFace
directory (``config.json``, ``model.safetensors``, the tokenizer): `transformers.AutoModel` loads
it, but it lacks the head. `write` completes it, so that ``Reader.load(export)`` rebuilds the exact
model without the workdir, its checkpoints or the network:

* ``poi_jax_model.safetensors``: every parameter of the whole model (encoder, POS table,
  co-attention, output layer), named by its path in the model (``encoder.embeddings...``,
  ``qa_outputs.kernel``); transformers ignores the file.
* ``poi_jax_config.json``: the run's resolved config (``<workdir>/config.json``).
* ``reader.json``: ``{"step", "null_threshold", "null_threshold_source"}``: the checkpoint and the
  SQuAD 2.0 null threshold the Reader uses (see `null_threshold`).
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
from flax import nnx, traverse_util

from poi_jax.io import write_json_atomic

MODEL_FILE = "poi_jax_model.safetensors"
CONFIG_FILE = "poi_jax_config.json"
READER_FILE = "reader.json"
TUNED_KEY = "tuned_null_threshold"  # `poi_jax.eval.squad.tuned_null_threshold`'s key


def null_threshold(config: dict, scores: dict | None) -> tuple[float, str]:
  """The SQuAD 2.0 null-score-difference threshold δ for a checkpoint, and where it came from.

  δ tuned on the eval set at that checkpoint (``tuned_null_threshold`` of its evaluation, the
  paper's §2.4.2 protocol) when the checkpoint was evaluated; else the config's
  ``eval.null_score_diff_threshold`` (what the engine's ``predictions.json`` uses).
  """
  if scores and TUNED_KEY in scores:
    return float(scores[TUNED_KEY]), TUNED_KEY
  return float(config["eval"]["null_score_diff_threshold"]), "eval.null_score_diff_threshold"


def _flat(model: nnx.Module) -> dict[tuple, object]:
  return traverse_util.flatten_dict(nnx.to_pure_dict(nnx.state(model, nnx.Param)))


def _name(path: tuple) -> str:
  return ".".join(str(k) for k in path)


def model_tensors(model: nnx.Module) -> dict[str, np.ndarray]:
  """Every parameter of ``model`` as numpy, by its dotted path."""
  return {_name(p): np.ascontiguousarray(np.asarray(v)) for p, v in _flat(model).items()}


def load_tensors(model: nnx.Module, tensors: dict[str, np.ndarray], source: str) -> None:
  """Sets every parameter of ``model`` from ``tensors`` (`model_tensors`' names); a missing,
  extra or mis-shaped tensor is a ValueError naming ``source`` and the tensor."""
  flat = _flat(model)
  names = {_name(p): p for p in flat}
  missing, extra = sorted(set(names) - set(tensors)), sorted(set(tensors) - set(names))
  if missing or extra:
    raise ValueError(f"{source}: the model built from its config expects other tensors "
                     f"(missing {missing[:5]}, unexpected {extra[:5]})")
  for name, path in names.items():
    want = np.shape(flat[path])
    if tensors[name].shape != want:
      raise ValueError(f"{source}: tensor {name!r} has shape {tensors[name].shape}, the model "
                       f"expects {want}")
    flat[path] = tensors[name]
  state = nnx.state(model, nnx.Param)
  nnx.replace_by_pure_dict(state, traverse_util.unflatten_dict(flat))
  nnx.update(model, state)


def write(directory: str, model: nnx.Module, workdir: str, step: int | None,
          scores: dict | None) -> None:
  """Writes the three files above into ``directory`` (atomically, each), from the model the
  export holds, ``<workdir>/config.json`` and the evaluation ``scores`` of checkpoint ``step``.
  The engine calls it for the tasks the Reader serves (``Task.answers``)."""
  from safetensors.numpy import save_file
  with open(os.path.join(workdir, "config.json")) as f:
    config = json.load(f)
  tmp = os.path.join(directory, f".tmp-{MODEL_FILE}")
  save_file(model_tensors(model), tmp)
  os.replace(tmp, os.path.join(directory, MODEL_FILE))
  tmp = os.path.join(directory, f".tmp-{CONFIG_FILE}")
  shutil.copyfile(os.path.join(workdir, "config.json"), tmp)
  os.replace(tmp, os.path.join(directory, CONFIG_FILE))
  delta, source = null_threshold(config, scores)
  write_json_atomic(os.path.join(directory, READER_FILE),
                    {"step": step, "null_threshold": delta, "null_threshold_source": source})


def read(directory: str) -> tuple[dict, dict[str, np.ndarray], dict]:
  """``(config, tensors, reader settings)`` of an export directory; a missing file is a
  FileNotFoundError saying how to produce it."""
  from safetensors.numpy import load_file
  for name in (CONFIG_FILE, MODEL_FILE, READER_FILE):
    if not os.path.exists(os.path.join(directory, name)):
      raise FileNotFoundError(
          f"{directory} has no {name}: it is not a complete poi-jax export (exports written "
          f"before the Reader existed hold only the encoder; load the run's workdir instead)")
  with open(os.path.join(directory, CONFIG_FILE)) as f:
    config = json.load(f)
  with open(os.path.join(directory, READER_FILE)) as f:
    settings = json.load(f)
  return config, load_file(os.path.join(directory, MODEL_FILE)), settings
