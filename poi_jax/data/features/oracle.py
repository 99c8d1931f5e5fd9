"""The NarrativeQA span oracle of DASSA ("Oracle (ours)", paper §4): free-form answers -> context
spans for span-prediction training.

For each answer, every context span of the answer's token length is scored by Rouge-L against
it; ties are broken by the Rouge-L of the span's surrounding window (``window`` tokens left and
right, the span included) against the question, then by position (earliest). Of the two answers'
spans the one with the higher Rouge-L supervises training (ties: answer 1). Tokens are compared
lower-cased by default (answers are written by people, the summary is not).
"""
from __future__ import annotations

import collections
from typing import Sequence

BETA = 1.2


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
  """Length of the longest common subsequence of two token lists."""
  if len(a) < len(b):
    a, b = b, a
  prev = [0] * (len(b) + 1)
  for x in a:
    cur = [0]
    for j, y in enumerate(b):
      cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
    prev = cur
  return prev[-1]


def rouge_l_tokens(candidate: Sequence[str], reference: Sequence[str], beta: float = BETA
                   ) -> float:
  """Rouge-L F (beta 1.2) of one candidate against one reference, 0 when either is empty."""
  if not candidate or not reference:
    return 0.0
  lcs = lcs_length(candidate, reference)
  if lcs == 0:
    return 0.0
  p, r = lcs / len(candidate), lcs / len(reference)
  return (1 + beta ** 2) * p * r / (r + beta ** 2 * p)


def oracle_span(context: Sequence[str], answer: Sequence[str], question: Sequence[str], *,
                window: int = 15, lowercase: bool = True) -> tuple[int, int, float]:
  """Best ``(start, end_inclusive, rouge_l)`` span of ``len(answer)`` tokens (``(-1, -1, 0.0)``
  when the context is shorter than the answer or the answer is empty)."""
  norm = (lambda toks: [t.lower() for t in toks]) if lowercase else list
  ctx, ans, q = norm(context), norm(answer), norm(question)
  n = len(ans)
  if n == 0 or n > len(ctx):
    return -1, -1, 0.0
  ans_counts = collections.Counter(ans)
  best, best_score, best_tie = (-1, -1), 0.0, -1.0
  for s in range(len(ctx) - n + 1):
    cand = ctx[s:s + n]
    # Multiset overlap bounds the LCS: skip spans that cannot reach the best score.
    overlap = sum((collections.Counter(cand) & ans_counts).values())
    if overlap == 0 or overlap / n < best_score - 1e-12:
      continue
    score = rouge_l_tokens(cand, ans)
    if score < best_score - 1e-12:
      continue
    tie = rouge_l_tokens(ctx[max(0, s - window):s + n + window], q)
    if score > best_score + 1e-12 or tie > best_tie + 1e-12:
      best, best_score, best_tie = (s, s + n - 1), score, tie
  return best[0], best[1], best_score


def best_oracle_span(context: Sequence[str], answers: Sequence[Sequence[str]],
                     question: Sequence[str], **kwargs) -> tuple[int, int, float, int]:
  """The oracle span of the answer whose span scores higher: ``(start, end, score, answer)``."""
  best = (-1, -1, 0.0, -1)
  for i, ans in enumerate(answers):
    s, e, score = oracle_span(context, ans, question, **kwargs)
    if s >= 0 and score > best[2]:
      best = (s, e, score, i)
  return best
