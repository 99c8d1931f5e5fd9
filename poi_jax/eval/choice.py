"""Multiple-choice accuracy (RACE: also per high/middle level)."""
from __future__ import annotations

import numpy as np


def choice_accuracy(logits: np.ndarray, labels: np.ndarray, levels=None) -> dict[str, float]:
  """``logits (N, C)``, ``labels (N,)`` -> ``{"accuracy", "total"}`` (+ ``accuracy_<level>``)."""
  return accuracy(np.asarray(logits).argmax(-1) == np.asarray(labels), levels)


def accuracy(correct, levels=None) -> dict[str, float]:
  """`choice_accuracy` from whether each question was answered right (``(N,)`` bool) and its
  level: what a streamed evaluation keeps of each question."""
  correct = np.asarray(correct, bool)
  out = {"accuracy": 100.0 * float(correct.mean()), "total": int(correct.size)}
  if levels is not None:
    levels = np.asarray(levels)
    for lv in sorted(set(levels) - {""}):
      sel = levels == lv
      out[f"accuracy_{lv}"] = 100.0 * float(correct[sel].mean())
      out[f"total_{lv}"] = int(sel.sum())
  return out
