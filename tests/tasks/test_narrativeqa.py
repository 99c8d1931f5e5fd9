"""NarrativeQA with DASSA offline: readers' errors, and training through the engine on a small
NarrativeQA-format set written from the shared SQuAD 2.0 paragraphs (computed sentence and
connective views)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from configs import narrativeqa as nqa_config
from poi_jax.data.features import offline_views
from poi_jax.data.readers import narrativeqa as reader
from poi_jax.data.records import DataError
from tests.tasks.narrativeqa_data import write_narrativeqa


@pytest.fixture(scope="module")
def nqa_dir(tmp_path_factory, squad_file):
  return write_narrativeqa(squad_file,
                           tmp_path_factory.mktemp("nqa"), train_docs=10, valid_docs=3)


def _config(variant, nqa_dir, **overrides):
  c = nqa_config.get_config(variant)
  with c.unlocked():
    c.data.train_file = c.data.eval_file = str(nqa_dir)
    for dotted, value in overrides.items():
      *path, last = dotted.split(".")
      node = c
      for p in path:
        node = node[p]
      node[last] = value
  return c


def test_reader_and_views_from_csv(nqa_dir):
  train = list(reader.read_narrativeqa(str(nqa_dir), "train"))
  valid = list(reader.read_narrativeqa(str(nqa_dir), "valid"))
  assert len({r.document.doc_id for r in train}) == 10
  assert len({r.document.doc_id for r in valid}) == 3
  assert train[0].document.plain  # tokens only: the views are the featurizer's work
  (ready,) = offline_views.with_offline_views(train[:1])
  doc = ready.document
  assert len(doc.sentences) > 1 and doc.relations is not None and not doc.plain
  assert all(len(r.answers) == 2 for r in train)


def test_csv_row_without_its_summary_is_a_clear_error(tmp_path, nqa_dir):
  rows = list(csv.DictReader(open(nqa_dir / "qaps.csv", encoding="utf-8")))
  rows[2]["document_id"] = "no-such-doc"
  with open(tmp_path / "qaps.csv", "w", newline="", encoding="utf-8") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
  (tmp_path / "summaries.csv").write_text((nqa_dir / "summaries.csv").read_text())
  with pytest.raises(DataError) as e:
    list(reader.read_narrativeqa(str(tmp_path), None))
  # Line 4: the header is line 1, rows[2] is the third record.
  assert str(e.value).startswith(f"{tmp_path / 'qaps.csv'}:4: document 'no-such-doc', field "
                                 f"'document_id': no summary")


def test_annotated_jsonl_errors_name_the_line(tmp_path):
  good = {"document_id": "d1", "summary_parse": {"sentences": [{"tokens": ["A", "b", "."]}]},
          "questions": [{"question": "what ?", "answer1": "b", "answer2": "A b"}]}
  bad = dict(good, document_id="d2", questions=[{"question": "what ?", "answer1": "b"}])
  path = tmp_path / "ann.jsonl"
  path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
  with pytest.raises(DataError, match=r"ann.jsonl:2: document 'd2', field "
                                      r"'questions\[0\].answer2'"):
    list(reader.read_annotated(str(path)))
  path.write_text(json.dumps(good) + "\n")
  (ex,) = list(reader.read_annotated(str(path)))
  assert ex.qid == "d1-0" and ex.answers == ["b", "A b"]


def _train(config, workdir):
  from poi_jax.train import loop
  results = loop.train_and_evaluate(config, str(workdir))
  lines = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
  losses = [x["loss"] for x in lines if "loss" in x]
  preds = json.loads((workdir / "predictions.json").read_text())
  return results, losses, preds


def test_qanet_dassa_tiny_trains_end_to_end(tmp_path, nqa_dir):
  config = _config("tiny", nqa_dir, **{"train.max_steps": 6, "train.log_every": 2})
  results, losses, preds = _train(config, tmp_path)
  assert len(losses) == 3 and all(np.isfinite(losses))
  assert losses[-1] < losses[0]
  assert results["total"] == len(preds) > 0
  assert 0.0 <= results["rouge_l"] <= 100.0 and 0.0 <= results["bleu_1"] <= 100.0


def test_minilm_encoder_dassa_trains_end_to_end(tmp_path, nqa_dir):
  config = _config("minilm", nqa_dir, **{"train.max_steps": 3, "train.log_every": 1,
                                         "train.batch_size": 4, "data.max_seq_length": 96})
  results, losses, preds = _train(config, tmp_path)
  assert len(losses) == 3 and all(np.isfinite(losses))
  assert results["total"] == len(preds) > 0
