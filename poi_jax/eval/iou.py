"""NLQuAD's position-sensitive span metrics: IoU, precision and recall over word positions.

The official NLQuAD script was not available; as its paper describes, a span is the set of word
positions of the document it covers and ``IoU = |pred & gold| / |pred | gold|`` (precision =
``|pred & gold| / |pred|``, recall = ``|pred & gold| / |gold|``), averaged over questions (x100).
Words are whitespace-separated tokens of the article (an assumption: the spec asks to confirm the
official tokenisation before claiming parity); a span covers a word when they share a character.
With several gold spans the best IoU is taken (NLQuAD has one per question).
"""
from __future__ import annotations

import bisect
import re

from poi_jax.eval import squad

_WORD = re.compile(r"\S+")


class WordIndex:
  """Whitespace words of one article and the character -> word lookup."""

  def __init__(self, text: str):
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    self.starts = [s for s, _ in spans]
    self.ends = [e for _, e in spans]

  def words(self, start: int, end: int) -> set[int]:
    """Indices of the words sharing a character with ``[start, end)``."""
    if end <= start:
      return set()
    first = bisect.bisect_right(self.ends, start)  # first word ending after start
    last = bisect.bisect_left(self.starts, end) - 1  # last word starting before end
    return set(range(first, last + 1)) if last >= first else set()


def span_scores(pred: set[int], gold: set[int]) -> tuple[float, float, float]:
  """``(iou, precision, recall)`` of two word-position sets (both empty: 1, 1, 1)."""
  if not pred and not gold:
    return 1.0, 1.0, 1.0
  inter = len(pred & gold)
  union = len(pred | gold)
  return (inter / union, inter / len(pred) if pred else 0.0, inter / len(gold) if gold else 0.0)


def evaluate_spans(examples, predictions: dict[str, tuple[int, int]]) -> dict[str, float]:
  """EM/F1 (SQuAD v1.1 rules, max over the gold answers) and IoU/precision/recall (best-IoU gold)
  of character-span predictions ``qid -> (start, end)``; a missing prediction scores 0."""
  scores = SpanScores()
  scores.add(examples, predictions)
  return scores.result()


class SpanScores:
  """`evaluate_spans` over a split given a chunk of questions at a time (``add``): it keeps five
  running sums and a count, added in the examples' order (so the floats equal the whole
  split's)."""

  def __init__(self):
    self.totals = dict(exact_match=0.0, f1=0.0, iou=0.0, precision=0.0, recall=0.0)
    self.count = 0

  def add(self, examples, predictions: dict[str, tuple[int, int]]) -> None:
    totals = self.totals
    index: dict[str, WordIndex] = {}  # this chunk's articles (a cache, not kept)
    for ex in examples:
      self.count += 1
      if ex.qid not in predictions:
        continue
      a, b = predictions[ex.qid]
      text = ex.context[a:b]
      golds = [g["text"] for g in ex.answers]
      totals["exact_match"] += max(squad.exact_score(g, text) for g in golds)
      totals["f1"] += max(squad.f1_score_v1(g, text) for g in golds)
      key = ex.context
      if key not in index:
        index[key] = WordIndex(ex.context)
      words = index[key]
      pred = words.words(a, b)
      best = max((span_scores(pred, words.words(g["answer_start"],
                                                 g["answer_start"] + len(g["text"])))
                  for g in ex.answers), key=lambda s: s[0])
      for name, v in zip(("iou", "precision", "recall"), best):
        totals[name] += v

  def result(self) -> dict[str, float]:
    n = max(self.count, 1)
    return {k: 100.0 * v / n for k, v in self.totals.items()}
