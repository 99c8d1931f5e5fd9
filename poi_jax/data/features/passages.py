"""Per-text analysis for featurising questions about passages a reader has seen before: the NLTK
tags of a text and, per character, what the extractive featurizer looks up for each sub-token
(where its span starts and ends once surrounding whitespace is trimmed, and the tag of the word
covering its first character), so that a window's trimming and POS tags are array lookups
instead of a Python loop per token. `PassageCache`: a bounded LRU of these analyses keyed by
the passage's text, since reading apps (and SQuAD: ~5 questions a paragraph) ask several
questions about one passage.

The lookups are the same functions of the text as `poi_jax.data.features.base.trim_span` and
`poi_jax.data.features.pos_tags.offset_tags` (the ``offsets`` alignment), so the features equal
the per-token path's exactly (tests/data/test_passage_cache.py compares them on the SQuAD
sample with two tokenizers).
"""
from __future__ import annotations

import collections
import dataclasses
import threading

import numpy as np

from poi_jax.data import pos as pos_lib
from poi_jax.data.features import pos_tags


@dataclasses.dataclass(frozen=True)
class TextAnalysis:
  """One text's NLTK tags and its per-character lookups (``n = len(text)``): ``next_solid (n+1,)``
  the first non-space index at or after each position (``n`` if none); ``last_end (n+1,)`` the
  largest ``k <=`` each position with ``k == 0`` or ``text[k-1]`` not a space; ``char_tag``
  the tag id of the NLTK word whose span covers each character (`pos.OTHER_ID` elsewhere)."""
  text: str
  word_tags: tuple
  next_solid: np.ndarray
  last_end: np.ndarray
  char_tag: np.ndarray

  def trim(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`trim_span` of every ``(start, end)`` span (int arrays of one shape)."""
    s = np.minimum(self.next_solid[starts], ends)
    return s, np.maximum(self.last_end[ends], s)

  def tags(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """`offset_tags` of trimmed spans: the tag of the word covering each span's first character
    (`pos.OTHER_ID` for empty spans and characters outside every word)."""
    idx = np.minimum(starts, len(self.char_tag) - 1)
    return np.where(ends > starts, self.char_tag[idx], pos_lib.OTHER_ID).astype(np.int32)


def analyse(text: str, *, lowercase: bool = False, with_pos: bool = True) -> TextAnalysis:
  """The `TextAnalysis` of ``text`` (``with_pos=False``: no NLTK tagging, no tags)."""
  n = len(text)
  solid = np.fromiter((not ch.isspace() for ch in text), bool, n)
  at = np.arange(n + 1)
  nxt = np.where(np.append(solid, True), at, n)
  next_solid = np.minimum.accumulate(nxt[::-1])[::-1]
  last_end = np.maximum.accumulate(np.where(np.insert(solid, 0, True), at, 0))
  word_tags: tuple = ()
  # Word spans are found in text.lower(), whose length can differ from the text's (a few
  # Unicode capitals lower to two characters): the lookup covers both.
  char_tag = np.full(max(n, len(text.lower())) + 1, pos_lib.OTHER_ID, np.int8)
  if with_pos:
    # Uncached tagging: this analysis is what a cache keeps (PassageCache); the tagger's own
    # process-wide cache would hold every text a server ever saw.
    word_tags = pos_lib.tag_words.__wrapped__(text, lowercase=lowercase)
    for a, b, tag, _ in pos_tags._word_spans.__wrapped__(text, word_tags)[1]:
      char_tag[a:b] = pos_lib.tag_id(tag)
  # int32: a passage's analysis stays ~9 bytes a character.
  return TextAnalysis(text, word_tags, next_solid.astype(np.int32), last_end.astype(np.int32),
                      char_tag)


class PassageCache:
  """At most ``size`` passage analyses, least recently used out first (``size=0``: none kept,
  every passage analysed anew). Keyed by the text and the tagging options. ``hits``/``misses``
  count lookups. Thread-safe (a server's featurizer thread and its tests may share one)."""

  def __init__(self, size: int):
    if size < 0:
      raise ValueError(f"passage cache size {size} must be >= 0")
    self.size, self.hits, self.misses = size, 0, 0
    self._items: collections.OrderedDict = collections.OrderedDict()
    self._lock = threading.Lock()

  def __len__(self) -> int:
    return len(self._items)

  def get(self, text: str, *, lowercase: bool = False, with_pos: bool = True) -> TextAnalysis:
    key = (text, lowercase, with_pos)
    with self._lock:
      found = self._items.get(key)
      if found is not None:
        self._items.move_to_end(key)
        self.hits += 1
        return found
      self.misses += 1
    found = analyse(text, lowercase=lowercase, with_pos=with_pos)
    if self.size:
      with self._lock:
        self._items[key] = found
        while len(self._items) > self.size:
          self._items.popitem(last=False)
    return found
