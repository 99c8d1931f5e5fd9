"""SQuAD metrics computed exactly as the official evaluation scripts (v1.1 and v2.0) do.

Rules reproduced: answer normalisation (lower case, punctuation removed, articles a/an/the
removed, whitespace collapsed); exact match and token F1 maximised over the references; v2.0:
references that normalise to empty are dropped and an unanswerable question's reference is the
empty string (so predicting "" is exact); ``na_probs`` with ``na_prob_thresh`` turn predictions
into no-answers; the HasAns/NoAns breakdown; the best threshold search (``best_exact``,
``best_f1`` and their thresholds). v1.1: a missing prediction counts as wrong.

`tuned_null_threshold` is not part of the official script: it is the threshold search of ALBERT's
and XLNet's SQuAD 2.0 code (``find_all_best_thresh_v2``), which the POI-Net paper (§2.4.2) uses for
its "threshold δ ... heuristically computed in linear time". It runs the official search over the
best *non-null* answers, so it can turn any question into an answer, not only answers into null.
"""
from __future__ import annotations

import collections
import re
import string

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
  s = s.lower()
  s = "".join(ch for ch in s if ch not in _PUNCT)
  s = _ARTICLES.sub(" ", s)
  return " ".join(s.split())


def _tokens(s: str) -> list[str]:
  return normalize_answer(s).split() if s else []


def exact_score(gold: str, pred: str) -> int:
  return int(normalize_answer(gold) == normalize_answer(pred))


def f1_score_v2(gold: str, pred: str) -> float:
  g, p = _tokens(gold), _tokens(pred)
  common = collections.Counter(g) & collections.Counter(p)
  same = sum(common.values())
  if not g or not p:
    return float(g == p)  # both empty: 1, else 0
  if same == 0:
    return 0.0
  precision, recall = same / len(p), same / len(g)
  return 2 * precision * recall / (precision + recall)


def f1_score_v1(gold: str, pred: str) -> float:
  g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
  same = sum((collections.Counter(p) & collections.Counter(g)).values())
  if same == 0:
    return 0.0
  precision, recall = same / len(p), same / len(g)
  return 2 * precision * recall / (precision + recall)


def _questions(dataset):
  for article in dataset:
    for para in article["paragraphs"]:
      yield from para["qas"]


def squad_v1_evaluate(dataset: list, predictions: dict[str, str]) -> dict[str, float]:
  """``dataset``: the ``data`` list of a SQuAD JSON; ``predictions``: id -> text."""
  em = f1 = total = 0
  for qa in _questions(dataset):
    total += 1
    if qa["id"] not in predictions:
      continue  # the official script prints a message and counts it as 0
    q_em, q_f1 = _v1_question(qa, predictions[qa["id"]])
    em += q_em
    f1 += q_f1
  return {"exact_match": 100.0 * em / total, "f1": 100.0 * f1 / total}


def _v1_question(qa: dict, pred: str) -> tuple[int, float]:
  golds = [a["text"] for a in qa["answers"]]
  return (max(exact_score(g, pred) for g in golds), max(f1_score_v1(g, pred) for g in golds))


def _best_thresh(preds, scores, na_probs, has_ans):
  score = best = sum(1 for q in has_ans if not has_ans[q])
  best_thresh = 0.0
  for qid in sorted(na_probs, key=lambda k: na_probs[k]):
    if qid not in scores:
      continue
    if has_ans[qid]:
      diff = scores[qid]
    else:
      diff = -1 if preds[qid] else 0
    score += diff
    if score > best:
      best, best_thresh = score, na_probs[qid]
  return 100.0 * best / len(scores), best_thresh


def _raw_scores_v2(dataset: list, predictions: dict[str, str]):
  """``(has_ans, exact, f1)``: has_ans for every question of ``dataset``, the v2.0 exact and F1
  (max over the references; "" for an unanswerable one) for every predicted question."""
  has_ans, exact, f1 = {}, {}, {}
  for qa in _questions(dataset):
    qid = qa["id"]
    has_ans[qid] = bool(qa["answers"])
    golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
    if qid not in predictions:
      continue
    pred = predictions[qid]
    exact[qid] = max(exact_score(g, pred) for g in golds)
    f1[qid] = max(f1_score_v2(g, pred) for g in golds)
  return has_ans, exact, f1


def squad_v2_evaluate(dataset: list, predictions: dict[str, str],
                      na_probs: dict[str, float] | None = None,
                      na_prob_thresh: float = 1.0) -> dict[str, float]:
  """The official v2.0 evaluation dict: exact, f1, total, HasAns_*, NoAns_*, best_exact(_thresh),
  best_f1(_thresh)."""
  if na_probs is None:
    na_probs = {k: 0.0 for k in predictions}
  has_ans, exact, f1 = _raw_scores_v2(dataset, predictions)
  return _v2_from_raw(has_ans, exact, f1, predictions, na_probs, na_prob_thresh)


def _v2_from_raw(has_ans: dict, exact: dict, f1: dict, predictions: dict, na_probs: dict,
                 na_prob_thresh: float) -> dict[str, float]:
  """`squad_v2_evaluate` from `_raw_scores_v2`'s values (``predictions``: only whether each is
  non-empty is read). Sums run in the dicts' orders, as the official script's do."""

  def threshold(scores):
    out = {}
    for qid, s in scores.items():
      out[qid] = float(not has_ans[qid]) if na_probs[qid] > na_prob_thresh else s
    return out

  exact_t, f1_t = threshold(exact), threshold(f1)

  def summary(ids, prefix=""):
    n = len(ids)
    return {f"{prefix}exact": 100.0 * sum(exact_t[q] for q in ids) / n,
            f"{prefix}f1": 100.0 * sum(f1_t[q] for q in ids) / n, f"{prefix}total": n}

  result = summary(list(exact_t))
  has = [q for q in exact_t if has_ans[q]]
  no = [q for q in exact_t if not has_ans[q]]
  if has:
    result.update(summary(has, "HasAns_"))
  if no:
    result.update(summary(no, "NoAns_"))
  if na_probs:
    best_exact, t_exact = _best_thresh(predictions, exact, na_probs, has_ans)
    best_f1, t_f1 = _best_thresh(predictions, f1, na_probs, has_ans)
    result.update(best_exact=best_exact, best_exact_thresh=t_exact, best_f1=best_f1,
                  best_f1_thresh=t_f1)
  return result


def tuned_null_threshold(dataset: list, non_null_predictions: dict[str, str],
                         null_odds: dict[str, float]) -> dict[str, float]:
  """The null-score-difference threshold δ that maximises F1 on ``dataset``, and the official
  v2.0 scores of the predictions it gives (``tuned_*`` keys).

  ``non_null_predictions``: the best non-empty answer of every question; ``null_odds``: the
  decoder's ``null score - best non-null score`` (a question is answered when its odds are
  <= δ). Returns ``tuned_null_threshold`` (δ), ``tuned_exact``, ``tuned_f1``,
  ``tuned_HasAns_f1``, ``tuned_NoAns_f1``. δ is fitted on the data it scores: an optimistic
  figure (the paper's protocol); pass it as ``eval.null_score_diff_threshold`` on new data.
  """
  has_ans, exact, f1 = _raw_scores_v2(dataset, non_null_predictions)
  return _tuned_from_raw(has_ans, exact, f1, non_null_predictions, null_odds)


def _tuned_from_raw(has_ans: dict, exact: dict, f1: dict, non_null: dict,
                    null_odds: dict) -> dict[str, float]:
  """`tuned_null_threshold` from `_raw_scores_v2`'s values of the best non-null answers."""
  scored = {q: h for q, h in has_ans.items() if q in f1}  # the questions it scores
  _, delta = _best_thresh(non_null, f1, null_odds, scored)
  r = _v2_from_raw(has_ans, exact, f1, non_null, null_odds, na_prob_thresh=delta)
  out = {"tuned_null_threshold": delta, "tuned_exact": r["exact"], "tuned_f1": r["f1"]}
  for k in ("HasAns_f1", "NoAns_f1"):
    if k in r:
      out[f"tuned_{k}"] = r[k]
  return out


class StreamedScores:
  """The official scores of a split evaluated a chunk of questions at a time, from small values
  per question (exact, F1, has-answer, null odds; never the texts), equal to scoring the whole
  split at once: the sums run in the whole ``dataset``'s order (articles by first appearance of
  their title, as `poi_jax.tasks.squad.gold_dataset` groups them), the threshold searches in
  the predictions' order.

  ``add(dataset, predictions, null_odds, non_null)`` takes one chunk (``dataset``: its ``data``
  list; v2.0: the decoder's null odds and best non-null answers); ``result()`` is
  `squad_v1_evaluate`'s dict, or v2.0's with `tuned_null_threshold`'s keys when there are odds.
  """

  def __init__(self, version_2: bool):
    self.version_2 = version_2
    self._titles: dict[str, list[str]] = {}  # title -> its question ids, in order
    self._rows: dict[str, tuple] = {}  # question id -> its values, in prediction order
    self._odds: dict[str, float] = {}

  def add(self, dataset: list, predictions: dict[str, str], null_odds: dict | None = None,
          non_null: dict | None = None) -> None:
    for article in dataset:
      ids = self._titles.setdefault(article["title"], [])
      ids.extend(qa["id"] for p in article["paragraphs"] for qa in p["qas"])
    if not self.version_2:
      qas = {qa["id"]: qa for qa in _questions(dataset)}
      for qid, pred in predictions.items():
        self._rows[qid] = _v1_question(qas[qid], pred)
      return
    has_ans, exact, f1 = _raw_scores_v2(dataset, predictions)
    nn_exact = nn_f1 = {}
    if null_odds:
      _, nn_exact, nn_f1 = _raw_scores_v2(dataset, non_null)
      self._odds.update(null_odds)
    for qid, pred in predictions.items():
      self._rows[qid] = (has_ans[qid], exact[qid], f1[qid], bool(pred),
                         nn_exact.get(qid), nn_f1.get(qid), bool((non_null or {}).get(qid)))

  def result(self) -> dict[str, float]:
    order = [q for ids in self._titles.values() for q in ids]
    rows = self._rows
    if not self.version_2:
      em = f1 = 0
      for q in order:
        em += rows[q][0]
        f1 += rows[q][1]
      return {"exact_match": 100.0 * em / len(order), "f1": 100.0 * f1 / len(order)}
    has_ans = {q: rows[q][0] for q in order}
    column = lambda i: {q: rows[q][i] for q in order}  # noqa: E731
    nonempty = {q: r[3] for q, r in rows.items()}
    na_probs = self._odds or {q: 0.0 for q in rows}
    results = _v2_from_raw(has_ans, column(1), column(2), nonempty, na_probs, 1.0)
    if self._odds:
      results.update(_tuned_from_raw(has_ans, column(4), column(5),
                                     {q: r[6] for q, r in rows.items()}, self._odds))
    return results
