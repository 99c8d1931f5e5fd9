"""NarrativeQA (summary setting) with DASSA: `QanetDassa` (``model.head=qanet_dassa``) or DASSA
layers on a pretrained encoder (``model.head=encoder_dassa``); Rouge-L / BLEU-1 as pycocoevalcap.

Training labels come from the span oracle (`poi_jax.data.features.oracle`); training passages are
cut to ``data.narrativeqa.train_passage_tokens`` (800) and questions whose oracle span ends past
the cut (or that have no overlapping span at all) are skipped (counted in ``meta``). Evaluation
passages are cut to ``eval_passage_tokens``. Predictions (qid -> answer text, the span's tokens
joined by spaces) go to ``<workdir>/predictions.json``.
"""
from __future__ import annotations

import json

import numpy as np

from poi_jax.data.features import offline_views, oracle
from poi_jax.data.features import views as views_lib
from poi_jax.data.features import vocab as vocab_lib
from poi_jax.data.features.base import Features
from poi_jax.data.readers import narrativeqa as reader
from poi_jax.eval import rouge_bleu, spans
from poi_jax.tasks import base

QANET_KEYS = ("passage_words", "passage_chars", "passage_mask", "question_words",
              "question_chars", "question_mask", "view_labels", "view_scopes", "span_start",
              "span_end")
ENCODER_KEYS = ("input_ids", "attention_mask", "token_type_ids", "view_labels", "view_scopes",
                "start_positions", "end_positions")
HEADS = ("qanet_dassa", "encoder_dassa")


def read(config, split):
  n = config.data.narrativeqa
  path = base.local_path(config, split)
  which = n.train_set if split == "train" else n.eval_set
  records = reader.read_narrativeqa(path, which, summaries_path=n.summaries_file or None)
  return offline_views.with_offline_views(records, lexicon_path=config.model.dassa.lexicon or None)


def _doc_views(config, doc, cache):
  if doc.doc_id not in cache:
    d = config.model.dassa
    cache[doc.doc_id] = views_lib.document_views(
        doc, d.heads, coref_max_clusters=d.coref_max_clusters, coref_keep=d.coref_keep,
        nonexplicit_types=tuple(d.nonexplicit_types))
  return cache[doc.doc_id]


def _round_up(n: int, k: int = 16) -> int:
  return max(k, -(-n // k) * k)


def _labelled(records, config, is_training, cut):
  """(record, context tokens, (start, end) or None) for the records that are kept."""
  n = config.data.narrativeqa
  kept, skipped = [], 0
  for r in records:
    ctx = r.document.tokens
    span = None
    if is_training:
      s, e, score, _ = oracle.best_oracle_span(ctx, [a.split() for a in r.answers], r.question,
                                               window=n.oracle_window)
      if s < 0 or e >= cut or score <= 0:
        skipped += 1
        continue
      span = (s, e)
    kept.append((r, ctx[:cut], span))
  return kept, skipped


def featurize(records, tokenizer, config, *, is_training: bool):
  if config.model.head == "encoder_dassa":
    return _featurize_encoder(records, tokenizer, config, is_training=is_training)
  n, qc = config.data.narrativeqa, config.model.qanet
  cut = n.train_passage_tokens if is_training else n.eval_passage_tokens
  kept, skipped = _labelled(records, config, is_training, cut)
  if not kept:
    raise ValueError(f"no {'training' if is_training else 'evaluation'} examples left "
                     f"({skipped} without an oracle span within {cut} tokens)")
  indexer = vocab_lib.WordIndexer(qc.vocab_size, _glove(config)[0])
  lc = _round_up(max(len(c) for _, c, _ in kept))
  lq = _round_up(min(max(len(r.question) for r, _, _ in kept), n.max_question_tokens))
  n_views = sum(k for _, k in views_lib.parse_heads(config.model.dassa.heads))
  w = qc.max_word_chars
  count = len(kept)
  arrays = {
      "passage_words": np.zeros((count, lc), np.int32),
      "passage_chars": np.zeros((count, lc, w), np.int32),
      "passage_mask": np.zeros((count, lc), np.int32),
      "question_words": np.zeros((count, lq), np.int32),
      "question_chars": np.zeros((count, lq, w), np.int32),
      "question_mask": np.zeros((count, lq), np.int32),
      "span_start": np.zeros(count, np.int32),
      "span_end": np.zeros(count, np.int32),
  }
  if n_views:
    arrays["view_labels"] = np.zeros((count, n_views, lc), np.int32)
    arrays["view_scopes"] = np.zeros((count, n_views, lc), np.int32)
  cache: dict = {}
  for i, (r, ctx, span) in enumerate(kept):
    q = r.question[:n.max_question_tokens]
    for prefix, toks in (("passage", ctx), ("question", q)):
      arrays[f"{prefix}_words"][i, :len(toks)] = [indexer(t) for t in toks]
      arrays[f"{prefix}_chars"][i, :len(toks)] = [vocab_lib.char_ids(t, w) for t in toks]
      arrays[f"{prefix}_mask"][i, :len(toks)] = 1
    if n_views:
      labels, scopes = views_lib.crop(*_doc_views(config, r.document, cache), len(ctx))
      arrays["view_labels"][i, :, :len(ctx)] = labels
      arrays["view_scopes"][i, :, :len(ctx)] = scopes
    if span is not None:
      arrays["span_start"][i], arrays["span_end"][i] = span
  meta = {"qids": [r.qid for r, _, _ in kept], "contexts": [c for _, c, _ in kept],
          "references": {r.qid: r.answers for r in records}, "skipped": skipped}
  return Features(arrays, meta)


def _featurize_encoder(records, tokenizer, config, *, is_training: bool):
  """``[CLS] question [SEP] passage words [SEP]`` cut to ``data.max_seq_length`` sub-tokens;
  each sub-token carries the view labels and scopes of its word (question and special tokens:
  0, so the per-head defaults). One window per question: the passage is cut to what fits."""
  n = config.data.narrativeqa
  length = config.data.max_seq_length
  kept, skipped = _labelled(records, config,
                            is_training, n.train_passage_tokens if is_training
                            else n.eval_passage_tokens)
  n_views = sum(k for _, k in views_lib.parse_heads(config.model.dassa.heads))
  cols = {k: [] for k in ENCODER_KEYS}
  meta = {"qids": [], "contexts": [], "word_of_token": [],
          "references": {r.qid: r.answers for r in records}, "skipped": skipped}
  cache: dict = {}
  for r, ctx, span in kept:
    enc = tokenizer(r.question[:n.max_question_tokens], ctx, is_split_into_words=True,
                    truncation="only_second", max_length=length, padding="max_length")
    seq = enc.sequence_ids()
    words = enc.word_ids()
    word_of = np.array([w if s == 1 and w is not None else -1 for s, w in zip(seq, words)])
    start = end = 0
    if span is not None:
      toks_s = np.nonzero(word_of == span[0])[0]
      toks_e = np.nonzero(word_of == span[1])[0]
      if not len(toks_s) or not len(toks_e):
        meta["skipped"] += 1  # the span lies past the window
        continue
      start, end = int(toks_s[0]), int(toks_e[-1])
    labels = np.zeros((n_views, length), np.int32)
    scopes = np.zeros((n_views, length), np.int32)
    if n_views:
      lab, sco = _doc_views(config, r.document, cache)
      real = word_of >= 0
      labels[:, real] = lab[:, word_of[real]]
      scopes[:, real] = sco[:, word_of[real]]
    cols["input_ids"].append(enc["input_ids"])
    cols["attention_mask"].append(enc["attention_mask"])
    cols["token_type_ids"].append(enc.get("token_type_ids", [0] * length))
    cols["view_labels"].append(labels)
    cols["view_scopes"].append(scopes)
    cols["start_positions"].append(start)
    cols["end_positions"].append(end)
    meta["qids"].append(r.qid)
    meta["contexts"].append(ctx)
    meta["word_of_token"].append(word_of)
  if not meta["qids"]:
    raise ValueError("no examples left after the oracle and the window cut")
  arrays = {k: np.asarray(v, np.int32) for k, v in cols.items()}
  if not n_views:
    del arrays["view_labels"], arrays["view_scopes"]
  return Features(arrays, meta)


def _glove(config):
  qc = config.model.qanet
  if not qc.glove_file:
    return None, None
  return vocab_lib.read_glove(qc.glove_file, qc.word_dim, qc.max_glove_words)


def build_model(config, rngs):
  m, d = config.model, config.model.dassa
  if m.head not in HEADS:
    raise ValueError(f"model.head={m.head!r} is not a NarrativeQA head (known: {HEADS})")
  n_views = sum(k for _, k in views_lib.parse_heads(d.heads))
  if m.head == "qanet_dassa":
    from poi_jax.models import qanet_dassa
    qc = m.qanet
    if n_views > qc.num_heads:
      raise ValueError(f"model.dassa.heads={d.heads!r} needs {n_views} heads, the model has "
                       f"{qc.num_heads}")
    labels = d.num_semantic_labels if d.num_semantic_labels > 0 else \
        views_lib.num_semantic_labels(qc.num_heads)
    _, vectors = _glove(config)
    return qanet_dassa.QanetDassa(
        vocab_size=qc.vocab_size if vectors is None else len(vectors), word_dim=qc.word_dim,
        char_dim=qc.char_dim, char_filters=qc.char_filters, hidden=qc.hidden,
        num_heads=qc.num_heads, embedding_convs=qc.embedding_convs,
        embedding_kernel=qc.embedding_kernel, modeling_blocks=qc.modeling_blocks,
        modeling_convs=qc.modeling_convs, modeling_kernel=qc.modeling_kernel,
        modeling_passes=qc.modeling_passes, dassa_blocks=tuple(d.blocks),
        semantic_emb_dim=d.semantic_emb_dim, num_semantic_labels=labels, dassa_mode=d.mode,
        replace_zero_labels=d.replace_zero_labels, dropout=qc.dropout,
        layer_dropout=qc.layer_dropout, word_vectors=vectors, rngs=rngs)
  from poi_jax.models import build, dassa_encoder
  enc_cfg = build.encoder_config(config)
  heads = d.encoder_heads if d.encoder_heads > 0 else enc_cfg.num_attention_heads
  if n_views > heads:
    raise ValueError(f"model.dassa.heads={d.heads!r} needs {n_views} heads, the DASSA layers "
                     f"have {heads}")
  labels = d.num_semantic_labels if d.num_semantic_labels > 0 else \
      views_lib.num_semantic_labels(heads)
  return dassa_encoder.DassaOnEncoder(
      enc_cfg, num_layers=d.encoder_layers, num_heads=heads,
      semantic_emb_dim=d.semantic_emb_dim, num_semantic_labels=labels, mode=d.mode,
      replace_zero_labels=d.replace_zero_labels, rngs=rngs)


def load_pretrained(model, checkpoint):
  from poi_jax.models import encoders
  if not hasattr(model, "encoder"):
    raise ValueError("model.init_from applies to model.head=encoder_dassa only")
  return encoders.load_encoder_weights(model.encoder, checkpoint)


def export_pretrained(model, directory, tokenizer=None):
  if hasattr(model, "encoder"):
    from poi_jax.models import encoders
    encoders.export_pretrained(model.encoder, directory, tokenizer=tokenizer)


def _predictions(config, meta, outputs) -> dict[str, str]:
  """qid -> answer text (the span's words joined by spaces) of the windows in ``meta``."""
  if "span_start_logits" in outputs:
    best = spans.best_spans(outputs["span_start_logits"], outputs["span_end_logits"])
    return {qid: " ".join(ctx[s:e + 1])
            for qid, ctx, (s, e) in zip(meta["qids"], meta["contexts"], best)}
  start, end = np.asarray(outputs["start_logits"]), np.asarray(outputs["end_logits"])
  preds = {}
  for i, (qid, ctx, word_of) in enumerate(zip(meta["qids"], meta["contexts"],
                                              meta["word_of_token"])):
    ok = word_of >= 0
    s_l = np.where(ok, start[i], -np.inf)[None]
    e_l = np.where(ok, end[i], -np.inf)[None]
    s, e = spans.best_spans(s_l, e_l, config.eval.max_answer_length)[0]
    preds[qid] = " ".join(ctx[word_of[s]:word_of[e] + 1]) if ok[s] and ok[e] else ""
  return preds


class NarrativeQaEvaluator(base.Evaluator):
  """``predictions.json`` (qid -> answer text) and Rouge-L / BLEU from per-question values
  (`rouge_bleu.NarrativeQaScores`). (The split is one feature shard, so one chunk.)"""

  def __init__(self, config, out_dir, *, score=True):
    super().__init__(config, out_dir, score=score)
    self.preds = self.open_json("predictions.json")
    self.scorer = rouge_bleu.NarrativeQaScores()

  def add(self, records, features, outputs):
    del records
    preds = _predictions(self.config, features.meta, outputs)
    for qid, text in preds.items():
      self.preds.add(qid, text)
    if self.score:
      self.scorer.add(preds, features.meta["references"])

  def scores(self):
    return self.scorer.result()


def _build_whole_split(records, tokenizer, *, config_json: str, is_training: bool):
  """`featurize` of the whole split, as the one shard of a `shard_spec` (array widths follow the
  split's longest passage, so the features are not built record by record)."""
  import ml_collections
  config = ml_collections.ConfigDict(json.loads(config_json))
  features = featurize(list(records), tokenizer, config, is_training=is_training)
  if "word_of_token" in features.meta:  # (equal-length rows: one array in the shard's meta)
    features.meta["word_of_token"] = np.stack(features.meta["word_of_token"])
  return features


def _merge_whole_split(parts, starts):
  del starts
  if len(parts) != 1:
    raise ValueError(f"NarrativeQA features are one shard per split, got {len(parts)}")
  return parts[0]


# data.* fields that do not change the features of the records (the source file is in the key
# by its bytes, the caps by their values).
_NOT_FEATURES = ("num_workers", "cache_dir", "train_file", "eval_file", "predict_file",
                 "max_train_examples", "max_eval_examples", "skip_eval_examples",
                 "records_per_shard", "shard_bytes")


def _feature_config_json(config) -> str:
  """The ``data`` and ``model`` sections (what `featurize` reads) as JSON, for the key."""
  d = config.data.to_dict()
  for k in _NOT_FEATURES:
    d.pop(k, None)
  return json.dumps({"data": d, "model": config.model.to_dict()}, sort_keys=True, default=str)


def shard_spec(config, tokenizer, split: str):
  """The whole split as one feature shard (see `_build_whole_split`)."""
  from poi_jax.data import shards
  del tokenizer
  is_training = split == "train"
  n = config.data.narrativeqa
  return shards.ShardSpec(
      kind=f"narrativeqa-{config.model.head}", build=_build_whole_split,
      merge=_merge_whole_split, per_record=False,
      options=dict(config_json=_feature_config_json(config), is_training=is_training),
      read_options=dict(set=n.train_set if is_training else n.eval_set,
                        summaries_file=n.summaries_file, lexicon=config.model.dassa.lexicon))


TASKS = {"narrativeqa": base.Task(
    name="narrativeqa", metric="rouge_l", read=read, featurize=featurize,
    build_model=build_model, evaluator=NarrativeQaEvaluator,
    model_keys=QANET_KEYS + ENCODER_KEYS,
    load_pretrained=load_pretrained, export_pretrained=export_pretrained,
    needs_tokenizer=lambda config: config.model.head == "encoder_dassa",
    shard_spec=shard_spec)}
