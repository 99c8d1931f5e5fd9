"""Metrics to ``<workdir>/metrics.jsonl`` (one JSON object per line) and TensorBoard.

On resume (`MetricWriter.resume`), rows past the restored step (written by a run that died
before its next checkpoint) are dropped from ``metrics.jsonl`` and TensorBoard is told to purge
them, so the logged curve is the one the resumed run continues.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from poi_jax import faults
from poi_jax.io import default_mode


class MetricWriter:

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self._dir = workdir
    self._path = os.path.join(workdir, "metrics.jsonl")
    self._jsonl = None
    self._tb = None
    self._purge_step: int | None = None
    if enabled:
      os.makedirs(workdir, exist_ok=True)
      self._jsonl = open(self._path, "a")

  def resume(self, step: int) -> None:
    """Drops the rows after ``step`` (the restored checkpoint's) from ``metrics.jsonl``, and
    has TensorBoard discard its events from ``step + 1`` on."""
    if not self.enabled:
      return
    self._jsonl.close()
    with open(self._path) as f:
      lines = f.readlines()
    keep = [line for line in lines if (s := _step_of(line)) is not None and s <= step]
    if len(keep) != len(lines):
      fd, tmp = tempfile.mkstemp(dir=self._dir, prefix=".tmp-")
      with os.fdopen(fd, "w") as f:
        f.writelines(keep)
      os.chmod(tmp, default_mode())
      os.replace(tmp, self._path)
      self._purge_step = step + 1
    self._jsonl = open(self._path, "a")

  def _tensorboard(self):
    if self._tb is None:
      try:
        SummaryWriter = _summary_writer_class()
      except ImportError:  # TensorBoard is optional; metrics.jsonl always works
        self._tb = False
      else:
        self._tb = SummaryWriter(os.path.join(self._dir, "tensorboard"),
                                 purge_step=self._purge_step)
    return self._tb

  def write(self, step: int, **scalars) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), "time": time.time(), **{k: float(v) for k, v in scalars.items()}}
    try:
      self._jsonl.write(json.dumps(record) + "\n")
      self._jsonl.flush()
    except OSError as e:  # a full or failing disk: one line, the checkpoints stay
      raise faults.WriteFailed(
          f"could not write {self._path}: {faults.cause(e)}; the checkpoints are kept (a resume "
          f"drops a torn last row); free space, then run the same command to resume") from e
    tb = self._tensorboard()
    if tb:
      for k, v in scalars.items():
        tb.add_scalar(k, float(v), step)

  def close(self) -> None:
    if self._jsonl:
      self._jsonl.close()
    if self._tb:
      self._tb.close()


def _summary_writer_class():
  """tensorboardX's ``SummaryWriter``, imported without importing torch.

  tensorboardX's ``writer`` module imports torch at its top, where installed, only to accept
  torch tensors in ``add_*`` (2.6.5); that is 1.2-1.5 s of a training process's start on a CPU,
  for scalars that are Python floats here. Where torch is not loaded yet, its import is made to
  fail (a ``None`` entry in ``sys.modules``, the documented way to block one) while tensorboardX
  loads, and the entry is removed after, so a later ``import torch`` works as usual. Where torch
  is already loaded, nothing is hidden.
  """
  if "tensorboardX.writer" in sys.modules or "torch" in sys.modules:
    from tensorboardX import SummaryWriter
    return SummaryWriter
  sys.modules["torch"] = None
  try:
    from tensorboardX import SummaryWriter
  finally:
    if sys.modules.get("torch", 0) is None:
      del sys.modules["torch"]
  return SummaryWriter


def _step_of(line: str) -> int | None:
  try:
    return int(json.loads(line)["step"])
  except (ValueError, KeyError, TypeError):
    return None  # a torn last line of a killed run: dropped with the rows after the checkpoint
