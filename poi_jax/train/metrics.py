"""Metrics to ``<workdir>/metrics.jsonl`` (one JSON object per line) and TensorBoard."""
from __future__ import annotations

import json
import os
import time


class MetricWriter:

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled
    self._jsonl = None
    self._tb = None
    if enabled:
      os.makedirs(workdir, exist_ok=True)
      self._jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a")
      try:
        from tensorboardX import SummaryWriter
        self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))
      except ImportError:  # TensorBoard is optional; metrics.jsonl always works
        self._tb = None

  def write(self, step: int, **scalars) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), "time": time.time(), **{k: float(v) for k, v in scalars.items()}}
    self._jsonl.write(json.dumps(record) + "\n")
    self._jsonl.flush()
    if self._tb is not None:
      for k, v in scalars.items():
        self._tb.add_scalar(k, float(v), step)

  def close(self) -> None:
    if self._jsonl:
      self._jsonl.close()
    if self._tb is not None:
      self._tb.close()
