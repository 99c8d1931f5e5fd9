"""Natural Questions: decoding the graph model's logits and the official NQ metrics.

Decoding (NQ_BERT-DM, ``../shared/specs/nq_graph.md`` §1.1): for each window and each document
start position ``i`` (a document token, not a marker), the best end ``j >= i`` in the same
candidate with ``orig(j) - orig(i) + 1 <= max_answer_length``;
``short = (s_i - s_[CLS]) + (e_j - e_[CLS])``, ``cand = para[c(i)] - para[[CLS]]``,
``doc = max(type[1:]) - type[0]``. Over all (window, i) of an example, the largest
``(cand + doc, short)`` (lexicographic) gives the long answer (candidate ``c(i)``, score
``cand + doc``) and the short answer ``[orig(i), orig(j) + 1)`` (score ``short``); yes/no is never
predicted (``"NONE"``). An example without a scorable position predicts null answers with score
`NULL_SCORE`.

Metrics: `nq_metrics` computes what the official ``nq_eval.py`` computes (its
``get_metrics_with_answer_stats``), re-implemented here: gold has a long (short) answer when at
least ``long_non_null_threshold`` (``short_non_null_threshold``) annotators gave a non-null long
span (short span set, or yes/no); spans compare by bytes when both sides have them and, failing
that, by tokens; the PR curve over the predictions sorted by score, best-threshold F1/P/R and
R@P >= 0.5/0.75/0.9. Predictions are written in the official JSON format.
"""
from __future__ import annotations

import collections
from typing import Mapping, Sequence

import numpy as np

from poi_jax.data.records import NqExample

NULL_SCORE = -1e30
TARGETS = (0.5, 0.75, 0.9)
NULL_SPAN = dict(start_token=-1, end_token=-1, start_byte=-1, end_byte=-1)


def _json_id(example_id: str):
  return int(example_id) if example_id.lstrip("-").isdigit() else example_id


def _window_best(start, end, para, atype, t2o, tpara, max_answer_length):
  """Best (long score, short score, i, j) of one window, or None."""
  pos = np.flatnonzero((t2o >= 0) & (tpara >= 0) & (tpara < len(para)))
  if not len(pos):
    return None
  oi, oj = t2o[pos][:, None], t2o[pos][None, :]
  ok = ((pos[None, :] >= pos[:, None]) & (tpara[pos][None, :] == tpara[pos][:, None])
        & (oj - oi + 1 <= max_answer_length))
  ends = np.where(ok, end[pos][None, :], -np.inf)
  jbest = np.argmax(ends, axis=1)
  short = (start[pos] - start[0]) + (ends[np.arange(len(pos)), jbest] - end[0])
  doc = float(np.max(atype[1:]) - atype[0])
  long = para[tpara[pos]] - para[0] + doc
  # Lexicographic (long, short): lexsort sorts by the last key first, ascending.
  k = np.lexsort((short, long))[-1]
  return float(long[k]), float(short[k]), int(pos[k]), int(pos[jbest[k]])


def decode_nq(records: Sequence[NqExample], features, outputs: Mapping[str, np.ndarray], *,
              max_answer_length: int = 30) -> list[dict]:
  """Official-format predictions (one per record, in record order)."""
  a, m = features.arrays, features.meta
  best: dict[int, tuple] = {}
  for w in range(len(a["example_index"])):
    r = _window_best(np.asarray(outputs["start_logits"][w], np.float64),
                     np.asarray(outputs["end_logits"][w], np.float64),
                     np.asarray(outputs["paragraph_logits"][w], np.float64),
                     np.asarray(outputs["answer_type_logits"][w], np.float64),
                     m["token_to_orig"][w], m["token_paragraph"][w], max_answer_length)
    if r is None:
      continue
    ex = int(a["example_index"][w])
    if ex not in best or (r[0], r[1]) > best[ex][:2]:
      best[ex] = r + (w,)
  preds = []
  for ex_i, ex in enumerate(records):
    pred = {"example_id": _json_id(ex.example_id), "long_answer": dict(NULL_SPAN),
            "long_answer_score": NULL_SCORE, "short_answers": [],
            "short_answers_score": NULL_SCORE, "yes_no_answer": "NONE"}
    if ex_i in best:
      long_s, short_s, i, j, w = best[ex_i]
      t2o, tpara = m["token_to_orig"][w], m["token_paragraph"][w]
      c = ex.candidates[int(m["paragraph_candidate"][w][tpara[i]])]
      oi, oj = int(t2o[i]), int(t2o[j])
      bytes_ = ex.token_bytes
      pred["long_answer"] = dict(start_token=c.start_token, end_token=c.end_token,
                                 start_byte=c.start_byte, end_byte=c.end_byte)
      pred["long_answer_score"] = long_s
      pred["short_answers"] = [dict(start_token=oi, end_token=oj + 1,
                                    start_byte=bytes_[oi][0] if bytes_ else -1,
                                    end_byte=bytes_[oj][1] if bytes_ else -1)]
      pred["short_answers_score"] = short_s
    preds.append(pred)
  return preds


# ---- metrics (the official nq_eval, re-implemented) --------------------------------------------

Label = collections.namedtuple("Label", "long short yes_no long_score short_score")


def _span(d: Mapping) -> tuple[int, int, int, int]:
  return (int(d.get("start_byte", -1)), int(d.get("end_byte", -1)),
          int(d.get("start_token", -1)), int(d.get("end_token", -1)))


def _is_null(s) -> bool:
  return s[0] < 0 and s[1] < 0 and s[2] < 0 and s[3] < 0


def _null_list(spans) -> bool:
  return not spans or all(_is_null(s) for s in spans)


def _equal(a, b) -> bool:
  """Non-null spans: equal bytes when both have bytes, else (or failing that) equal tokens."""
  if a[0] >= 0 and a[1] >= 0 and b[0] >= 0 and b[1] >= 0 and a[:2] == b[:2]:
    return True
  return a[2] >= 0 and a[3] >= 0 and b[2] >= 0 and b[3] >= 0 and a[2:] == b[2:]


def _set_equal(gold, pred) -> bool:
  gold = [s for s in gold if not _is_null(s)]
  pred = [s for s in pred if not _is_null(s)]
  return (all(any(_equal(p, g) for g in gold) for p in pred)
          and all(any(_equal(p, g) for p in pred) for g in gold))


def gold_labels(records: Sequence[NqExample]) -> dict:
  """``example_id -> [Label per annotation]`` from the records."""
  out = {}
  for ex in records:
    labels = []
    for a in ex.annotations:
      labels.append(Label(_span(a.long.to_json()), [_span(s.to_json()) for s in a.short],
                          a.yes_no.lower(), 0.0, 0.0))
    out[_json_id(ex.example_id)] = labels
  return out


def prediction_labels(predictions: Sequence[Mapping]) -> dict:
  out = {}
  for p in predictions:
    long = _span(p["long_answer"]) if "long_answer" in p else (-1, -1, -1, -1)
    short = [_span(s) for s in p.get("short_answers", [])]
    yes_no = str(p.get("yes_no_answer", "none")).lower()
    if yes_no not in ("yes", "no", "none"):
      raise ValueError(f"example {p['example_id']}: invalid yes_no_answer {yes_no!r}")
    if yes_no != "none" and not _null_list(short):
      raise ValueError(f"example {p['example_id']}: yes/no and short answers cannot coexist")
    out[p["example_id"]] = Label(long, short, yes_no, p["long_answer_score"],
                                 p["short_answers_score"])
  return out


def _stats(gold: dict, pred: dict, long_threshold: int, short_threshold: int):
  if set(gold) != set(pred):
    missing, extra = set(gold) - set(pred), set(pred) - set(gold)
    raise ValueError(f"the example ids of gold and predictions differ: {len(missing)} without a "
                     f"prediction (e.g. {sorted(map(str, missing))[:3]}), {len(extra)} "
                     f"predictions without gold (e.g. {sorted(map(str, extra))[:3]})")
  long_stats, short_stats = [], []
  for ex_id, labels in gold.items():
    p = pred[ex_id]
    g_long = bool(labels) and sum(not _is_null(l.long) for l in labels) >= long_threshold
    p_long = not _is_null(p.long)
    ok = g_long and p_long and any(not _is_null(l.long) and _equal(l.long, p.long)
                                   for l in labels)
    long_stats.append((g_long, p_long, ok, p.long_score))
    g_short = bool(labels) and sum((not _null_list(l.short)) or l.yes_no != "none"
                                   for l in labels) >= short_threshold
    p_short = (not _null_list(p.short)) or p.yes_no != "none"
    ok = False
    if g_short and p_short:
      if p.yes_no != "none":
        ok = any(p.yes_no == l.yes_no for l in labels)
      else:
        ok = any(_set_equal(l.short, p.short) for l in labels)
    short_stats.append((g_short, p_short, ok, p.short_score))
  return long_stats, short_stats


def _div(x, y):
  return x / y if y else 0


def _curve(stats, prefix):
  """Best-threshold F1/P/R and R@P over ``stats`` sorted by score (descending)."""
  stats = sorted(stats, key=lambda s: s[-1], reverse=True)
  total_gold = sum(s[0] for s in stats)
  correct = has_pred = 0
  points = {}  # score -> (P, R) after every prediction with that score (ties together)
  for g, p, ok, score in stats:
    correct += ok
    has_pred += p
    points[score] = (_div(correct, has_pred), _div(correct, total_gold))
  best = (0.0, 0.0, 0.0, 0.0)
  max_r = [0.0] * len(TARGETS)
  max_p = [0.0] * len(TARGETS)
  for score, (prec, rec) in points.items():
    for t, target in enumerate(TARGETS):
      if prec >= target and rec > max_r[t]:
        max_r[t], max_p[t] = rec, prec
    f1 = _div(2 * prec * rec, prec + rec)
    if f1 > best[0]:
      best = (f1, prec, rec, score)
  out = {f"{prefix}best-threshold-f1": best[0], f"{prefix}best-threshold-precision": best[1],
         f"{prefix}best-threshold-recall": best[2], f"{prefix}best-threshold": best[3]}
  for t, target in enumerate(TARGETS):
    out[f"{prefix}recall-at-precision>={target:.2}"] = max_r[t]
    out[f"{prefix}precision-at-precision>={target:.2}"] = max_p[t]
  return out


def nq_metrics(gold: dict, predictions: Sequence[Mapping], *, long_non_null_threshold: int = 2,
               short_non_null_threshold: int = 2) -> dict:
  """The official metrics dict (keys as ``nq_eval.get_metrics_with_answer_stats``)."""
  return metrics_from_stats(*answer_stats(gold, predictions, long_non_null_threshold,
                                          short_non_null_threshold))


def answer_stats(gold: dict, predictions: Sequence[Mapping], long_non_null_threshold: int = 2,
                 short_non_null_threshold: int = 2) -> tuple[list, list]:
  """``(long, short)``: one small tuple per example (gold has an answer, the prediction has one,
  they match, its score), in ``gold``'s order: all the metrics need, so a split evaluated a
  chunk at a time concatenates its chunks' stats and calls `metrics_from_stats` once."""
  return _stats(gold, prediction_labels(predictions), long_non_null_threshold,
                short_non_null_threshold)


def metrics_from_stats(long_stats: list, short_stats: list) -> dict:
  return {**_curve(long_stats, "long-"), **_curve(short_stats, "short-")}
