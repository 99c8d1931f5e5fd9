"""QOPN tasks offline: long articles built from the shipped SQuAD 2.0 sample (all paragraphs of
each article, answerable questions, offsets shifted), trained with configs/newsqa.py:tiny through
the engine; NLQuAD scoring (EM/F1/IoU) of gold spans; config errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from configs import newsqa as newsqa_config
from configs import nlquad as nlquad_config
from poi_jax import tasks
from poi_jax.models import encoders
from tests.data import qopn_fixtures


@pytest.fixture(scope="module")
def files(tmp_path_factory, squad_file):
  squad = squad_file
  out = tmp_path_factory.mktemp("qopn")
  # Whole Wikipedia articles are far longer than 6 tiny segments: the tiny run uses chunks of 3
  # consecutive paragraphs (one "article" each), training and evaluation on different articles.
  train = qopn_fixtures.long_articles(squad, paragraphs_per_article=3, articles=(0, 2))
  evl = qopn_fixtures.long_articles(squad, paragraphs_per_article=3, articles=(11, 12))
  whole = qopn_fixtures.long_articles(squad, articles=(11, 12))
  return dict(
      newsqa_train=qopn_fixtures.write_newsqa(out / "newsqa-train.json", train, "train"),
      newsqa_dev=qopn_fixtures.write_newsqa(out / "newsqa-dev.json", evl, "dev"),
      nlquad_whole=qopn_fixtures.write_nlquad(out / "nlquad-whole.json", whole))


def _config(module, variant, **overrides):
  c = module.get_config(variant)
  with c.unlocked():
    for dotted, value in overrides.items():
      *path, last = dotted.split(".")
      node = c
      for p in path:
        node = node[p]
      node[last] = value
  return c


def test_tiny_newsqa_trains_through_the_engine(files, tmp_path):
  from poi_jax.train import loop
  c = _config(newsqa_config, "tiny", **{
      "data.train_file": str(files["newsqa_train"]), "data.eval_file": str(files["newsqa_dev"]),
      "data.max_train_examples": 48, "data.max_eval_examples": 24, "train.max_steps": 6,
      "train.log_every": 2, "train.save_every": 100, "train.export_best": False})
  results = loop.train_and_evaluate(c, str(tmp_path))
  assert set(results) >= {"exact_match", "f1"}
  assert 0.0 <= results["f1"] <= 100.0
  lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  losses = [x["loss"] for x in lines if "loss" in x]
  assert len(losses) == 3 and all(np.isfinite(losses))
  preds = json.loads((tmp_path / "predictions.json").read_text())
  assert len(preds) == 24 and all(isinstance(v, str) for v in preds.values())


def test_nlquad_gold_spans_score_100_on_whole_articles(files):
  """Whole articles (all paragraphs): questions whose answer lies past 6 segments are dropped
  from training and counted; gold logits decode to EM = F1 = IoU = 100 on the others."""
  c = _config(nlquad_config, "tiny", **{"data.train_file": str(files["nlquad_whole"]),
                                        "data.eval_file": str(files["nlquad_whole"])})
  task = tasks.get_task("nlquad")
  tok = encoders.load.load_tokenizer(encoders.resolve_checkpoint("minilm"))
  records = list(task.read(c, "eval"))
  train = task.featurize(records, tok, c, is_training=True)
  assert train.meta["dropped_cut"] > 0  # articles of ~40 paragraphs exceed 6 x 128 tokens
  assert len(train.arrays["input_ids"]) + train.meta["dropped_cut"] + \
      train.meta["dropped_unmappable"] == len(records)
  kept = {train.meta["qids"][i] for i in range(len(train.meta["qids"]))}
  records = [r for r in records if r.qid in kept]
  f = task.featurize(records, tok, c, is_training=False)
  n, k, length = f.arrays["input_ids"].shape
  start = np.full((n, k * length), -1e4, np.float32)
  end = start.copy()
  start[np.arange(n), f.arrays["start_positions"]] = 1.0
  end[np.arange(n), f.arrays["end_positions"]] = 1.0
  import tempfile
  with tempfile.TemporaryDirectory() as d:
    with c.unlocked():
      c.eval.max_answer_length = k * length
    scores = task.evaluate(c, records, f, {"start_logits": start, "end_logits": end}, d)
    spans = json.loads(open(f"{d}/prediction_spans.json").read())
  assert scores == pytest.approx(dict(exact_match=100.0, f1=100.0, iou=100.0, precision=100.0,
                                      recall=100.0))
  assert set(spans) == {r.qid for r in records}


def test_empty_data_files_and_unknown_heads_are_clear_errors():
  c = newsqa_config.get_config("tiny")
  with pytest.raises(FileNotFoundError, match=r"data.train_file is empty: pass NewsQA"):
    tasks.get_task("newsqa").read(c, "train")
  c = _config(newsqa_config, "tiny", **{"model.head": "poi"})
  with pytest.raises(ValueError, match="model.head='poi' is not a head for task 'newsqa'"):
    tasks.build_model(c, None)
  with pytest.raises(ValueError, match="unknown config variant"):
    nlquad_config.get_config("large")
