"""What every task's features share: the `Features` container (the model's int32 arrays and the
decoding metadata) and the character-span trimming of tokenizer offsets."""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Features:
  """``arrays``: the model's inputs and labels (int32, first axis one row per window, question
  or segment; each builder's module docstring lists its keys and shapes); ``meta``: what
  decoding and reports need (offsets, ids, skipped records...)."""
  arrays: dict[str, np.ndarray]
  meta: dict


def trim_span(text: str, start: int, end: int) -> tuple[int, int]:
  """The span without surrounding whitespace: byte-level BPE tokenizers (RoBERTa) whose
  post-processor does not trim offsets include the space a ``Ġword`` token starts with."""
  while start < end and text[start].isspace():
    start += 1
  while end > start and text[end - 1].isspace():
    end -= 1
  return start, end
