"""Host-side validation of model batches: a clear error naming the field and the row, raised
before any compute (and never a NaN or a silent clip inside the jitted step).

Models call `check_batch` when their inputs are concrete arrays; under `jax.jit` the inputs are
tracers and the engine calls it on each host batch instead (cheap numpy checks).
"""
from __future__ import annotations

from typing import Mapping

import jax
import numpy as np

NUM_POS_TAGS = 40  # 0 pad, 1..36 Penn tags, 37 special tokens, 38 other/empty, 39 spare


class BatchError(ValueError):
  """A batch that a model cannot take (names the field and the offending row)."""


def is_concrete(batch: Mapping[str, jax.Array]) -> bool:
  return not any(isinstance(v, jax.core.Tracer) for v in batch.values())


def _rows(bad: np.ndarray) -> str:
  idx = np.argwhere(bad)
  return ", ".join(str(tuple(int(i) for i in r)) if len(r) > 1 else str(int(r[0]))
                   for r in idx[:5]) + (" ..." if len(idx) > 5 else "")


def check_batch(batch: Mapping[str, jax.Array], *, token_fields=("input_ids", "attention_mask",
                "token_type_ids", "pos_tags"), require=("input_ids",)) -> None:
  """Checks shapes, domain boundaries and POS ids of an extractive ``(B, L)`` or multiple-choice
  ``(B, C, L)`` batch."""
  for name in require:
    if name not in batch:
      raise BatchError(f"batch has no field {name!r}")
  shape = np.shape(batch["input_ids"])
  for name in token_fields:
    if name in batch and np.shape(batch[name]) != shape:
      raise BatchError(f"field {name!r} has shape {np.shape(batch[name])}, input_ids has {shape}")
  length = shape[-1]
  lead = shape[:-1]
  if "pos_tags" in batch:
    tags = np.asarray(batch["pos_tags"])
    bad = ((tags < 0) | (tags >= NUM_POS_TAGS)).any(axis=-1)
    if bad.any():
      raise BatchError(f"field 'pos_tags' has ids outside 0..{NUM_POS_TAGS - 1} in row(s) "
                       f"{_rows(bad)}")
  if "con_start" in batch or "con_end" in batch:
    cs, ce = np.asarray(batch["con_start"]), np.asarray(batch["con_end"])
    for name, v in (("con_start", cs), ("con_end", ce)):
      if v.shape != lead:
        raise BatchError(f"field {name!r} has shape {v.shape}, expected {lead} (one per row)")
    for cond, msg in (
        (cs < 1, "con_start < 1 (the first domain [0, con_start) would be empty)"),
        (ce >= length, f"con_end >= sequence length {length}"),
        (ce < cs, "con_end < con_start (inverted domains)")):
      if cond.any():
        raise BatchError(f"fields 'con_start'/'con_end': {msg} in row(s) {_rows(cond)}")
  if "labels" in batch and len(shape) == 3:
    labels = np.asarray(batch["labels"])
    bad = (labels < 0) | (labels >= shape[1])
    if bad.any():
      raise BatchError(f"field 'labels' outside 0..{shape[1] - 1} in row(s) {_rows(bad)}")
