"""The Task seam (DESIGN.md): everything task-specific the engine needs, behind one interface.

A Task reads records, turns them into fixed-shape features, builds the model, decodes the model's
outputs to predictions and scores them. The engine (`poi_jax.train`) knows only this interface
and the arrays' shapes, so a new system (NQ, QOPN, DASSA) is a reader, a featurizer, a model, a
config and a module in `poi_jax.tasks`: no change in `poi_jax.train`.

Contract of the model ``build_model`` returns (an ``nnx.Module``):

* ``model(batch, deterministic=...) -> dict[str, Array]``: ``batch`` holds the feature arrays named
  in ``model_keys`` (leading axis = batch) plus ``example_mask`` ``(B,)`` float {0,1} (0 on rows
  that only pad the last batch); dropout keys come from RNG state inside the model
  (``nnx.Rngs``), so checkpoints carry them.
* ``model.loss(batch, outputs) -> scalar``: rows with ``example_mask`` 0 must not count.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterable, Mapping, Sequence

import ml_collections
import numpy as np
from flax import nnx

from poi_jax.data.features.base import Features
from poi_jax.io import JsonStreamWriter

Config = ml_collections.ConfigDict


def uses_pos(config) -> bool:
  """Whether the model reads POS tags, so whether features carry them and NLTK's tagger runs:
  ``model.pos_embedding`` on a head that has the POS table (POI-Net, DUMA). ``head=none`` builds
  none whatever ``pos_embedding`` says (its saved configs keep the default True), and tagging
  for it cost ~10% of a Reader call and ~100 MB for nothing."""
  return bool(config.model.pos_embedding) and config.model.get("head", "poi") != "none"


@dataclasses.dataclass(frozen=True)
class Task:
  """One reading-comprehension task.

  Attributes:
    name: the config's ``task`` value.
    metric: key of the evaluator's scores that selects the best checkpoint.
    read: ``(config, split) -> iterator of records`` (streamed: the readers yield one record at
      a time, so memory does not grow with the corpus) with ``split`` in {"train", "eval",
      "predict"} (files
      ``data.train_file``, ``data.eval_file``, ``data.predict_file``; "predict" need not have
      answers, "eval" must: an evaluation that cannot be scored fails here, before training);
      validates the input and raises a clear error (file, record, field) before any compute.
    featurize: ``(records, tokenizer, config, is_training) -> Features`` (``arrays``: dict of
      ``(N, ...)`` numpy arrays, ``meta``: whatever the evaluator needs).
    build_model: ``(config, rngs) -> nnx.Module`` with random weights (see the module docstring).
    load_pretrained: ``(model, checkpoint) -> report``: loads ``model.init_from`` into the model.
    evaluator: ``(config, out_dir, *, score=True) -> Evaluator`` (see `Evaluator`): decodes the
      model's outputs a chunk of whole examples at a time, writes the predictions into
      ``out_dir`` as it goes (and, when scoring, the gold it scored against where the official
      format has one) and scores from small values kept per question; ``score=False`` (predict
      mode): predictions only, ``finish`` returns ``{}``. Scores come from the records (never by
      re-reading a file), so every source, TFDS included, and every cap is scored.
    model_keys: the feature arrays the model reads (others stay on the host).
    export_pretrained: ``(model, directory, tokenizer) -> None`` or None: the fine-tuned encoder
      as a HuggingFace directory.
    higher_is_better: for ``metric``.
    needs_tokenizer: bool, or ``config -> bool``; False for models with their own vocabulary
      (QANet + GloVe): the engine then passes ``tokenizer=None`` to ``featurize``.
    encoder_attr: the attribute of the model holding its pretrained encoder (``encoder``;
      ``bert`` where the model mirrors an original's names), for parameter counts.
    describe_head: ``(config, model) -> str``: one line naming the head and its options, printed
      with the parameter count (default: ``model.head``).
    shard_spec: ``(config, tokenizer, split) -> poi_jax.data.shards.ShardSpec``: how the split
      is featurized into feature shards (`poi_jax.prepare.splits`); the engine reads every split
      through it.
    length_keys: the model's arrays whose last axis is the sequence (``data.max_seq_length``),
      cut to a batch's length bucket (`poi_jax.data.buckets`); empty: the task is never
      bucketed (its model's outputs on real positions would depend on the padding).
    length_outputs: the model's outputs whose last axis is the sequence, with the value their
      cut positions are padded back with (the decoder never reads them).
    bucketable: ``config -> bool`` or None (always): whether the config's model may be cut to
      buckets; False for a model whose outputs on real positions depend on the padding (DUMA's
      ``released`` variant averages over every position).
    answers: what `poi_jax.inference.Reader` gives for a trained model of this task: ``"span"``
      (``Reader.answer``: `SquadExample` records, ``start_logits``/``end_logits`` decoded as
      SQuAD's), ``"choice"`` (``Reader.choose``: `ChoiceExample` records, ``logits`` over the
      options), or None: the Reader does not serve it and the engine writes no Reader files
      beside its export.
    null_answers: for ``answers="span"``, whether "no answer" is an answer (SQuAD 2.0's null
      score, thresholded by the Reader's δ).
    reader_featurize: ``(records, tokenizer, config, passages) -> Features`` or None (then
      ``featurize(..., is_training=False)``): the Reader's windows of ``records``, with
      ``passages`` a `poi_jax.data.features.passages.PassageCache` kept across calls.
    probe_records: ``() -> records`` or None (no record): what `poi_jax.sizing` featurizes
      to learn the model's array shapes without data (a multiple-choice task's probe has its
      corpus's number of options).
  """
  name: str
  metric: str
  read: Callable[[Config, str], Iterable]
  featurize: Callable[..., Features]
  build_model: Callable[[Config, nnx.Rngs], nnx.Module]
  evaluator: Callable[..., "Evaluator"]
  model_keys: tuple[str, ...]
  load_pretrained: Callable[[nnx.Module, str], Any] | None = None
  export_pretrained: Callable[..., None] | None = None
  higher_is_better: bool = True
  needs_tokenizer: bool | Callable[[Config], bool] = True
  encoder_attr: str = "encoder"
  describe_head: Callable[[Config, nnx.Module], str] | None = None
  shard_spec: Callable[..., Any] | None = None
  length_keys: tuple[str, ...] = ()
  length_outputs: Mapping[str, float] = dataclasses.field(default_factory=dict)
  bucketable: Callable[[Config], bool] | None = None
  answers: str | None = None
  null_answers: bool = False
  reader_featurize: Callable[..., Features] | None = None
  probe_records: Callable[[], list] | None = None

  def __post_init__(self):
    if self.answers not in (None, "span", "choice"):
      raise ValueError(f"task {self.name!r}: answers must be 'span', 'choice' or None, got "
                       f"{self.answers!r}")

  def tokenizer_needed(self, config: Config) -> bool:
    return bool(self.needs_tokenizer(config) if callable(self.needs_tokenizer)
                else self.needs_tokenizer)

  def describe(self, config: Config, model: nnx.Module) -> str:
    """The model's parameter count: for a model on a pretrained encoder, the encoder's and what
    the head adds over it."""
    from poi_jax.models import build, encoders
    n = build.parameter_count(model)
    encoder = getattr(model, self.encoder_attr, None)
    enc_cfg = getattr(encoder, "config", None)
    if not isinstance(enc_cfg, encoders.EncoderConfig):
      return f"model: {type(model).__name__} (no pretrained encoder)\nparameters: {n:,}"
    n_enc = build.parameter_count(encoder)
    head = (self.describe_head(config, model) if self.describe_head is not None
            else config.model.head)
    return "\n".join([
        f"encoder: {enc_cfg.model_type}, {enc_cfg.num_hidden_layers} layers, hidden "
        f"{enc_cfg.hidden_size}, embedding {enc_cfg.embedding_dim}: {n_enc:,} parameters",
        f"head: {head}: {n - n_enc:,} parameters over the encoder",
        f"parameters: {n:,}"])

  def evaluate(self, config: Config, records: Sequence, features: Features,
               outputs: Mapping[str, np.ndarray], out_dir: str, *, score: bool = True) -> dict:
    """The evaluator over one chunk holding every example (``records``; ``features`` and the
    model's ``outputs`` of all their windows): for callers that hold a whole small split."""
    with self.evaluator(config, out_dir, score=score) as evaluator:
      evaluator.add(records, features, outputs)
      return evaluator.finish()

  def buckets(self, config: Config) -> tuple[int, ...]:
    """The length buckets of this run (`poi_jax.data.buckets.resolve` of
    ``data.length_buckets``); one bucket, ``max_seq_length``, for a task without
    ``length_keys``, a model that is not ``bucketable``, or with buckets off."""
    from poi_jax.data import buckets
    full = int(config.data.max_seq_length)
    if not self.length_keys or (self.bucketable is not None and not self.bucketable(config)):
      return (full,)
    return buckets.resolve(config.data.get("length_buckets", buckets.AUTO), full)

  def model_arrays(self, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in arrays.items() if k in self.model_keys}


class Evaluator:
  """One evaluation of a split, decoded and scored a chunk of whole examples at a time, so
  memory holds one chunk (the engine's chunk is one feature shard: `poi_jax.train.eval_stream`).

  ``add(records, features, outputs)`` takes consecutive chunks in order: ``records`` are the
  chunk's examples, ``features`` their windows' arrays and meta with example indices counted
  from the chunk's first record (``example_index`` 0 = ``records[0]``), ``outputs`` the model's
  outputs on those windows (numpy, leading axis = windows). A task's evaluator writes each
  chunk's predictions to files opened with `open_json` (streamed: byte for byte the JSON of the
  whole split) and keeps only small values per question for its scores. ``finish()`` ends the
  files and returns the scores (``{}`` without ``score``). Used as a context manager, an error
  closes the files unfinished (the engine then drops its staging directory).
  """

  def __init__(self, config: Config, out_dir: str, *, score: bool = True):
    self.config, self.out_dir, self.score = config, out_dir, score
    self._files: list = []

  def open_json(self, name: str, **kwargs):
    """A `poi_jax.io.JsonStreamWriter` for ``out_dir/name``, ended by `finish`."""
    writer = JsonStreamWriter(os.path.join(self.out_dir, name), **kwargs)
    self._files.append(writer)
    return writer

  def add(self, records: Sequence, features: Features,
          outputs: Mapping[str, np.ndarray]) -> None:
    raise NotImplementedError

  def scores(self) -> dict:
    """The metrics, once every chunk is added (called by `finish` when scoring)."""
    raise NotImplementedError

  def finish(self) -> dict:
    for f in self._files:
      f.close()
    return self.scores() if self.score else {}

  def __enter__(self):
    return self

  def __exit__(self, exc_type, exc, tb):
    if exc_type is not None:
      for f in self._files:
        f.abort()
    return False


def local_path(config: Config, split: str) -> str:
  """``data.<split>_file`` as a local path; a TFDS/hub source without network is a clear error."""
  path = getattr(config.data, f"{split}_file")
  if split == "predict" and not path:
    path, split = config.data.eval_file, "eval"
  if path.startswith("tfds:") or not path:
    raise FileNotFoundError(
        f"data.{split}_file={path!r} is a TensorFlow Datasets source, which needs network and "
        f"`pip install -e \".[tfds]\"`; pass a local file instead, e.g. "
        f"--config.data.{split}_file=../shared/data/squad2/squad2-dev-subset.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"data.{split}_file={path!r} does not exist")
  return path


def cap(records: list, n: int | None, skip: int = 0) -> list:
  """``n`` records after the first ``skip`` (``n`` None or negative: all after ``skip``)."""
  records = records[skip:] if skip > 0 else records
  return records if n is None or n < 0 else records[:n]


def validate_model_batch(features: Features, model_keys: tuple[str, ...]) -> None:
  """`poi_jax.models.checks.check_batch` on the model's arrays of ``features`` (ids, domains,
  POS tags), as a shard's ``validate`` step: a bad row stops `prepare`, before any training."""
  arrays = {k: v for k, v in features.arrays.items() if k in model_keys}
  if "input_ids" in arrays and len(arrays["input_ids"]):
    from poi_jax.models import checks
    checks.check_batch(arrays)
