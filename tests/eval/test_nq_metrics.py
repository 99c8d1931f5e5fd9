"""NQ decoding rule on hand-built logits; NQ metrics vs the official ``nq_eval`` (PyPI package
``natural-questions``) on synthetic gold/prediction files."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from poi_jax.data.features.base import Features
from poi_jax.data.readers.nq import Annotation, Candidate, NqExample, Span
from poi_jax.eval import nq as nq_eval
from tests.required_checks import import_or_skip


def _example(ex_id, n_tokens=30):
  cands = [Candidate(9, 14, 90, 140, True, "P"), Candidate(19, 22, 190, 220, True, "P")]
  return NqExample(ex_id, "q", [f"w{i}" for i in range(n_tokens)], [False] * n_tokens,
                   [(10 * i, 10 * i + 5) for i in range(n_tokens)], cands,
                   [Annotation(-1, Span(-1, -1), (), "NONE")])


def _window():
  # positions: 0 [CLS], 1 q, 2 [SEP], 3 marker(p2), 4-6 orig 10..12 (p2), 7 marker(p3),
  # 8 orig 20 (p3), 9 [SEP]
  t2o = np.array([-1, -1, -1, -1, 10, 11, 12, -1, 20, -1])
  tpara = np.array([-1, -1, -1, 2, 2, 2, 2, 3, 3, 3])
  pc = np.array([-1, -1, 0, 1, -1])
  start = np.zeros(10)
  end = np.zeros(10)
  start[0] = end[0] = 1.0
  start[5], end[6] = 3.0, 4.0
  start[8] = end[8] = 10.0  # the best short span, but in the weaker paragraph
  para = np.array([0.5, 0.0, 2.0, 1.0, 0.0])
  atype = np.array([1.0, 0.0, 2.0, 0.0, 0.0])
  return t2o, tpara, pc, start, end, para, atype


def _features_and_outputs(windows, example_index):
  arrays = {"example_index": np.asarray(example_index)}
  meta = {"token_to_orig": np.stack([w[0] for w in windows]),
          "token_paragraph": np.stack([w[1] for w in windows]),
          "paragraph_candidate": np.stack([w[2] for w in windows])}
  outputs = {"start_logits": np.stack([w[3] for w in windows]),
             "end_logits": np.stack([w[4] for w in windows]),
             "paragraph_logits": np.stack([w[5] for w in windows]),
             "answer_type_logits": np.stack([w[6] for w in windows])}
  return Features(arrays, meta), outputs


def test_decoding_rule_on_hand_built_logits():
  w0 = _window()
  # A second window of example 0 whose paragraph scores lower (long score 0.5 < 2.5).
  w1 = list(_window())
  w1[5] = np.array([1.5, 0.0, 2.0, 1.0, 0.0])
  feats, outs = _features_and_outputs([w0, tuple(w1)], [0, 0])
  records = [_example("7"), _example("-8")]
  preds = nq_eval.decode_nq(records, feats, outs, max_answer_length=30)
  p = preds[0]
  assert p["example_id"] == 7
  # long = para[p2] - para[CLS] + max(type[1:]) - type[0] = 2 - 0.5 + 2 - 1
  assert p["long_answer"] == dict(start_token=9, end_token=14, start_byte=90, end_byte=140)
  assert p["long_answer_score"] == pytest.approx(2.5)
  # short = (s_5 - s_0) + (e_6 - e_0) = 2 + 3, orig tokens [11, 13)
  assert p["short_answers"] == [dict(start_token=11, end_token=13, start_byte=110,
                                     end_byte=125)]
  assert p["short_answers_score"] == pytest.approx(5.0)
  assert p["yes_no_answer"] == "NONE"
  # example without windows: null answers
  assert preds[1]["example_id"] == -8 and preds[1]["long_answer"]["start_token"] == -1
  assert preds[1]["short_answers"] == [] and preds[1]["long_answer_score"] == nq_eval.NULL_SCORE
  # max_answer_length=1: only one-token spans; the best is [12, 13): (0 - 1) + (4 - 1)
  p1 = nq_eval.decode_nq(records, feats, outs, max_answer_length=1)[0]
  assert p1["short_answers"][0]["start_token"] == 12
  assert p1["short_answers"][0]["end_token"] == 13
  assert p1["short_answers_score"] == pytest.approx(2.0)


def _rand_span(rng, with_bytes):
  st = int(rng.integers(0, 6)) * 10
  et = st + int(rng.integers(1, 3)) * 5
  if with_bytes:
    return dict(start_token=st, end_token=et, start_byte=st * 7, end_byte=et * 7)
  return dict(start_token=st, end_token=et, start_byte=-1, end_byte=-1)


NULL = dict(start_token=-1, end_token=-1, start_byte=-1, end_byte=-1)


def synthetic(seed, n=120):
  """Gold (5 annotations) and predictions with ties, nulls, yes/no, byte-only mismatches."""
  rng = np.random.default_rng(seed)
  gold, preds = [], []
  for i in range(n):
    anns = []
    for _ in range(5):
      kind = rng.choice(["null", "long", "short", "yes", "no"], p=[0.3, 0.2, 0.35, 0.1, 0.05])
      long = NULL if kind == "null" else dict(_rand_span(rng, True), candidate_index=0)
      short = ([_rand_span(rng, True) for _ in range(int(rng.integers(1, 3)))]
               if kind == "short" else [])
      anns.append({"long_answer": long, "short_answers": short,
                   "yes_no_answer": {"yes": "YES", "no": "NO"}.get(kind, "NONE")})
    gold.append({"example_id": 100 + i, "annotations": anns})
    # predictions: copy an annotation (maybe), drop bytes (token comparison), perturb bytes only
    src = anns[int(rng.integers(0, 5))]
    mode = rng.choice(["copy", "tokens", "bytes_off", "random", "null", "yes"])
    long, short = dict(src["long_answer"]), [dict(s) for s in src["short_answers"]]
    long.pop("candidate_index", None)
    yes_no = "NONE"
    if mode == "tokens":
      long.update(start_byte=-1, end_byte=-1)
      for s in short:
        s.update(start_byte=-1, end_byte=-1)
    elif mode == "bytes_off" and long["start_byte"] >= 0:
      long.update(start_byte=long["start_byte"] + 1)  # bytes differ, tokens equal
    elif mode == "random":
      long, short = _rand_span(rng, bool(rng.integers(0, 2))), [_rand_span(rng, True)]
    elif mode == "null":
      long, short = dict(NULL), []
    elif mode == "yes":
      short, yes_no = [], str(rng.choice(["YES", "NO"]))
    preds.append({"example_id": 100 + i, "long_answer": long,
                  "long_answer_score": float(rng.integers(0, 8)),  # many ties
                  "short_answers": short, "short_answers_score": float(rng.integers(0, 8)),
                  "yes_no_answer": yes_no})
  return gold, preds


def _gold_records(gold):
  return {g["example_id"]: [nq_eval.Label(nq_eval._span(a["long_answer"]),
                                          [nq_eval._span(s) for s in a["short_answers"]],
                                          a["yes_no_answer"].lower(), 0, 0)
                            for a in g["annotations"]] for g in gold}


@pytest.mark.required
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_the_official_nq_eval(seed, tmp_path):
  nq = import_or_skip("natural_questions.nq_eval",
                      "the official evaluator: pip install -e '.[test]' (natural-questions, six)")
  from absl import flags
  from natural_questions import eval_utils
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  gold, preds = synthetic(seed)
  gold_path = tmp_path / "gold.jsonl.gz"
  with gzip.open(gold_path, "wt") as f:
    for g in gold:
      f.write(json.dumps(g) + "\n")
  pred_path = tmp_path / "pred.json"
  pred_path.write_text(json.dumps({"predictions": preds}))
  official_gold = eval_utils.read_annotation_from_one_split(str(gold_path))
  official_pred = eval_utils.read_prediction_json(str(pred_path))
  want = nq.get_metrics_with_answer_stats(*nq.score_answers(official_gold, official_pred))
  got = nq_eval.nq_metrics(_gold_records(gold), preds)
  assert set(got) == set(want)
  for k in want:
    if want[k] is None:
      assert got[k] == 0.0 or got[k] is None, k
    else:
      assert got[k] == pytest.approx(want[k], abs=1e-12), k
  assert 0 < got["long-best-threshold-f1"] < 1 and 0 < got["short-best-threshold-f1"] < 1


def test_metrics_by_hand():
  # 3 examples, 5 annotators each. A: gold long (3 votes) predicted right, score 3.
  # B: gold long predicted wrong, score 2. C: no gold (1 vote) predicted, score 1.
  span = lambda a, b: dict(start_token=a, end_token=b, start_byte=-1, end_byte=-1)
  ann = lambda s: {"long_answer": s, "short_answers": [], "yes_no_answer": "NONE"}
  gold = [{"example_id": 1, "annotations": [ann(span(0, 5))] * 3 + [ann(NULL)] * 2},
          {"example_id": 2, "annotations": [ann(span(0, 5))] * 2 + [ann(NULL)] * 3},
          {"example_id": 3, "annotations": [ann(span(0, 5))] + [ann(NULL)] * 4}]
  pred = lambda i, s, score: {"example_id": i, "long_answer": s, "long_answer_score": score,
                              "short_answers": [], "short_answers_score": 0.0}
  preds = [pred(1, span(0, 5), 3.0), pred(2, span(5, 9), 2.0), pred(3, span(0, 5), 1.0)]
  m = nq_eval.nq_metrics(_gold_records(gold), preds)
  # threshold 3: P = 1/1, R = 1/2, F1 = 2/3 (lower thresholds only add wrong predictions)
  assert m["long-best-threshold-f1"] == pytest.approx(2 / 3)
  assert m["long-best-threshold"] == 3.0
  assert m["long-recall-at-precision>=0.5"] == pytest.approx(0.5)
  assert m["short-best-threshold-f1"] == 0.0
  with pytest.raises(ValueError, match="differ"):
    nq_eval.nq_metrics(_gold_records(gold), preds[:2])
