"""NarrativeQA metrics equal pycocoevalcap (the DASSA evaluation's library) on edge cases; the
oracle span finder picks the expected spans on toy texts."""
from __future__ import annotations

import random

import pytest

from poi_jax.data.features import oracle
from poi_jax.eval import rouge_bleu
from tests.required_checks import import_or_skip

CASES = [
    ("", ["the cat sat", "a cat"]),  # empty hypothesis
    ("the the the the", ["the cat", "the the dog"]),  # repeated tokens (clipping)
    ("he went home because he was hungry", ["hungry", "he was hungry"]),  # shorter references
    ("a cat sat on the mat", ["the cat sat on the mat", "a cat is on a mat"]),
    ("nothing in common", ["zzz yyy", "qqq"]),
    ("Mary", ["Mary", "mary ."]),  # case is not normalised
    ("x y", ["x y z w v", "x"]),  # closest reference length ties -> the shorter
]


@pytest.fixture(scope="module")
def pycoco():
  """``[(hypothesis, references)] -> (BLEU-1..4, corpus Rouge-L, per-question Rouge-L)`` by
  pycocoevalcap, the reference (skips without it; a failure under CI=true)."""
  install = "test dependency: pip install -e '.[test]'"
  bleu = import_or_skip("pycocoevalcap.bleu.bleu", install)
  rouge = import_or_skip("pycocoevalcap.rouge.rouge", install)

  def score(cases):
    gts = {str(i): refs for i, (_, refs) in enumerate(cases)}
    res = {str(i): [hyp] for i, (hyp, _) in enumerate(cases)}
    b, _ = bleu.Bleu(4).compute_score(gts, res, verbose=0)
    r, per = rouge.Rouge().compute_score(gts, res)
    return b, r, per
  return score


@pytest.mark.required
@pytest.mark.parametrize("i", range(len(CASES)))
def test_rouge_l_per_question_equals_pycocoevalcap(i, pycoco):
  _, _, per = pycoco(CASES)
  hyp, refs = CASES[i]
  assert rouge_bleu.rouge_l(hyp, refs) == pytest.approx(per[i], abs=1e-12)


@pytest.mark.required
@pytest.mark.parametrize("subset", [CASES, CASES[:1], CASES[1:2], CASES[2:3], CASES[4:]])
def test_corpus_bleu_equals_pycocoevalcap(subset, pycoco):
  bleu, rouge, _ = pycoco(subset)
  mine = rouge_bleu.corpus_bleu([h for h, _ in subset], [r for _, r in subset], 4)
  assert mine == pytest.approx(bleu, abs=1e-12)
  scores = rouge_bleu.narrativeqa_scores({str(i): h for i, (h, _) in enumerate(subset)},
                                         {str(i): r for i, (_, r) in enumerate(subset)})
  assert scores["bleu_1"] == pytest.approx(100 * bleu[0], abs=1e-9)
  assert scores["rouge_l"] == pytest.approx(100 * rouge, abs=1e-9)


@pytest.mark.required
def test_random_corpora_equal_pycocoevalcap(pycoco):
  rng = random.Random(0)
  words = "a b c d e the of".split()
  cases = [(" ".join(rng.choices(words, k=rng.randint(0, 8))),
            [" ".join(rng.choices(words, k=rng.randint(1, 9))) for _ in range(2)])
           for _ in range(40)]
  bleu, rouge, per = pycoco(cases)
  assert rouge_bleu.corpus_bleu([h for h, _ in cases], [r for _, r in cases]) == pytest.approx(
      bleu, abs=1e-12)
  for (h, r), p in zip(cases, per):
    assert rouge_bleu.rouge_l(h, r) == pytest.approx(p, abs=1e-12)


def test_oracle_picks_the_same_length_span_with_best_rouge():
  ctx = "the old man gave the boy a red apple in the garden".split()
  s, e, score = oracle.oracle_span(ctx, "A red apple".split(), "what did he give ?".split())
  assert (s, e, score) == (6, 8, 1.0)
  # No exact match: "man gave the" and "gave the boy" both share "gave the" (LCS 2 of 3); the
  # question window does not separate them, so the earliest wins.
  s, e, score = oracle.oracle_span(ctx, "gave the apple".split(), "x".split())
  assert (s, e) == (2, 4) and score == pytest.approx(2 / 3)


def test_oracle_breaks_ties_by_the_question_window():
  # "the knife" occurs twice; the second is surrounded by the question's words.
  ctx = ("he found the knife on the table . later in the kitchen the cook used the knife to "
         "cut bread").split()
  q = "what did the cook use to cut bread ?".split()
  s, e, _ = oracle.oracle_span(ctx, "the knife".split(), q, window=3)
  assert (s, e) == (15, 16)
  s, e, _ = oracle.oracle_span(ctx, "the knife".split(), "where was it found ?".split(),
                               window=3)
  assert (s, e) == (2, 3)


def test_best_of_two_answers_and_degenerate_cases():
  ctx = "jeff went home because he was hungry".split()
  s, e, score, which = oracle.best_oracle_span(ctx, ["he was starving".split(),
                                                     "he was hungry".split()], [])
  assert (s, e, score, which) == (4, 6, 1.0, 1)
  assert oracle.oracle_span(ctx, [], []) == (-1, -1, 0.0)
  assert oracle.oracle_span(["a"], ["a", "b"], []) == (-1, -1, 0.0)
  assert oracle.best_oracle_span(ctx, [["zzz"]], [])[3] == -1
