"""Evaluation streams a split shard by shard (`poi_jax.train.eval_stream`, the tasks'
`Evaluator`s) and writes exactly the files the whole-split evaluation wrote: for every task, on
the tests' data cut into >= 3 feature shards (NarrativeQA: one, by design) with batches that
straddle shard boundaries, ``predictions.json`` (and n-best, null odds, spans, gold) are byte
for byte, and ``eval_results.json`` value for value, what decoding and scoring the whole split at
once gives (`_whole_split_files`: the engine's evaluation before streaming, kept here as the
reference). No model is compiled: the model's outputs are a fixed function of each window's
features (`_fake_outputs`), so both paths see the same logits. Memory: the evaluator is handed
one shard at a time, and every batch is predicted once."""
from __future__ import annotations

import dataclasses
import json
import os
import types
import zlib

import jax
import numpy as np
import pytest
from flax import nnx

from poi_jax.data.features.base import Features
from poi_jax.eval import choice, iou, rouge_bleu, spans, squad
from poi_jax.eval import nq as nq_eval
from poi_jax.io import write_json_atomic
from poi_jax.models import build
from poi_jax.prepare import splits as splits_lib
from poi_jax.tasks import get_task
from poi_jax.tasks import narrativeqa as nqa_task
from poi_jax.tasks import squad as squad_task
from poi_jax.train import eval_stream, placement
from poi_jax.train import evaluate as eval_lib
from poi_jax.train import run as run_lib
from tests.conftest import SQUAD
from tests.data import qopn_fixtures
from tests.data.test_shards import CASES, _configure, files  # noqa: F401 (a fixture)

pytestmark = pytest.mark.required  # the tiny configs' tokenizer is all-MiniLM-L6-v2's vocabulary

BATCH = 3  # not a divisor of the shards' window counts: batches span shard boundaries


def _cases(files, tmp):
  out = dict(CASES)
  from configs import newsqa as newsqa_config
  from configs import squad1 as squad1_config
  long = qopn_fixtures.long_articles(SQUAD, paragraphs_per_article=3, articles=(0, 2))
  newsqa = str(qopn_fixtures.write_newsqa(tmp / "newsqa.json", long, "dev"))
  off = CASES["squad2"]  # the same with length buckets off: today's batches across shards
  out["squad2_off"] = (off[0], off[1], lambda f: dict(
      off[2](f), **{"data.records_per_shard": 4, "data.length_buckets": "off"}))
  out["squad1"] = (squad1_config, "tiny", lambda f: dict(
      CASES["squad2"][2](f), **{"data.answerable_only": True, "data.records_per_shard": 3}))
  out["newsqa"] = (newsqa_config, "tiny", lambda f: {
      "data.train_file": newsqa, "data.eval_file": newsqa, "data.max_train_examples": -1,
      "data.max_eval_examples": -1, "data.skip_eval_examples": 0,
      "data.qopn.eval_split": "dev", "data.records_per_shard": 2})
  smaller = {"squad2": 4, "race": 2, "dream": 2}  # >= 3 shards of their capped eval splits
  for name, per in smaller.items():
    module, variant, overrides = out[name]
    out[name] = (module, variant,
                 lambda f, o=overrides, p=per: dict(o(f), **{"data.records_per_shard": p}))
  return out


TASK_NAMES = ("squad2", "squad2_off", "squad1", "race", "dream", "nq", "nlquad", "newsqa",
              "narrativeqa")


def _fake_outputs(shapes, length_keys=(), full=None):
  """The model's stand-in: each window's outputs drawn from a generator seeded by the bytes of
  that window's features, so they do not depend on the batch the window is predicted in, nor on
  the length bucket it is cut to (``length_keys`` padded back to ``full`` with the features'
  padding, 0, before seeding)."""
  def predict_step(state, batch):
    del state
    batch = {k: (np.pad(v, [(0, 0)] * (v.ndim - 1) + [(0, full - v.shape[-1])])
                 if k in length_keys and v.shape[-1] < full else v) for k, v in batch.items()}
    keys = sorted(k for k in batch if k != "example_mask")
    n = len(batch[keys[0]])
    out = {k: np.zeros((n, *s.shape[1:]), s.dtype) for k, s in shapes.items()}
    for i in range(n):
      seed = zlib.crc32(b"".join(np.ascontiguousarray(batch[k][i]).tobytes() for k in keys))
      rng = np.random.default_rng(seed)
      for k in sorted(shapes):
        out[k][i] = rng.standard_normal(out[k].shape[1:]) * 3
    return out
  return predict_step


def _output_shapes(task, config, split):
  rows = split.shards.rows(task.model_keys).get(np.arange(min(2, split.shards.num_windows)))
  batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in rows.items()}
  batch["example_mask"] = jax.ShapeDtypeStruct((len(rows[next(iter(rows))]),), np.float32)
  return jax.eval_shape(lambda b: task.build_model(config, nnx.Rngs(0))(b, deterministic=True),
                        batch)


def _whole_split_files(name, config, records, features, outputs, out, *, score=True):
  """The evaluation as it was before streaming: the whole split decoded and scored at once with
  the library's functions, every file written whole."""
  e = config.eval
  path = lambda f: os.path.join(out, f)  # noqa: E731
  if name in ("squad1", "squad2"):
    v2 = name == "squad2"
    preds, nbest, odds = spans.decode_squad(
        records, features, outputs["start_logits"], outputs["end_logits"],
        n_best_size=e.n_best_size, max_answer_length=e.max_answer_length,
        version_2_with_negative=v2, null_score_diff_threshold=e.null_score_diff_threshold)
    write_json_atomic(path("predictions.json"), preds)
    write_json_atomic(path("nbest_predictions.json"), nbest)
    if v2:
      write_json_atomic(path("null_odds.json"), odds)
    if not score:
      return {}
    dataset = squad_task.gold_dataset(records)
    write_json_atomic(path("gold.json"), {"version": "v2.0" if v2 else "1.1", "data": dataset})
    if not v2:
      return squad.squad_v1_evaluate(dataset, preds)
    results = squad.squad_v2_evaluate(dataset, preds, odds if odds else None)
    results.update(squad.tuned_null_threshold(dataset, spans.best_non_null(nbest), odds))
    return results
  if name in ("race", "dream"):
    logits = outputs["logits"]
    write_json_atomic(path("predictions.json"), {q: int(p) for q, p in
                                                 zip(features.meta["ids"], logits.argmax(-1))})
    return choice.choice_accuracy(logits, features.arrays["labels"], features.meta["levels"])
  if name == "nq":
    preds = nq_eval.decode_nq(records, features, outputs, max_answer_length=e.max_answer_length)
    write_json_atomic(path("predictions.json"), {"predictions": preds})
    n = config.data.nq
    return nq_eval.nq_metrics(nq_eval.gold_labels(records), preds,
                              long_non_null_threshold=n.long_non_null_threshold,
                              short_non_null_threshold=n.short_non_null_threshold)
  if name in ("nlquad", "newsqa"):
    from poi_jax.models import qopn
    m = features.meta
    decoded = qopn.decode_spans(outputs["start_logits"], outputs["end_logits"], m["token_index"],
                                m["offsets"], m["contexts"], e.max_answer_length)
    write_json_atomic(path("predictions.json"), {q: d[0] for q, d in zip(m["qids"], decoded)})
    write_json_atomic(path("prediction_spans.json"), {
        q: {"text": t, "start": a, "end": b, "score": s}
        for q, (t, a, b, s) in zip(m["qids"], decoded)})
    scores = iou.evaluate_spans(records, {q: (d[1], d[2]) for q, d in zip(m["qids"], decoded)})
    return {k: scores[k] for k in ("exact_match", "f1")} if name == "newsqa" else scores
  preds = nqa_task._predictions(config, features.meta, outputs)
  write_json_atomic(path("predictions.json"), preds)
  return rouge_bleu.narrativeqa_scores(preds, features.meta["references"])


@pytest.fixture(scope="module")
def streamed(files, tmp_path_factory):  # noqa: F811
  """name -> (the streamed evaluation's directory, the whole split's, what the evaluator was
  handed per chunk, the shards' (records, windows), predict_step calls, batches)."""
  tmp = tmp_path_factory.mktemp("eval-stream")
  cases = _cases(files, tmp)
  out = {}
  mp = pytest.MonkeyPatch()
  mp.setattr(placement, "global_batch", lambda local, mesh: local)
  mp.setattr(placement, "to_host", lambda tree: tree)
  try:
    for name in TASK_NAMES:
      module, variant, overrides = cases[name]
      config = _configure(module.get_config(variant), tmp / "cache", **overrides(files))
      with config.unlocked():
        config.train.eval_batch_size = BATCH
      task = get_task(config.task)
      tokenizer = build.load_tokenizer(config) if task.tokenizer_needed(config) else None
      prepared = splits_lib.prepare_split(task, config, "eval", tokenizer, progress=False)
      split = run_lib.Split("eval", prepared, prepared.num_examples)
      shapes = _output_shapes(task, config, split)
      calls, handed = [], []
      fake = _fake_outputs(shapes, task.length_keys, config.data.max_seq_length)

      def predict_step(state, batch, fake=fake, calls=calls):
        calls.append(len(batch["example_mask"]))
        return fake(state, batch)

      class Spy(task.evaluator if isinstance(task.evaluator, type)
                else task.evaluator.func):
        def add(self, records, features, outputs, handed=handed):
          handed.append((len(records), {k: len(v) for k, v in outputs.items()}))
          return super().add(records, features, outputs)

      kwargs = getattr(task.evaluator, "keywords", {})
      run = types.SimpleNamespace(
          config=config, eval=split, mode="train_and_eval", is_chief=True,
          task=dataclasses.replace(task, evaluator=lambda c, d, score, kw=kwargs, S=Spy:
                                   S(c, d, score=score, **kw)),
          sharded=types.SimpleNamespace(state=None, mesh=None, predict_step=predict_step),
          workdir=str(tmp / name / "streamed"), output_dir=str(tmp / name / "streamed"),
          writer=types.SimpleNamespace(write=lambda step, **kw: None))
      os.makedirs(run.workdir)
      eval_lib.evaluate(run, step=7, save=False)

      # The whole split at once: every shard's features merged, every window's outputs.
      whole = tmp / name / "whole"
      os.makedirs(whole)
      n = prepared.num_windows
      rows = prepared.rows(task.model_keys).get(np.arange(n))
      outputs = fake(None, rows)
      parts = [prepared.shard_features(i) for i in range(prepared.manifest["num_shards"])]
      features = prepared.merge(parts, [0] * len(parts))
      records = list(splits_lib.stream_records(task, config, "eval"))
      results = _whole_split_files(config.task, config, records, features, outputs, str(whole))
      write_json_atomic(str(whole / "eval_results.json"),
                        dict(results, step=7, num_questions=len(records),
                             num_questions_in_source=prepared.num_examples))
      out[name] = dict(streamed=tmp / name / "streamed", whole=whole, handed=handed,
                       shards=[(s["records"][1] - s["records"][0], s["windows"])
                               for s in prepared.manifest["shards"]],
                       first_windows=[s["first_window"] for s in prepared.manifest["shards"]],
                       calls=calls, windows=n,
                       bucketed=len(task.buckets(config)) > 1)
  finally:
    mp.undo()
  return out


def test_every_registered_task_has_a_streamed_case():
  """TASK_NAMES lists this file's cases; a task added to the registry without one fails here
  instead of going untested."""
  from poi_jax import tasks
  assert set(tasks.names()) <= set(TASK_NAMES), set(tasks.names()) - set(TASK_NAMES)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_streamed_evaluation_writes_the_whole_splits_files(streamed, name):
  got = streamed[name]
  files_ = sorted(os.listdir(got["whole"]))
  assert sorted(os.listdir(got["streamed"])) == files_  # no spool or staging file left
  assert "predictions.json" in files_ and "eval_results.json" in files_
  for f in files_:
    a, b = (got["streamed"] / f).read_text(), (got["whole"] / f).read_text()
    if f == "eval_results.json":
      assert json.loads(a) == json.loads(b), name
    else:
      assert a == b, (name, f)  # byte for byte


@pytest.mark.parametrize("name", TASK_NAMES)
def test_the_evaluator_is_handed_one_shard_at_a_time(streamed, name):
  got = streamed[name]
  if name == "narrativeqa":  # its features are built for the whole split: one shard
    assert len(got["shards"]) == 1
  else:
    assert len(got["shards"]) >= 3, got["shards"]
  assert [(r, set(w.values())) for r, w in got["handed"]] == \
      [(r, {w}) for r, w in got["shards"]]
  if got["bucketed"]:  # each shard's windows in batches of their own (ordered by length)
    assert len(got["calls"]) == sum(-(-w // BATCH) for _, w in got["shards"])
  else:  # every batch is predicted once (a batch spanning two shards is not predicted again)
    assert len(got["calls"]) == -(-got["windows"] // BATCH)


def test_some_batches_span_two_shards(streamed):
  assert any(fw % BATCH for name in TASK_NAMES for fw in streamed[name]["first_windows"])


def test_a_source_that_no_longer_yields_the_shards_records_is_one_line(monkeypatch):
  import ml_collections

  from poi_jax.data.loader import ArrayRows
  from poi_jax.data.shards import ShardError
  monkeypatch.setattr(placement, "global_batch", lambda local, mesh: local)
  monkeypatch.setattr(placement, "to_host", lambda tree: tree)
  config = ml_collections.ConfigDict({"data": {"eval_file": "dev.json", "max_eval_examples": -1,
                                               "skip_eval_examples": 0}})
  manifest = {"num_examples": 3, "shards": [{"records": [0, 3], "windows": 2}]}
  shards = types.SimpleNamespace(
      manifest=manifest, directory="/cache/squad2-eval-x",
      rows=lambda keys: ArrayRows({"input_ids": np.zeros((2, 4), np.int32)}),
      shard_features=lambda i: Features({}, {}), merge=lambda parts, starts: parts[0])
  run = types.SimpleNamespace(
      config=config, is_chief=False,
      task=types.SimpleNamespace(read=lambda c, split: iter(["r1", "r2"]),
                                 model_keys=("input_ids",), buckets=lambda c: (4,)),
      sharded=types.SimpleNamespace(state=None, mesh=None, predict_step=lambda s, b: {
          "logits": np.zeros((len(b["example_mask"]), 2), np.float32)}))
  split = types.SimpleNamespace(role="eval", shards=shards)
  with pytest.raises(ShardError) as e:
    list(eval_stream.chunks(run, split, 2))
  assert str(e.value) == ("data.eval_file yields 2 records, the feature shards in "
                          "/cache/squad2-eval-x were built from 3")
