"""SQuAD 1.1 / 2.0 (extractive): POI-Net or the plain encoder, official SQuAD metrics."""
from __future__ import annotations

import functools
import json
import logging
import os

from poi_jax.data import parallel, readers, shards
from poi_jax.data.features import extractive
from poi_jax.data.features.extractive import build_extractive_features, check_options
from poi_jax.data.pos import pos_version
from poi_jax.data.readers import tfds as tfds_reader
from poi_jax.eval import spans, squad
from poi_jax.models import build
from poi_jax.tasks import base

MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "pos_tags", "con_start",
              "con_end", "start_positions", "end_positions")
# Cut to a batch's length bucket (poi_jax/data/buckets.py): the encoder masks padding in
# attention and counts positions from 0; the co-attention's domains lie inside the real tokens.
LENGTH_KEYS = ("input_ids", "attention_mask", "token_type_ids", "pos_tags")
LENGTH_OUTPUTS = {"start_logits": float("-inf"), "end_logits": float("-inf"),
                  "token_scores": 0.0}


def tfds_source(config, split: str) -> str | None:
  """``data.<split>_file`` when it is a ``tfds:`` source (predict falls back to eval), else None."""
  path = getattr(config.data, f"{split}_file")
  if split == "predict" and not path:
    path, split = config.data.eval_file, "eval"
  return path if path.startswith("tfds:") else None


def tfds_hint(config, split: str) -> str:
  return f" (--config.data.{split}_file=<local file>, e.g. ../shared/data/...)"


def read(config, split):
  """The split's questions; only the answerable ones with ``data.answerable_only`` (SQuAD
  1.1-style training and scoring on a SQuAD 2.0 file)."""
  source = tfds_source(config, split)
  if source:
    records = tfds_reader.read_tfds(source, require_answers=split != "predict",
                                    hint=tfds_hint(config, split))
  else:
    records = readers.read_squad(base.local_path(config, split),
                                 require_answers=split != "predict")
  if config.data.get("answerable_only", False):
    records = [r for r in records if not r.is_impossible]
  return records


def feature_options(config, is_training: bool) -> dict:
  """Every option of `build_extractive_features` that the config sets (also the cache key)."""
  d = config.data
  with_pos = base.uses_pos(config)
  return dict(max_seq_length=d.max_seq_length, doc_stride=d.doc_stride,
              max_query_length=d.max_query_length, is_training=is_training, with_pos=with_pos,
              pos_alignment=d.pos_alignment, pos_lowercase=d.pos_lowercase)


def _key_options(options: dict) -> dict:
  return dict(feature_version=extractive.FEATURE_VERSION,
              nltk=pos_version() if options["with_pos"] else None)


def _check(tokenizer, options: dict) -> None:
  check_options(tokenizer, max_seq_length=options["max_seq_length"],
                doc_stride=options["doc_stride"], max_query_length=options["max_query_length"],
                pos_alignment=options["pos_alignment"])


def featurize(records, tokenizer, config, *, is_training: bool):
  """Extractive features of ``records`` in memory, built by ``data.num_workers`` worker
  processes (the engine reads feature shards instead: `shard_spec`)."""
  options = feature_options(config, is_training)
  _check(tokenizer, options)
  features = parallel.featurize(
      build_extractive_features, extractive.merge_extractive_features, records, tokenizer,
      options, num_workers=config.data.num_workers,
      desc=f"{config.task} {'train' if is_training else 'eval'} features")
  if features.meta["skipped_mismatch"]:
    logging.warning("%d answers whose text does not match the context at answer_start were %s "
                    "(as the original pipeline does), e.g. %s",
                    len(features.meta["skipped_mismatch"]),
                    "skipped" if is_training else "kept unlabelled",
                    features.meta["skipped_mismatch"][:5])
  return features


def shard_spec(config, tokenizer, split: str) -> shards.ShardSpec:
  """The extractive features of ``split`` as feature shards (windows of each question)."""
  is_training = split == "train"
  options = feature_options(config, is_training)
  _check(tokenizer, options)
  return shards.ShardSpec(
      kind="extractive", build=build_extractive_features,
      merge=extractive.merge_extractive_features, options=options,
      key_options=_key_options(options),
      validate=(functools.partial(base.validate_model_batch, model_keys=MODEL_KEYS)
                if is_training else None))


def build_model(config, rngs):
  from poi_jax.models import poi_net
  m = config.model
  enc_cfg = build.encoder_config(config)
  cls = poi_net.PoiNetForQuestionAnswering
  if m.head == "poi":
    return cls(enc_cfg, **m.coattention, pos_embedding=m.pos_embedding, rngs=rngs)
  if m.head == "none":
    return cls(enc_cfg, variant="none", pos_embedding=False, rngs=rngs)
  raise ValueError(f"model.head={m.head!r} is not an extractive head for task {config.task!r} "
                   f"(known: poi, none)")


def describe_head(config, model) -> str:
  """``poi (co-attention paper, POS embedding on)``, ``duma (DUMA paper, k=2, ...)``, ``none``."""
  m = config.model
  detail = {"poi": lambda: f"co-attention {m.coattention.variant}",
            "duma": lambda: f"DUMA {m.duma.variant}, k={m.duma.num_layers}"}.get(m.head)
  pos = getattr(model, "pos_embeddings", None) is not None
  return (f"{m.head} ({detail() + ', ' if detail else ''}POS embedding "
          f"{'on' if pos else 'off'})")


def load_pretrained(model, checkpoint):
  from poi_jax.models import poi_net
  return poi_net.load_pretrained_into(model, checkpoint)


def export_pretrained(model, directory, tokenizer=None):
  from poi_jax.models import encoders
  encoders.export_pretrained(model.encoder, directory, tokenizer=tokenizer,
                             extra_tensors=model.export_tensors())


def restrict(dataset: list, qids: set) -> list:
  """The SQuAD ``data`` list with only the questions in ``qids`` (an evaluation on a subset must
  not count the others as missing: the official v2 script counts them as NoAns)."""
  out = []
  for article in dataset:
    paras = [dict(p, qas=[qa for qa in p["qas"] if qa["id"] in qids])
             for p in article["paragraphs"]]
    out.append(dict(article, paragraphs=[p for p in paras if p["qas"]]))
  return out


def gold_dataset(records) -> list[dict]:
  """The SQuAD ``data`` list of exactly the evaluated ``records`` (one paragraph per question,
  grouped by title), built from the records so that TFDS sources and capped files are scored
  alike; written beside the predictions as ``gold.json``, so the official evaluator scores the
  run as it is."""
  articles: dict[str, list] = {}
  for r in records:
    qa = {"id": r.qid, "question": r.question, "answers": list(r.answers)}
    if r.is_impossible:
      qa["is_impossible"] = True
    articles.setdefault(r.title, []).append({"context": r.context, "qas": [qa]})
  return [{"title": title, "paragraphs": paras} for title, paras in articles.items()]


class SquadEvaluator(base.Evaluator):
  """``predictions.json`` (qid -> text), ``nbest_predictions.json``, SQuAD 2.0:
  ``null_odds.json``; when scoring, ``gold.json`` (`gold_dataset` of the evaluated records) and
  the official scores (`poi_jax.eval.squad.StreamedScores`), a chunk of questions at a time.
  The gold paragraphs are spooled to a file as they come and grouped by title at the end, so
  ``gold.json`` equals `gold_dataset` of the whole split while memory holds their offsets."""

  def __init__(self, config, out_dir, *, score=True, version_2: bool):
    super().__init__(config, out_dir, score=score)
    self.version_2 = version_2
    self.preds = self.open_json("predictions.json")
    self.nbest = self.open_json("nbest_predictions.json")
    self.odds = self.open_json("null_odds.json") if version_2 else None
    self.scorer = squad.StreamedScores(version_2)
    self._spool = open(os.path.join(out_dir, ".gold-paragraphs"), "w+b") if score else None
    self._titles: dict[str, list[tuple[int, int]]] = {}  # title -> its paragraphs' spool spans

  def add(self, records, features, outputs):
    e = self.config.eval
    preds, nbest, odds = spans.decode_squad(
        records, features, outputs["start_logits"], outputs["end_logits"],
        n_best_size=e.n_best_size, max_answer_length=e.max_answer_length,
        version_2_with_negative=self.version_2,
        null_score_diff_threshold=e.null_score_diff_threshold)
    for qid in preds:
      self.preds.add(qid, preds[qid])
      self.nbest.add(qid, nbest[qid])
      if self.odds is not None:
        self.odds.add(qid, odds[qid])
    if not self.score:
      return
    dataset = gold_dataset(records)
    for article in dataset:
      spans_ = self._titles.setdefault(article["title"], [])
      for para in article["paragraphs"]:
        line = json.dumps(para).encode()
        spans_.append((self._spool.tell(), len(line)))
        self._spool.write(line)
    self.scorer.add(dataset, preds, odds if self.version_2 else None,
                    spans.best_non_null(nbest) if self.version_2 and odds else None)

  def scores(self):
    gold = self.open_json("gold.json", list_key="data",
                          head={"version": "v2.0" if self.version_2 else "1.1"})
    for title, paragraphs in self._titles.items():  # one article in memory at a time
      paras = []
      for offset, size in paragraphs:
        self._spool.seek(offset)
        paras.append(json.loads(self._spool.read(size)))
      gold.append({"title": title, "paragraphs": paras})
    gold.close()
    self._close_spool()
    return self.scorer.result()

  def _close_spool(self):
    if self._spool is not None and not self._spool.closed:
      self._spool.close()
      os.remove(self._spool.name)

  def __exit__(self, exc_type, exc, tb):
    self._close_spool()
    return super().__exit__(exc_type, exc, tb)


def reader_featurize(records, tokenizer, config, passages):
  """The Reader's windows: `featurize`'s at evaluation, with the Reader's passage cache and in
  chunks of 256 (a server's batch is one chunk: one tokenizer call)."""
  options = {**feature_options(config, is_training=False), "passages": passages}
  return parallel.featurize(build_extractive_features, extractive.merge_extractive_features,
                            records, tokenizer, options, chunk_size=256,
                            desc=f"{config.task} eval features")


def _task(name, version_2):
  return base.Task(name=name, metric="f1", read=read, featurize=featurize,
                   answers="span", null_answers=version_2, reader_featurize=reader_featurize,
                   build_model=build_model,
                   evaluator=functools.partial(SquadEvaluator, version_2=version_2),
                   model_keys=MODEL_KEYS, load_pretrained=load_pretrained,
                   export_pretrained=export_pretrained, describe_head=describe_head,
                   shard_spec=shard_spec, length_keys=LENGTH_KEYS,
                   length_outputs=LENGTH_OUTPUTS)


TASKS = {"squad1": _task("squad1", False), "squad2": _task("squad2", True)}
