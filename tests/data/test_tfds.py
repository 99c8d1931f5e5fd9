"""TFDS sources (`tfds:<name>[/<config>]:<split>`) without network, with `tfds.testing.mock_data`.

Needs the `[tfds]` extra (tensorflow-datasets; TensorFlow is not needed), which CI installs: part
of the default suite. Without it the tests skip, naming the reason, except under CI=true where that
skip fails the run (marker `required`). Run alone with `python -m pytest -m tfds tests/data`.
"""
import json

import numpy as np
import pytest

from poi_jax.data.readers import tfds as tfds_reader
from poi_jax.data.records import DataError
from tests.required_checks import import_or_skip

pytestmark = [pytest.mark.tfds, pytest.mark.required]


@pytest.fixture(scope="module", autouse=True)
def tfds():
  """The tensorflow_datasets module; every test here skips without it (autouse)."""
  return import_or_skip("tensorflow_datasets", "the TFDS suite: pip install -e '.[tfds]'")


CONTEXT = "The Normans were the people who gave their name to Normandy, a region in France."
SQUAD_ROWS = [
    {"id": "q1", "title": "Normans", "context": CONTEXT, "question": "Where is Normandy?",
     "answers": {"text": np.array(["France", "in France"]),
                 "answer_start": np.array([73, 70], np.int32)},
     "is_impossible": False,
     "plausible_answers": {"text": np.array([], "<U1"), "answer_start": np.array([], np.int32)}},
    {"id": b"q2", "title": b"Normans", "context": CONTEXT.encode(),
     "question": b"Who gave their name to Paris?",
     "answers": {"text": np.array([], "<U1"), "answer_start": np.array([], np.int32)},
     "is_impossible": True,
     "plausible_answers": {"text": np.array(["The Normans"]),
                           "answer_start": np.array([0], np.int32)}},
]
RACE_ROWS = [{"example_id": "high1.txt", "article": "Tom has a cat. The cat is black.",
              "questions": np.array(["What colour is the cat?", "Who has a cat?"]),
              "options": np.array([["white", "black", "red", "blue"],
                                   ["Tom", "Ann", "Bob", "Sue"]]),
              "answers": np.array(["B", "A"])}]


def _mock(tfds, rows):
  return tfds.testing.mock_data(as_data_source_fn=lambda self, split, **kw: list(rows))


def test_squad_rows_become_the_same_records_as_the_json_reader(tfds):
  assert CONTEXT[73:79] == "France" and CONTEXT[70:79] == "in France"
  with _mock(tfds, SQUAD_ROWS):
    got = list(tfds_reader.read_tfds("tfds:squad/v2.0:validation"))
  assert [r.qid for r in got] == ["q1", "q2"]
  a, b = got
  assert a.answers == [{"text": "France", "answer_start": 73},
                       {"text": "in France", "answer_start": 70}]
  assert not a.is_impossible and a.context == CONTEXT and a.title == "Normans"
  assert b.is_impossible and b.answers == [] and b.question == "Who gave their name to Paris?"
  assert b.plausible_answers == [{"text": "The Normans", "answer_start": 0}]
  assert a.source == "tfds:squad/v2.0:validation"


def test_race_rows_become_one_record_per_question(tfds):
  with _mock(tfds, RACE_ROWS):
    got = list(tfds_reader.read_tfds("tfds:race/high:dev"))
  assert [(r.qid, r.label, r.level) for r in got] == [("high1.txt-0", 1, "high"),
                                                      ("high1.txt-1", 0, "high")]
  assert got[0].options == ["white", "black", "red", "blue"]


def test_bad_tfds_records_name_the_source_record_and_field(tfds):
  bad = [dict(SQUAD_ROWS[0], answers={"text": np.array(["France"]),
                                      "answer_start": np.array([500], np.int32)})]
  with _mock(tfds, bad), pytest.raises(DataError) as err:
    list(tfds_reader.read_tfds("tfds:squad/v2.0:validation"))
  assert (err.value.path, err.value.record, err.value.field) == (
      "tfds:squad/v2.0:validation", "q1", "answers.answer_start")
  race = [dict(RACE_ROWS[0], answers=np.array(["B", "E"]))]
  with _mock(tfds, race), pytest.raises(DataError, match="'E' is not one of the 4 options"):
    list(tfds_reader.read_tfds("tfds:race/middle:dev"))


def test_random_mock_data_goes_through_the_validation(tfds):
  """TFDS's own random examples (answer_start anywhere): the reader validates them."""
  with tfds.testing.mock_data(num_examples=2), pytest.raises(DataError, match="answer"):
    list(tfds_reader.read_tfds("tfds:squad/v2.0:validation"))


def test_offline_without_prepared_data_is_one_line(tmp_path, monkeypatch):
  monkeypatch.setattr(tfds_reader, "network_reachable", lambda *a, **k: False)
  with pytest.raises(tfds_reader.TfdsUnavailableError) as err:
    list(tfds_reader.read_tfds("tfds:squad/v1.1:train", data_dir=str(tmp_path),
                          hint=" (--config.data.train_file=train-v1.1.json)"))
  msg = str(err.value)
  assert "\n" not in msg and "no network" in msg
  assert "--config.data.train_file=train-v1.1.json" in msg


def test_source_syntax_and_unsupported_datasets():
  assert tfds_reader.parse_source("tfds:squad/v2.0:validation").config == "v2.0"
  with pytest.raises(ValueError, match="tfds:<name>"):
    tfds_reader.parse_source("tfds:squad")
  with pytest.raises(ValueError, match="no reader here"):
    tfds_reader.parse_source("tfds:mnist:train")


def test_squad_task_reads_a_tfds_source(tfds):
  from configs import squad2
  from poi_jax.tasks import squad as squad_task
  c = squad2.get_config("tiny")
  c.unlock()
  c.data.eval_file = "tfds:squad/v2.0:validation"
  with _mock(tfds, SQUAD_ROWS):
    got = list(squad_task.read(c, "eval"))
  assert [r.qid for r in got] == ["q1", "q2"]


def _rows(records):
  """TFDS ``squad/v2.0`` rows of SQuAD records."""
  def answers(items):
    return {"text": np.array([a["text"] for a in items] or [], dtype=object),
            "answer_start": np.array([a["answer_start"] for a in items], np.int32)}
  return [{"id": r.qid, "title": r.title, "context": r.context, "question": r.question,
           "answers": answers(r.answers), "is_impossible": r.is_impossible,
           "plausible_answers": answers(r.plausible_answers)} for r in records]


def test_the_default_job_scores_a_tfds_eval_split(tfds, tmp_path, squad_file):
  """configs/squad2.py evaluates on tfds:squad/v2.0:validation: the engine scores it (the
  official metric's gold structure is built from the records) and writes the gold file."""
  from configs import squad2
  from poi_jax.data.readers import read_squad
  from poi_jax.eval import squad as squad_metrics
  from poi_jax.train import loop
  records = list(read_squad(squad_file))
  splits = {"train": _rows(records[:32]), "validation": _rows(records[300:330])}
  c = squad2.get_config("tiny")
  with c.unlocked():
    c.data.train_file = "tfds:squad/v2.0:train"
    c.data.eval_file = "tfds:squad/v2.0:validation"
    c.data.max_train_examples = c.data.max_eval_examples = -1
    c.data.skip_eval_examples = 0
    c.train.max_steps = 2
    c.train.export_best = False
    c.data.num_workers = 0
  with tfds.testing.mock_data(as_data_source_fn=lambda self, split, **kw: splits[split]):
    results = loop.train_and_evaluate(c, str(tmp_path))
  assert results["total"] == results["num_questions"] == 30
  gold = json.loads((tmp_path / "gold.json").read_text())["data"]
  preds = json.loads((tmp_path / "predictions.json").read_text())
  odds = json.loads((tmp_path / "null_odds.json").read_text())
  assert squad_metrics.squad_v2_evaluate(gold, preds, odds)["f1"] == pytest.approx(results["f1"])
  # The run selected its best checkpoint by that score.
  assert (tmp_path / "checkpoints" / "2").is_dir()
