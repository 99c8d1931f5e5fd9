"""NewsQA and NLQuAD with QOPN (`poi_jax.models.qopn`): long articles read as at most
``data.qopn.max_segments`` non-overlapping segments, one softmax over the whole article.

* ``newsqa``: the combined JSON of Maluuba's tool (`poi_jax.data.readers.newsqa`), stories of
  ``data.qopn.train_split`` / ``eval_split``; EM/F1 (SQuAD v1.1 rules) against every crowd answer.
* ``nlquad``: SQuAD v1.1 JSON (`poi_jax.data.readers.nlquad`); EM/F1 and NLQuAD's word-position
  IoU (`poi_jax.eval.iou`).

Predictions go to ``<workdir>/predictions.json`` (qid -> text) and ``prediction_spans.json``
(qid -> ``{text, start, end, score}``, characters in the article), written atomically.
"""
from __future__ import annotations

import logging

from poi_jax.data import shards
from poi_jax.data.features import segments
from poi_jax.data.readers.newsqa import read_newsqa
from poi_jax.data.readers.nlquad import read_nlquad
from poi_jax.eval import iou
from poi_jax.models import build
from poi_jax.tasks import base

MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "question_rows", "segment_mask",
              "span_mask", "start_positions", "end_positions")
HEADS = ("qopn",)
_HINT = {
    "newsqa": "NewsQA's combined JSON (built with Maluuba's newsqa tool; not downloadable "
              "offline)",
    "nlquad": "an NLQuAD SQuAD-v1.1 JSON file (train/val/eval)",
}


def read(config, split):
  name = f"{split}_file"
  if not getattr(config.data, name) and not (split == "predict" and config.data.eval_file):
    raise FileNotFoundError(f"data.{name} is empty: pass {_HINT[config.task]} with "
                            f"--config.data.{name}=... (docs/qopn.md shows how to build a "
                            f"long-article file from ../shared/data/squad2 for a smoke run)")
  path = base.local_path(config, split)
  if config.task == "newsqa":
    q = config.data.qopn
    return read_newsqa(path, q.train_split if split == "train" else q.eval_split)
  return read_nlquad(path, require_answers=split != "predict")


def feature_options(config, is_training: bool) -> dict:
  d = config.data
  return dict(max_seq_length=d.max_seq_length, max_query_length=d.max_query_length,
              max_segments=d.qopn.max_segments, is_training=is_training)


def _check(tokenizer, options: dict) -> None:
  segments.check_options(tokenizer, max_seq_length=options["max_seq_length"],
                         max_query_length=options["max_query_length"],
                         max_segments=options["max_segments"])


def _report(features, options: dict, is_training: bool) -> None:
  m = features.meta
  if is_training and (m["dropped_cut"] or m["dropped_unmappable"]):
    logging.warning("QOPN: %d training questions dropped because their answer lies past the "
                    "last of %d segments, %d because it covers no token", m["dropped_cut"],
                    options["max_segments"], m["dropped_unmappable"])
  if m["truncated_articles"]:
    logging.info("QOPN: %d questions' articles were cut after %d segments",
                 m["truncated_articles"], options["max_segments"])


def featurize(records, tokenizer, config, *, is_training: bool):
  """QOPN segment features of ``records`` in memory (the engine reads feature shards instead:
  `shard_spec`)."""
  options = feature_options(config, is_training)
  _check(tokenizer, options)
  features = segments.build_segment_features(records, tokenizer, **options)
  _report(features, options, is_training)
  if not len(features.arrays["input_ids"]):
    raise ValueError(f"no {'training' if is_training else 'evaluation'} questions left after "
                     f"segmenting ({features.meta['dropped_cut']} answers past the last segment)")
  return features


def shard_spec(config, tokenizer, split: str) -> shards.ShardSpec:
  """QOPN segment features as feature shards (one row per kept question)."""
  options = feature_options(config, split == "train")
  _check(tokenizer, options)
  q = config.data.qopn
  return shards.ShardSpec(
      kind="qopn_segments", build=segments.build_segment_features,
      merge=segments.merge_segment_features, options=options,
      key_options=dict(feature_version=segments.FEATURE_VERSION),
      read_options=({"stories": q.train_split if split == "train" else q.eval_split}
                    if config.task == "newsqa" else {}))


def question_window(config) -> int:
  """Static bound on the question rows (1 + question tokens) for the model."""
  d = config.data
  if d.max_query_length >= 0:
    return d.max_query_length + 1
  return d.max_seq_length - 1


def build_model(config, rngs):
  from poi_jax.models import qopn
  m = config.model
  if m.head not in HEADS:
    raise ValueError(f"model.head={m.head!r} is not a head for task {config.task!r} (known: "
                     f"{', '.join(HEADS)}; the sliding-window baseline is configs/squad1.py "
                     f"with model.head=none)")
  return qopn.QopnForQuestionAnswering(build.encoder_config(config), **m.qopn,
                                       question_window=question_window(config), rngs=rngs)


def describe_head(config, model) -> str:
  q = config.model.qopn
  return f"qopn ({q.num_blocks} {q.block_style} blocks)"


def load_pretrained(model, checkpoint):
  from poi_jax.models import encoders
  return encoders.load_encoder_weights(model.encoder, checkpoint)


def export_pretrained(model, directory, tokenizer=None):
  from poi_jax.models import encoders
  encoders.export_pretrained(model.encoder, directory, tokenizer=tokenizer)


class QopnEvaluator(base.Evaluator):
  """``predictions.json`` (qid -> text), ``prediction_spans.json`` (qid -> ``{text, start, end,
  score}``) and EM/F1 (NLQuAD: also IoU, precision, recall) from running sums
  (`poi_jax.eval.iou.SpanScores`)."""

  def __init__(self, config, out_dir, *, score=True):
    super().__init__(config, out_dir, score=score)
    self.preds = self.open_json("predictions.json")
    self.detail = self.open_json("prediction_spans.json")
    self.spans = iou.SpanScores()

  def add(self, records, features, outputs):
    from poi_jax.models import qopn
    m = features.meta
    decoded = qopn.decode_spans(outputs["start_logits"], outputs["end_logits"],
                                m["token_index"], m["offsets"], m["contexts"],
                                self.config.eval.max_answer_length)
    char_spans = {}
    for qid, (text, a, b, score) in zip(m["qids"], decoded):
      self.preds.add(qid, text)
      self.detail.add(qid, {"text": text, "start": a, "end": b, "score": score})
      char_spans[qid] = (a, b)
    if self.score:
      self.spans.add(records, char_spans)

  def scores(self):
    scores = self.spans.result()
    if self.config.task == "newsqa":
      scores = {k: scores[k] for k in ("exact_match", "f1")}
    return scores


def probe_records():
  """One answered question on a 400-word article (`poi_jax.sizing`'s shape probe)."""
  from poi_jax.data.records import SquadExample
  words = " ".join(f"word{i % 50}" for i in range(400))
  return [SquadExample("q0", "what is it?", words, [{"text": "word0", "answer_start": 0}],
                       False, [], "probe", "probe")]


def _task(name):
  return base.Task(name=name, metric="f1", read=read, featurize=featurize,
                   probe_records=probe_records,
                   build_model=build_model, evaluator=QopnEvaluator, model_keys=MODEL_KEYS,
                   load_pretrained=load_pretrained, export_pretrained=export_pretrained,
                   describe_head=describe_head, shard_spec=shard_spec)


TASKS = {"newsqa": _task("newsqa"), "nlquad": _task("nlquad")}
