"""The Task seam (DESIGN.md): everything task-specific the engine needs, behind one interface.

A Task reads records, turns them into fixed-shape features, builds the model, decodes logits to
predictions and scores them. The engine (`poi_jax.train.loop`) knows only this interface and the
arrays' shapes.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import numpy as np

from poi_jax.data import readers
from poi_jax.data.features.extractive import Features, build_extractive_features
from poi_jax.data.features.multiple_choice import build_choice_features
from poi_jax.eval import choice, spans, squad

MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "pos_tags", "con_start",
              "con_end", "p_end", "q_start", "q_end", "start_positions", "end_positions",
              "labels")


def _local(path: str, split: str) -> str:
  if path.startswith("tfds:") or not path:
    raise FileNotFoundError(
        f"data.{split}_file={path!r} is a TensorFlow Datasets source, which needs network and "
        f"`pip install -e \".[tfds]\"`; pass a local file instead, e.g. "
        f"--config.data.{split}_file=../shared/data/squad2/squad2-dev-subset.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"data.{split}_file={path!r} does not exist")
  return path


def _subset(records, n):
  return records if n is None or n < 0 else records[:n]


@dataclasses.dataclass
class Task:
  name: str
  kind: str  # extractive | choice
  read: Callable[[Any, str], list]
  metric: str

  def featurize(self, records, tokenizer, config, *, is_training: bool) -> Features:
    d = config.data
    with_pos = config.model.pos_embedding
    if self.kind == "extractive":
      return build_extractive_features(records, tokenizer, max_seq_length=d.max_seq_length,
                                       doc_stride=d.doc_stride,
                                       max_query_length=d.max_query_length,
                                       is_training=is_training, with_pos=with_pos)
    return build_choice_features(records, tokenizer, max_seq_length=d.max_seq_length,
                                 with_pos=with_pos)

  def evaluate(self, config, records, features, outputs: dict[str, np.ndarray], workdir: str,
               source_path: str) -> dict[str, float]:
    if self.kind == "extractive":
      e = config.eval
      v2 = self.name == "squad2"
      preds, nbest, odds = spans.decode_squad(
          records, features, outputs["start_logits"], outputs["end_logits"],
          n_best_size=e.n_best_size, max_answer_length=e.max_answer_length,
          version_2_with_negative=v2, null_score_diff_threshold=e.null_score_diff_threshold)
      spans.write_json_atomic(os.path.join(workdir, "predictions.json"), preds)
      spans.write_json_atomic(os.path.join(workdir, "nbest_predictions.json"), nbest)
      with open(source_path) as f:
        dataset = _restrict(json.load(f)["data"], {r.qid for r in records})
      if v2:
        spans.write_json_atomic(os.path.join(workdir, "null_odds.json"), odds)
        return squad.squad_v2_evaluate(dataset, preds, odds if odds else None)
      return squad.squad_v1_evaluate(dataset, preds)
    acc = choice.choice_accuracy(outputs["logits"], features.arrays["labels"],
                                 features.meta["levels"])
    preds = {qid: int(p) for qid, p in zip(features.meta["ids"],
                                           np.asarray(outputs["logits"]).argmax(-1))}
    spans.write_json_atomic(os.path.join(workdir, "predictions.json"), preds)
    return acc


def _restrict(dataset: list, qids: set) -> list:
  """The SQuAD ``data`` list with only the questions in ``qids`` (an evaluation on a subset must
  not count the others as missing)."""
  out = []
  for article in dataset:
    paras = [dict(p, qas=[qa for qa in p["qas"] if qa["id"] in qids])
             for p in article["paragraphs"]]
    out.append(dict(article, paragraphs=[p for p in paras if p["qas"]]))
  return out


def _read_squad(config, split):
  path = _local(getattr(config.data, f"{split}_file"), split)
  return readers.read_squad(path)


def _read_race(config, split):
  path = _local(getattr(config.data, f"{split}_file"), split)
  return readers.read_race(path, config.data.race_level)


def _read_dream(config, split):
  path = _local(getattr(config.data, f"{split}_file"), split)
  return readers.read_dream(path)


TASKS = {
    "squad1": Task("squad1", "extractive", _read_squad, "f1"),
    "squad2": Task("squad2", "extractive", _read_squad, "f1"),
    "race": Task("race", "choice", _read_race, "accuracy"),
    "dream": Task("dream", "choice", _read_dream, "accuracy"),
}


def get_task(name: str) -> Task:
  try:
    return TASKS[name]
  except KeyError:
    raise ValueError(f"unknown task {name!r}; known: {sorted(TASKS)}") from None
