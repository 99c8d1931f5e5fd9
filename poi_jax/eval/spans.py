"""n-best span decoding across windows, SQuAD 2.0 null scores, and the best start <= end pair
of one sequence (`best_spans`)."""
from __future__ import annotations

import collections

import numpy as np

from poi_jax.data import buckets


def decode_squad(examples, features, start_logits: np.ndarray, end_logits: np.ndarray, *,
                 n_best_size: int = 20, max_answer_length: int = 30,
                 version_2_with_negative: bool = True, null_score_diff_threshold: float = 0.0,
                 with_offsets: bool = False):
  """Best answer per example from window logits ``(N, L)``.

  Candidates: the ``n_best_size`` best starts x ends of each window inside the context, with
  ``start <= end < start + max_answer_length``; score = start + end logit; text = the context
  between the offsets. SQuAD 2.0: the null score is the smallest [CLS] score ``s_0 + e_0`` over
  the example's windows; the answer is "" when ``null - best > null_score_diff_threshold``.
  Returns ``(predictions id -> text, nbest id -> list, null_odds id -> float)``.
  ``with_offsets``: each n-best span also gets ``start`` / ``end``, its character offsets in the
  context (``end`` exclusive; None for the null answer).
  """
  offsets = features.meta["offsets"]
  # Positions past a window's real tokens are padding: never a candidate, so that a prediction
  # does not depend on how far its window was padded (length buckets: poi_jax/data/buckets.py).
  lengths = (buckets.window_lengths(features.arrays)
             if "attention_mask" in features.arrays else None)
  by_example = collections.defaultdict(list)
  for f, ei in enumerate(features.arrays["example_index"]):
    by_example[int(ei)].append(f)
  preds, nbest_all, null_odds = {}, {}, {}
  for ei, ex in enumerate(examples):
    cands, null = [], None
    for f in by_example.get(ei, []):
      s, e, off = start_logits[f], end_logits[f], offsets[f]
      if lengths is not None:
        s, e, off = s[:lengths[f]], e[:lengths[f]], off[:lengths[f]]
      score_null = float(s[0] + e[0])
      null = score_null if null is None or score_null < null else null
      cands.extend(_window_candidates(s, e, off, n_best_size, max_answer_length))
    cands.sort(key=lambda c: -c[0])
    nbest = [{"text": ex.context[a:b], "start_logit": sl, "end_logit": el, "score": sc,
              **({"start": a, "end": b} if with_offsets else {})}
             for sc, a, b, sl, el in cands[:n_best_size]]
    if version_2_with_negative and null is not None:
      nbest.append({"text": "", "start_logit": None, "end_logit": None, "score": null,
                    **({"start": None, "end": None} if with_offsets else {})})
      nbest.sort(key=lambda c: -c["score"])
    scores = np.array([c["score"] for c in nbest]) if nbest else np.zeros(0)
    probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum() if nbest else []
    for c, p in zip(nbest, probs):
      c["probability"] = float(p)
    best = next((c for c in nbest if c["text"]), None)
    if not version_2_with_negative:
      preds[ex.qid] = best["text"] if best else ""
    else:
      diff = null - (best["score"] if best else -1e30) if null is not None else 0.0
      null_odds[ex.qid] = float(diff)
      preds[ex.qid] = "" if (best is None or diff > null_score_diff_threshold) else best["text"]
    nbest_all[ex.qid] = nbest
  return preds, nbest_all, null_odds


def _window_candidates(s: np.ndarray, e: np.ndarray, off: np.ndarray, n_best_size: int,
                       max_answer_length: int) -> list[tuple]:
  """One window's candidates ``(score, char start, char end, start logit, end logit)``: the
  ``n_best_size`` best starts x ends (``s, e (L,)``, ``off (L, 2)``) inside the context with
  ``start <= end < start + max_answer_length``, in the order of the nested loop over starts then
  ends, best first (the order ties keep after the stable sort), computed as one (n, n) grid
  instead of n^2 Python iterations."""
  i = np.argsort(s)[::-1][:n_best_size]
  j = np.argsort(e)[::-1][:n_best_size]
  ii, jj = i[:, None], j[None, :]
  ok = ((off[ii, 0] >= 0) & (off[jj, 0] >= 0) & (jj >= ii)
        & (jj - ii + 1 <= max_answer_length))
  a, b = np.nonzero(ok)  # row-major: the nested loop's order
  si, ej = s[i[a]], e[j[b]]
  # float32 sums as the loop computed them (s[i] + e[j] in the logits' dtype), then floats.
  return list(zip((si + ej).tolist(), off[i[a], 0].tolist(), off[j[b], 1].tolist(),
                  si.tolist(), ej.tolist()))


def best_spans(start_logits: np.ndarray, end_logits: np.ndarray,
               max_length: int | None = None) -> np.ndarray:
  """allennlp ``get_best_span``: argmax of ``start[s] + end[e]`` over ``s <= e`` (no length cap
  unless ``max_length``) -> ``(B, 2)`` inclusive."""
  start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
  t = start_logits.shape[1]
  scores = start_logits[:, :, None] + end_logits[:, None, :]
  valid = np.triu(np.ones((t, t), bool))
  if max_length is not None:
    valid &= ~np.triu(np.ones((t, t), bool), k=max_length)
  scores = np.where(valid[None], scores, -np.inf)
  flat = scores.reshape(len(scores), -1).argmax(-1)
  return np.stack([flat // t, flat % t], axis=-1)


def best_non_null(nbest: dict[str, list]) -> dict[str, str]:
  """The best non-empty answer of each question of ``decode_squad``'s n-best lists ("" when a
  question has no span candidate)."""
  return {qid: next((c["text"] for c in cands if c["text"]), "") for qid, cands in nbest.items()}
