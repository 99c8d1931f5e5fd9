"""SQuAD scoring from the records (issue 17): the gold structure the official metric needs is
built from the evaluated records, so TFDS sources and capped files are scored like whole local
files."""

import pytest

from poi_jax.data.json_stream import load_json
from poi_jax.data.readers import read_squad
from poi_jax.eval import squad as squad_metrics
from poi_jax.tasks import squad as squad_task


def test_gold_from_records_scores_like_the_file(squad_file):
  path = squad_file
  records = list(read_squad(path))[100:400]
  dataset = load_json(str(path))["data"]
  # Predictions that are right, wrong and empty in turn; null odds that vary.
  preds, odds = {}, {}
  for i, r in enumerate(records):
    preds[r.qid] = (r.answers[0]["text"] if r.answers and i % 3 == 0 else
                    "" if i % 3 == 1 else r.context.split()[0])
    odds[r.qid] = (i % 7) / 7.0 - 0.4
  from_file = squad_metrics.squad_v2_evaluate(
      squad_task.restrict(dataset, {r.qid for r in records}), preds, odds)
  from_records = squad_metrics.squad_v2_evaluate(squad_task.gold_dataset(records), preds, odds)
  assert from_records == from_file
  assert from_file["total"] == 300 and 0 < from_file["f1"] < 100
