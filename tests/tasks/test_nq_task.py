"""NQ offline end to end: synthetic NQ-format pages from the shipped SQuAD 2.0 sample; train
``configs/nq.py:tiny`` for a few steps through the engine, then decode + official metrics."""
from __future__ import annotations

import json

import numpy as np
import pytest

from configs import nq as nq_config
from poi_jax.tasks import get_task
from poi_jax.train import loop
from tests.conftest import SQUAD as _SQUAD
from tests.data import nq_synthetic
from tests.required_checks import import_or_skip

SQUAD = str(_SQUAD)


def write_pages(tmp_path, *, train_articles, eval_articles, n_train, n_eval):
  train = nq_synthetic.page_examples(SQUAD, articles=train_articles, max_examples=n_train)
  dev = nq_synthetic.page_examples(SQUAD, articles=eval_articles, max_examples=n_eval,
                                   start_id=900000)
  return (nq_synthetic.write_jsonl_gz(tmp_path / "train.jsonl.gz", train),
          nq_synthetic.write_jsonl_gz(tmp_path / "dev.jsonl.gz", dev))


@pytest.mark.required
def test_tiny_trains_through_the_engine_and_writes_official_predictions(tmp_path):
  train, dev = write_pages(tmp_path, train_articles=range(0, 6), eval_articles=range(10, 12),
                           n_train=24, n_eval=8)
  c = nq_config.get_config("tiny")
  with c.unlocked():
    c.data.train_file, c.data.eval_file = train, dev
    c.train.max_steps, c.train.log_every, c.train.save_every = 4, 2, 100
  workdir = tmp_path / "work"
  results = loop.train_and_evaluate(c, str(workdir))
  assert get_task("nq").metric in results
  for k in ("long-best-threshold-f1", "short-best-threshold-f1",
            "long-recall-at-precision>=0.5"):
    assert 0.0 <= results[k] <= 1.0
  losses = [json.loads(l)["loss"] for l in (workdir / "metrics.jsonl").read_text().splitlines()
            if '"loss"' in l]
  assert losses and all(np.isfinite(losses))
  preds = json.loads((workdir / "predictions.json").read_text())["predictions"]
  assert len(preds) == 8
  nq = import_or_skip("natural_questions.eval_utils",
                      "the official reader: pip install -e '.[test]' (natural-questions)")
  official = nq.read_prediction_json(str(workdir / "predictions.json"))
  assert set(official) == {p["example_id"] for p in preds}
