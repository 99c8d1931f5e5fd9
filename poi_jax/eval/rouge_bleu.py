"""NarrativeQA metrics as the DASSA evaluation script computes them with ``pycocoevalcap``
(`../shared/specs/dassa.md` §3.3): per-question Rouge-L and corpus BLEU-1, both on whitespace
tokens with no other normalisation.

* Rouge-L (pycocoevalcap ``Rouge.calc_score``): tokens by ``str.split(" ")`` (so an empty string
  is one empty token); ``P = max_r LCS / |hyp|``, ``R = max_r LCS / |ref_r|`` taken separately
  over the references, ``F = (1 + b^2) P R / (R + b^2 P)`` with ``b = 1.2``, 0 when P or R is 0.
  The reported score is the mean over questions x 100.
* BLEU (pycocoevalcap ``BleuScorer``, option "closest"): tokens by ``str.split()``; clipped n-gram
  counts and guesses summed over the corpus; the reference length of each question is the one
  closest to the hypothesis length (the shorter on ties); one corpus brevity penalty
  ``exp(1 - r/c)`` when ``c < r``; the 1e-9 / 1e-15 smoothing constants of the original.
"""
from __future__ import annotations

import collections
import math
from typing import Mapping, Sequence

from poi_jax.data.features.oracle import lcs_length

BETA = 1.2


def rouge_l(hypothesis: str, references: Sequence[str], beta: float = BETA) -> float:
  """Rouge-L of one hypothesis against its references (in [0, 1])."""
  if not references:
    raise ValueError("Rouge-L needs at least one reference")
  hyp = hypothesis.split(" ")
  prec, rec = [], []
  for ref in references:
    r = ref.split(" ")
    lcs = lcs_length(r, hyp)
    prec.append(lcs / len(hyp))
    rec.append(lcs / len(r))
  p, r = max(prec), max(rec)
  if p == 0 or r == 0:
    return 0.0
  return (1 + beta ** 2) * p * r / (r + beta ** 2 * p)


def _ngrams(words: list[str], n: int) -> collections.Counter:
  return collections.Counter(tuple(words[i:i + k]) for k in range(1, n + 1)
                             for i in range(len(words) - k + 1))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]], n: int = 4
                ) -> list[float]:
  """Corpus BLEU-1..n (in [0, 1]) over parallel lists of hypotheses and reference lists."""
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} reference lists")
  counts = [0] * (2 * n + 2)
  for hyp, refs in zip(hypotheses, references):
    counts = [a + b for a, b in zip(counts, bleu_counts(hyp, refs, n))]
  return bleu_from_counts(counts, n)


def bleu_counts(hyp: str, refs: Sequence[str], n: int = 4) -> list[int]:
  """One question's BLEU statistics: ``guess[0..n) + correct[0..n) + [hyp length, reference
  length]`` (integers: a corpus sums them in any order)."""
  if not refs:
    raise ValueError("BLEU needs at least one reference per hypothesis")
  words = hyp.split()
  max_ref = collections.Counter()
  lens = []
  for ref in refs:
    rw = ref.split()
    lens.append(len(rw))
    for g, c in _ngrams(rw, n).items():
      max_ref[g] = max(max_ref[g], c)
  guess = [max(0, len(words) - k) for k in range(n)]
  correct = [0] * n
  for g, c in _ngrams(words, n).items():
    correct[len(g) - 1] += min(max_ref.get(g, 0), c)
  return guess + correct + [len(words), min((abs(l - len(words)), l) for l in lens)[1]]


def bleu_from_counts(counts: Sequence[int], n: int = 4) -> list[float]:
  """Corpus BLEU-1..n from the summed `bleu_counts`."""
  small, tiny = 1e-9, 1e-15
  guess, correct, (test_len, ref_len) = counts[:n], counts[n:2 * n], counts[2 * n:]
  bleus, prod = [], 1.0
  for k in range(n):
    prod *= (correct[k] + tiny) / (guess[k] + small)
    bleus.append(prod ** (1.0 / (k + 1)))
  ratio = (test_len + tiny) / (ref_len + small)
  if ratio < 1:
    bleus = [b * math.exp(1 - 1 / ratio) for b in bleus]
  return bleus


def narrativeqa_scores(predictions: Mapping[str, str],
                       references: Mapping[str, Sequence[str]]) -> dict[str, float]:
  """``{"rouge_l", "bleu_1", "bleu_4"}`` x 100 over the questions of ``references`` (a missing
  prediction counts as the empty string)."""
  scores = NarrativeQaScores()
  scores.add(predictions, references)
  return scores.result()


class NarrativeQaScores:
  """`narrativeqa_scores` over a split given a chunk of questions at a time (``add``): keeps each
  question's Rouge-L (summed in order at the end) and the summed BLEU statistics."""

  def __init__(self, n: int = 4):
    self.n = n
    self.rouge: list[float] = []
    self.counts = [0] * (2 * n + 2)

  def add(self, predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> None:
    for q, refs in references.items():
      hyp, refs = predictions.get(q, ""), list(refs)
      self.rouge.append(rouge_l(hyp, refs))
      self.counts = [a + b for a, b in zip(self.counts, bleu_counts(hyp, refs, self.n))]

  def result(self) -> dict[str, float]:
    if not self.rouge:
      return {"rouge_l": 0.0, "bleu_1": 0.0, "bleu_4": 0.0, "total": 0}
    bleu = bleu_from_counts(self.counts, self.n)
    return {"rouge_l": 100.0 * sum(self.rouge) / len(self.rouge), "bleu_1": 100.0 * bleu[0],
            "bleu_4": 100.0 * bleu[3], "total": len(self.rouge)}
