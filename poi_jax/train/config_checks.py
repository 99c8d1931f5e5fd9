"""Every numeric config field that has a domain, checked in one place before anything is built.

``check_config(config)`` raises `ConfigError` naming the field, its value and what it must be;
``check_workdir(workdir)`` says in one line why a workdir cannot be used;
``lift_variant_caps(config, ...)`` keeps a variant's data caps with the variant's own files. The
entry point calls them before reading data, compiling or writing anything.
"""
from __future__ import annotations

import os
from typing import Callable


class ConfigError(ValueError):
  """A config value outside its domain (the message names the field)."""


# field -> (test, what the value must be). Fields a config does not have are skipped (a task's
# own sections are checked by its model's constructor).
_RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    "optim.lr": (lambda v: v > 0, "> 0"),
    "optim.warmup_ratio": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "optim.warmup_steps": (lambda v: v >= -1 and v == int(v), "an integer >= 0 (-1: use warmup_ratio)"),
    "optim.weight_decay": (lambda v: v >= 0, ">= 0"),
    "optim.b1": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "optim.b2": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "optim.eps": (lambda v: v > 0, "> 0"),
    "optim.grad_clip": (lambda v: v >= 0, ">= 0 (0: no clipping)"),
    "optim.accum_steps": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "train.epochs": (lambda v: v >= 0, ">= 0"),
    "train.max_steps": (lambda v: v >= -1, ">= 1, or 0 / -1 (use train.epochs)"),
    "train.batch_size": (lambda v: v >= 1, ">= 1"),
    "train.eval_batch_size": (lambda v: v >= 1, ">= 1"),
    "train.log_every": (lambda v: v >= 1, ">= 1"),
    "train.eval_every": (lambda v: v == -1 or v >= 1, ">= 1, or -1 (each epoch)"),
    "train.save_every": (lambda v: v >= 1, ">= 1"),
    "train.steps_in_flight": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "train.keep_checkpoints": (lambda v: v >= 1, ">= 1"),
    "data.max_seq_length": (lambda v: v >= 8, ">= 8"),
    "data.doc_stride": (lambda v: v >= 1, ">= 1"),
    "data.max_query_length": (lambda v: v >= 1, ">= 1"),
    "data.num_workers": (lambda v: v >= 0, ">= 0 (0: featurise in this process)"),
    "data.records_per_shard": (lambda v: v >= 1, ">= 1"),
    "data.shard_bytes": (lambda v: v >= 1, ">= 1"),
    "data.bucket_window_batches": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "data.max_train_examples": (lambda v: v == -1 or v >= 1, ">= 1, or -1 (all)"),
    "data.max_eval_examples": (lambda v: v == -1 or v >= 1, ">= 1, or -1 (all)"),
    "eval.n_best_size": (lambda v: v >= 1, ">= 1"),
    "eval.max_answer_length": (lambda v: v >= 1, ">= 1"),
    "model.dropout": (lambda v: v < 0 or v < 1, "in [0, 1), or < 0 (the encoder's)"),
    "distributed.initialization_timeout_s": (lambda v: v >= 1, ">= 1"),
    "distributed.heartbeat_timeout_s": (lambda v: v >= 1, ">= 1"),
    "distributed.shutdown_timeout_s": (lambda v: v >= 1, ">= 1"),
    "distributed.watchdog_timeout_s": (lambda v: v >= 0, ">= 0 (0: no watchdog)"),
    "distributed.stuck_timeout_s": (lambda v: v >= 0, ">= 0 (0: no stuck-process check)"),
    "mesh.data": (lambda v: v == -1 or v >= 1, ">= 1, or -1 (the rest of the devices)"),
    "mesh.fsdp": (lambda v: v == -1 or v >= 1, ">= 1, or -1"),
    "mesh.tensor": (lambda v: v == -1 or v >= 1, ">= 1, or -1"),
}


def _get(config, dotted: str):
  node = config
  for part in dotted.split("."):
    if part not in node:
      return None
    node = node[part]
  return node


def check_config(config) -> None:
  """Raises `ConfigError` for the first field outside its domain (and for a run with nothing to
  train: ``train.max_steps`` <= 0 and ``train.epochs`` 0)."""
  for field, (ok, domain) in _RULES.items():
    value = _get(config, field)
    if value is None:
      continue
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise ConfigError(f"{field}={value!r} must be a number {domain}")
    if not ok(value):
      raise ConfigError(f"{field}={value!r} must be {domain}")
  watchdog = _get(config, "distributed.watchdog_timeout_s")
  heartbeat = _get(config, "distributed.heartbeat_timeout_s")
  if watchdog and heartbeat and watchdog >= heartbeat:
    raise ConfigError(f"distributed.watchdog_timeout_s={watchdog} must be below "
                      f"distributed.heartbeat_timeout_s={heartbeat}: JAX aborts a process "
                      f"that long after losing a peer, with a C++ log instead of one line")
  spec, length = _get(config, "data.length_buckets"), _get(config, "data.max_seq_length")
  if spec is not None and length is not None:
    from poi_jax.data import buckets
    try:
      buckets.resolve(spec, length)
    except (ValueError, TypeError, AttributeError) as e:
      raise ConfigError(str(e)) from None
  steps, epochs = _get(config, "train.max_steps"), _get(config, "train.epochs")
  if steps is not None and epochs is not None and steps <= 0 and epochs == 0:
    raise ConfigError(f"train.epochs=0 with train.max_steps={steps} trains nothing: set "
                      f"train.epochs > 0 or train.max_steps >= 1")


def check_workdir(workdir: str) -> None:
  """Raises `ConfigError` in one line when ``workdir`` cannot hold the run's files."""
  path = os.path.abspath(workdir)
  existing = path
  while not os.path.exists(existing):  # the deepest existing ancestor decides
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise ConfigError(f"--workdir={workdir}: {existing} is a file, not a directory")
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ConfigError(f"--workdir={workdir}: {existing} is not writable")


# The caps a variant sets for its own files (poi_jax/config/base.py: use_variant_data), by the split
# whose file they belong to, with the value that means "no cap".
VARIANT_CAPS = {
    "train": {"max_train_examples": -1},
    "eval": {"max_eval_examples": -1, "skip_eval_examples": 0},
}


def _same_file(a: str, b: str) -> bool:
  return a == b or (not a.startswith("tfds:") and not b.startswith("tfds:")
                    and os.path.realpath(a) == os.path.realpath(b))


def lift_variant_caps(config, overridden=(), mode: str = "train_and_eval") -> list[str]:
  """Lifts the caps a variant set for its own data when the run reads other files.

  A variant such as ``squad2.py:tiny`` caps and skips questions of its own file
  (``data.caps_train_file`` / ``data.caps_eval_file``); a user who points ``data.train_file`` or
  ``data.eval_file`` (``data.predict_file`` in predict mode) elsewhere asked for that file, so
  each such cap goes back to "all" unless ``overridden`` (the dotted names given on the command
  line, e.g. ``data.max_eval_examples``) names it. Changes ``config`` in place and returns one
  line per split said to the user before anything is read.
  """
  d = config.data
  if "caps_train_file" not in d:
    return []
  overridden = {name.removeprefix("config.") for name in overridden}
  reads = {"train": d.train_file,
           "eval": (d.predict_file or d.eval_file) if mode == "predict" else d.eval_file}
  notes = []
  for split, caps in VARIANT_CAPS.items():
    meant_for, source = d[f"caps_{split}_file"], reads[split]
    if not meant_for or _same_file(meant_for, source):
      continue
    lifted = {name: (d[name], off) for name, off in caps.items()
              if d[name] != off and f"data.{name}" not in overridden}
    for name, (_, off) in lifted.items():
      d[name] = off
    if lifted:
      notes.append(
          f"{split} data {source} is not the file the config's variant capped ({meant_for}): "
          + ", ".join(f"data.{n}={v} lifted to {off}" for n, (v, off) in lifted.items())
          + "; to keep " + ("it" if len(lifted) == 1 else "them") + ", pass "
          + " ".join(f"--config.data.{n}={v}" for n, (v, _) in lifted.items()))
  return notes
