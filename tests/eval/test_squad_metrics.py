"""Hand-checked cases for every rule of the official SQuAD v1.1 / v2.0 evaluation scripts."""
import pytest

from poi_jax.eval import squad


def _ds(*qas):
  return [{"paragraphs": [{"context": "", "qas": [
      {"id": qid, "answers": [{"text": t, "answer_start": 0} for t in golds]}
      for qid, golds in qas]}]}]


@pytest.mark.parametrize("raw,norm", [
    ("The Cat", "cat"), ("a  dog,  an apple!", "dog apple"), ("Theater", "theater"),
    ("the", ""), ("  U.S.A. ", "usa"), ("an\tanswer\n", "answer")])
def test_normalisation(raw, norm):
  assert squad.normalize_answer(raw) == norm


def test_f1_partial_overlap_and_max_over_references():
  # pred "cat sat" vs gold "the cat sat down": p = 2/2, r = 2/3 -> f1 = 0.8
  assert squad.f1_score_v2("the cat sat down", "cat sat") == pytest.approx(0.8)
  r = squad.squad_v2_evaluate(_ds(("q", ["dog", "the cat sat down"])), {"q": "cat sat"})
  assert r["f1"] == pytest.approx(80.0) and r["exact"] == 0.0
  r = squad.squad_v2_evaluate(_ds(("q", ["dog", "cat sat"])), {"q": "The cat sat."})
  assert r["exact"] == 100.0


def test_repeated_tokens_count_once_each():
  # common tokens = min of the counts: x 1, y 1 -> 2; precision = recall = 2/3
  assert squad.f1_score_v2("x x y", "x y y") == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))


def test_unanswerable_and_empty_golds_v2():
  ds = _ds(("no", []), ("art", ["the", "a"]), ("yes", ["Paris"]))
  r = squad.squad_v2_evaluate(ds, {"no": "", "art": "", "yes": "paris"})
  # "art": golds normalise to empty -> reference "" -> empty prediction is exact
  assert r["exact"] == 100.0 and r["f1"] == 100.0
  assert r["HasAns_total"] == 2 and r["NoAns_total"] == 1
  r = squad.squad_v2_evaluate(ds, {"no": "something", "art": "x", "yes": ""})
  assert r["exact"] == 0.0 and r["NoAns_exact"] == 0.0


def test_na_prob_threshold_and_best_threshold_search():
  ds = _ds(("h1", ["red"]), ("h2", ["blue"]), ("n1", []), ("n2", []))
  preds = {"h1": "red", "h2": "green", "n1": "x", "n2": ""}
  na = {"h1": 0.1, "h2": 0.6, "n1": 0.8, "n2": 0.3}
  r = squad.squad_v2_evaluate(ds, preds, na, na_prob_thresh=0.5)
  # na > 0.5 -> no answer: h2 (has ans) -> 0, n1 -> 1; h1 1, n2 exact on "" -> 1
  assert r["exact"] == pytest.approx(75.0)
  # Sweep by na ascending from "all null" = 2 (n1, n2): h1 +1 -> 3 (t=0.1); n2 "" +0 (0.3);
  # h2 +0 (0.6); n1 predicted "x" -> -1 (0.8). Best 3/4 at threshold 0.1.
  assert r["best_exact"] == pytest.approx(75.0) and r["best_exact_thresh"] == pytest.approx(0.1)
  r_default = squad.squad_v2_evaluate(ds, preds)
  assert r_default["exact"] == pytest.approx(50.0)  # h1, n2


def test_v1_missing_prediction_counts_as_wrong_and_uses_all_answers():
  ds = _ds(("a", ["Denver Broncos", "Broncos"]), ("b", ["1990"]))
  r = squad.squad_v1_evaluate(ds, {"a": "the Broncos"})
  assert r["exact_match"] == 50.0 and r["f1"] == 50.0


def test_tuned_null_threshold_can_answer_questions_that_threshold_zero_leaves_null():
  """ALBERT/XLNet's threshold search over the best non-null answers (the POI-Net paper's δ)."""
  ds = _ds(("h1", ["red"]), ("h2", ["blue"]), ("n1", []), ("n2", []))
  non_null = {"h1": "red", "h2": "green", "n1": "x", "n2": "y"}
  # Every null score beats its best span (odds > 0): threshold 0 predicts no answer anywhere.
  odds = {"h1": 1.0, "h2": 4.0, "n1": 5.0, "n2": 6.0}
  at_zero = squad.squad_v2_evaluate(ds, {q: "" for q in non_null}, odds)
  assert at_zero["f1"] == 50.0 and at_zero["best_f1"] == 50.0  # the official search cannot help
  # From all null (2 of 4 right): answering h1 (odds 1.0) +1 -> 3; h2 +0; n1, n2 -1 each.
  t = squad.tuned_null_threshold(ds, non_null, odds)
  assert t["tuned_null_threshold"] == 1.0
  assert t["tuned_f1"] == 75.0 and t["tuned_exact"] == 75.0
  assert t["tuned_HasAns_f1"] == 50.0 and t["tuned_NoAns_f1"] == 100.0


def test_tuned_null_threshold_can_be_negative():
  ds = _ds(("h1", ["red"]), ("h2", ["blue"]), ("n1", []), ("n2", []))
  non_null = {"h1": "red", "h2": "green", "n1": "x", "n2": "y"}
  odds = {"h1": -2.0, "n2": -1.0, "h2": 0.5, "n1": 3.0}
  # Sweep: h1 +1 -> 3 (δ = -2); n2 -1 -> 2; h2 +0; n1 -1 -> 1. Threshold 0 would answer n2 too.
  t = squad.tuned_null_threshold(ds, non_null, odds)
  assert t["tuned_null_threshold"] == -2.0 and t["tuned_f1"] == 75.0
  preds_at_zero = {q: (a if odds[q] <= 0 else "") for q, a in non_null.items()}
  assert squad.squad_v2_evaluate(ds, preds_at_zero, odds)["f1"] == 50.0
