"""NLQuAD IoU on hand examples and EM/F1 through the SQuAD v1.1 rules."""
import pytest

from poi_jax.data.records import SquadExample
from poi_jax.eval import iou

TEXT = "One two three four five six seven eight nine ten"


def _span(words):
  """Character span of words[i:j] of TEXT."""
  toks = TEXT.split()
  i, j = words
  start = len(" ".join(toks[:i])) + (1 if i else 0)
  return start, start + len(" ".join(toks[i:j]))


def _ex(gold_words, qid="q"):
  s, e = _span(gold_words)
  return SquadExample(qid, "?", TEXT, [{"text": TEXT[s:e], "answer_start": s}], False, [], "",
                      "")


@pytest.mark.parametrize("pred,gold,want", [
    ((0, 2), (5, 8), (0.0, 0.0, 0.0)),      # disjoint
    ((2, 6), (2, 6), (1.0, 1.0, 1.0)),      # identical
    ((3, 5), (1, 9), (2 / 8, 1.0, 2 / 8)),  # nested: |inner| / |outer|
    ((0, 4), (2, 6), (2 / 6, 2 / 4, 2 / 4)),  # overlapping
])
def test_iou_hand_examples(pred, gold, want):
  scores = iou.evaluate_spans([_ex(gold)], {"q": _span(pred)})
  for name, w in zip(("iou", "precision", "recall"), want):
    assert scores[name] == pytest.approx(100 * w)


def test_partial_words_count_and_missing_predictions_score_zero():
  words = iou.WordIndex(TEXT)
  assert words.words(5, 6) == {1}  # one character of "two"
  assert words.words(3, 4) == set()  # the space between words
  exs = [_ex((1, 3), "a"), _ex((4, 5), "b")]
  s = iou.evaluate_spans(exs, {"a": _span((1, 3))})
  assert s["iou"] == pytest.approx(50.0) and s["exact_match"] == pytest.approx(50.0)


def test_em_f1_follow_squad_v11_rules():
  ex = _ex((1, 4))  # "two three four"
  s = iou.evaluate_spans([ex], {"q": _span((2, 4))})  # "three four"
  assert s["exact_match"] == 0.0
  assert s["f1"] == pytest.approx(100 * 2 * (1.0 * 2 / 3) / (1.0 + 2 / 3))
