"""Word and character ids of QANet's inputs (host side, NumPy): GloVe-format word vectors
(`read_glove`), lower-cased words -> ids (`WordIndexer`: the GloVe vocabulary or a stable hash),
and words -> byte ids between begin/end-of-word markers (`char_ids`, allennlp's ELMo-style
character ids)."""
from __future__ import annotations

import functools
import zlib

import numpy as np

NUM_CHARS = 262  # byte ids + 1 (0 = padding), 259 begin of word, 260 end of word
BOW, EOW = 259, 260
PAD_ID, OOV_ID = 0, 1


@functools.lru_cache(maxsize=2)
def read_glove(path: str, dim: int, max_words: int = -1) -> tuple[dict[str, int], np.ndarray]:
  """A GloVe-format text file (``word v1 .. v_dim`` per line) -> (word -> id, vectors
  ``(2 + n, dim)``); ids 0 (padding, zeros) and 1 (out of vocabulary, zeros) come first; later
  duplicates are ignored. A malformed line raises ``ValueError`` naming the file and the line."""
  vocab: dict[str, int] = {}
  rows = [np.zeros(dim, np.float32), np.zeros(dim, np.float32)]
  with open(path, encoding="utf-8") as f:
    for line_no, line in enumerate(f, 1):
      if 0 <= max_words <= len(vocab):
        break
      parts = line.rstrip("\n").rstrip(" ").split(" ")
      if len(parts) != dim + 1:
        raise ValueError(f"{path}:{line_no}: expected a word and {dim} numbers, got "
                         f"{len(parts) - 1} fields after the word (model.qanet.word_dim={dim})")
      try:
        vec = np.asarray(parts[1:], np.float32)
      except ValueError:
        raise ValueError(f"{path}:{line_no}: word {parts[0]!r}: a value is not a number") from None
      if parts[0] not in vocab:
        vocab[parts[0]] = len(rows)
        rows.append(vec)
  if not vocab:
    raise ValueError(f"{path}: no word vectors")
  return vocab, np.stack(rows)


class WordIndexer:
  """Lower-cased words -> ids: the GloVe vocabulary (unknown words -> 1) or, without a GloVe
  file, a stable hash into ``vocab_size - 2`` buckets (ids 2..), which needs no vocabulary pass
  over the data and keeps the model's size independent of the data."""

  def __init__(self, vocab_size: int, glove: dict[str, int] | None = None):
    self.vocab_size, self.glove = vocab_size, glove

  def __call__(self, word: str) -> int:
    w = word.lower()
    if self.glove is not None:
      return self.glove.get(w, OOV_ID)
    return 2 + zlib.crc32(w.encode("utf-8")) % (self.vocab_size - 2)


def char_ids(word: str, max_chars: int) -> list[int]:
  """``[BOW, byte+1 ..., EOW]`` cut to ``max_chars`` (the EOW kept), 0-padded."""
  body = [b + 1 for b in word.encode("utf-8")][:max_chars - 2]
  ids = [BOW] + body + [EOW]
  return ids + [0] * (max_chars - len(ids))
