"""Natural Questions with the multi-grained graph encoder (NQ_BERT-DM): the Task."""
from __future__ import annotations

import logging

from poi_jax.data import parallel, shards
from poi_jax.data.features import nq_windows
from poi_jax.data.readers import nq as nq_reader
from poi_jax.eval import nq as nq_eval
from poi_jax.models import build
from poi_jax.tasks import base

MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "st_mask", "edge_src", "edge_tgt",
              "edge_type", "edge_pos", "start_positions", "end_positions", "paragraph_label",
              "answer_type")
METRIC = "long-best-threshold-f1"


def read(config, split):
  return nq_reader.read_nq(base.local_path(config, split), require_answers=split != "predict")


def feature_options(config, is_training: bool) -> dict:
  d, gr = config.data, config.model.graph
  return dict(max_seq_length=d.max_seq_length, window_step=d.nq.window_step,
              max_query_length=d.max_query_length, max_sentences=gr.max_sentences,
              max_paragraphs=gr.max_paragraphs, is_training=is_training,
              include_unknowns=d.nq.include_unknowns, seed=config.seed,
              max_position=d.nq.max_position)


def featurize(records, tokenizer, config, *, is_training: bool):
  """Windows + graphs of ``records`` in memory, built by ``data.num_workers`` worker processes
  (the engine reads feature shards instead: `shard_spec`)."""
  options = feature_options(config, is_training)
  features = parallel.featurize(
      nq_windows.build_nq_features, nq_windows.merge_nq_features, records, tokenizer, options,
      num_workers=config.data.num_workers,
      desc=f"nq {'train' if is_training else 'eval'} windows")
  if features.meta["graph_overflow"]:
    logging.warning("%d NQ windows have more sentences/paragraphs than the graph holds "
                    "(model.graph.max_sentences/max_paragraphs); their extra nodes are dropped",
                    features.meta["graph_overflow"])
  return features


def shard_spec(config, tokenizer, split: str) -> shards.ShardSpec:
  """NQ windows + graphs as feature shards (the windows of each page; the negative windows of
  training are sampled per page from ``seed`` and the page id, so shards change nothing)."""
  del tokenizer
  options = feature_options(config, split == "train")
  return shards.ShardSpec(
      kind="nq", build=nq_windows.build_nq_features, merge=nq_windows.merge_nq_features,
      options=options, key_options=dict(feature_version=nq_windows.FEATURE_VERSION,
                                        splitter=nq_windows.splitter_name()))


def graph_config(config, enc_cfg):
  from poi_jax.models import nq_graph
  gr = config.model.graph
  dropout = gr.dropout if gr.dropout >= 0 else enc_cfg.hidden_dropout_prob
  return nq_graph.GraphConfig(
      hidden=enc_cfg.hidden_size, num_heads=enc_cfg.num_attention_heads,
      intermediate_size=enc_cfg.intermediate_size, tokens=config.data.max_seq_length,
      sentences=gr.max_sentences, paragraphs=gr.max_paragraphs, num_layers=gr.num_layers,
      max_token_relative=gr.max_token_relative, max_sentence_relative=gr.max_sentence_relative,
      max_paragraph_relative=gr.max_paragraph_relative, dropout=dropout,
      init_std=enc_cfg.initializer_range, formulation=gr.formulation, dtype=config.model.dtype)


def build_model(config, rngs):
  from poi_jax.models import nq_graph
  if config.model.head != "graph":
    raise ValueError(f"model.head={config.model.head!r} is not an NQ head (known: graph)")
  enc_cfg = build.encoder_config(config)
  return nq_graph.NqGraphModel(enc_cfg, graph_config(config, enc_cfg), rngs=rngs)


def describe_head(config, model) -> str:
  g = config.model.graph
  layers = f"{g.num_layers} graph layer{'' if g.num_layers == 1 else 's'}"
  return f"graph ({layers}, {g.formulation} attention)"


def load_pretrained(model, checkpoint):
  from poi_jax.models import encoders
  return encoders.load_encoder_weights(model.bert, checkpoint)


def export_pretrained(model, directory, tokenizer=None):
  from poi_jax.models import encoders
  encoders.export_pretrained(model.bert, directory, tokenizer=tokenizer)


class NqEvaluator(base.Evaluator):
  """``predictions.json`` in the official format (``{"predictions": [...]}``, one per page, in
  order) and the official metrics, keeping one small tuple per page (`nq_eval.answer_stats`)."""

  def __init__(self, config, out_dir, *, score=True):
    super().__init__(config, out_dir, score=score)
    self.preds = self.open_json("predictions.json", list_key="predictions")
    self.long_stats: list = []
    self.short_stats: list = []
    self.annotated = False

  def add(self, records, features, outputs):
    preds = nq_eval.decode_nq(records, features, outputs,
                              max_answer_length=self.config.eval.max_answer_length)
    for p in preds:
      self.preds.append(p)
    if not self.score:
      return
    self.annotated = self.annotated or any(r.annotations for r in records)
    n = self.config.data.nq
    long_stats, short_stats = nq_eval.answer_stats(
        nq_eval.gold_labels(records), preds, n.long_non_null_threshold,
        n.short_non_null_threshold)
    self.long_stats += long_stats
    self.short_stats += short_stats

  def scores(self):
    if not self.annotated:
      raise ValueError(f"data.eval_file={self.config.data.eval_file!r} has no annotations to "
                       f"score against; use --mode=predict for predictions only")
    return nq_eval.metrics_from_stats(self.long_stats, self.short_stats)


TASKS = {"nq": base.Task(name="nq", metric=METRIC, read=read, featurize=featurize,
                         build_model=build_model, evaluator=NqEvaluator, model_keys=MODEL_KEYS,
                         load_pretrained=load_pretrained, export_pretrained=export_pretrained,
                         encoder_attr="bert", describe_head=describe_head,
                         shard_spec=shard_spec)}
