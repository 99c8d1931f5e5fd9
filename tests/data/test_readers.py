"""Readers load the shipped SQuAD sample and $POI_JAX_DATA (../shared/data: DREAM, RACE) with the
counts their READMEs give, and reject bad records."""
import json

import pytest

from poi_jax.data.readers import read_dream, read_race, read_squad
from poi_jax.data.records import DataError


def test_squad2_subset_counts(squad_file):
  ex = list(read_squad(squad_file))
  assert len(ex) == 4449
  assert sum(e.is_impossible for e in ex) == 2342
  assert len({e.title for e in ex}) == 12
  assert all(len(e.qid) == 25 for e in ex)


def test_dream_counts(data_dir):
  train = list(read_dream(data_dir / "dream" / "train.json"))
  dev = list(read_dream(data_dir / "dream" / "dev.json"))
  assert len(train) == 6116 and len({e.qid.rsplit("-", 1)[0] for e in train}) == 3869
  assert len(dev) == 2040 and len({e.qid.rsplit("-", 1)[0] for e in dev}) == 1288
  assert all(len(e.options) == 3 for e in train + dev)


def test_race_counts(data_dir):
  high = list(read_race(data_dir / "race" / "dev", "high"))
  middle = list(read_race(data_dir / "race" / "dev", "middle"))
  assert len(high) == 3451 and len({e.source for e in high}) == 1021
  assert len(middle) == 1436 and len({e.source for e in middle}) == 368
  assert len(list(read_race(data_dir / "race" / "dev"))) == 3451 + 1436


def _squad(tmp_path, qa, context="The cat sat on the mat."):
  p = tmp_path / "s.json"
  p.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
      {"context": context, "qas": [qa]}]}]}))
  return p


def test_bad_squad_records_name_file_record_field(tmp_path):
  p = _squad(tmp_path, {"id": "q1", "question": "Where?", "is_impossible": False,
                        "answers": [{"text": "mat", "answer_start": 99}]})
  with pytest.raises(DataError, match=r"s.json: record 'q1', field 'answers.answer_start'"):
    list(read_squad(p))
  p = _squad(tmp_path, {"id": "q2", "is_impossible": True, "answers": []})
  with pytest.raises(DataError, match=r"record 'q2', field 'question'"):
    list(read_squad(p))
  (tmp_path / "bad.json").write_text("{not json")
  with pytest.raises(DataError, match=r"bad.json: .*not valid JSON"):
    list(read_squad(tmp_path / "bad.json"))


def test_bad_choice_records(tmp_path):
  p = tmp_path / "d.json"
  p.write_text(json.dumps([[["M: hi"], [{"question": "q", "choice": ["a", "b", "c"],
                                         "answer": "z"}], "5-1"]]))
  with pytest.raises(DataError, match=r"d.json: record '5-1-0', field 'answer'"):
    list(read_dream(p))
  (tmp_path / "r" / "high").mkdir(parents=True)
  (tmp_path / "r" / "high" / "1.txt").write_text(json.dumps(
      {"id": "high1.txt", "article": "a", "questions": ["q"], "options": [["x", "y"]],
       "answers": ["D"]}))
  with pytest.raises(DataError, match=r"1.txt: record 'high1.txt-0', field 'answers'"):
    list(read_race(tmp_path / "r", "high"))
  (tmp_path / "r" / "high" / "1.txt").write_text(json.dumps({"id": "h", "article": "a"}))
  with pytest.raises(DataError, match=r"record 'h', field 'questions': missing"):
    list(read_race(tmp_path / "r", "high"))


@pytest.mark.parametrize("content,problem", [
    (b"", "the file is empty"), (b"  \n", "the file is empty"),
    (b'{"version": "v2.0", "data": [{"title": "t"', "truncated"),
    (b'{"data": [}', "not valid JSON"),
    ('{"data": []}'.encode("utf-16"), "not UTF-8"),
    (b'{"data": [{"title": "caf\xe9"}]}', "not UTF-8 text (byte 0xe9 at offset 24)")])
def test_unreadable_files_name_the_file_and_the_cause(tmp_path, content, problem):
  for reader, name in ((read_squad, "s.json"), (read_dream, "d.json")):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as e:
      list(reader(path))
    assert str(e.value).startswith(f"{path}: ") and problem in str(e.value)
    assert "record None" not in str(e.value) and "<file>" not in str(e.value)


@pytest.mark.parametrize("answer", ["AB", "", "BC"])
def test_race_answer_must_be_one_letter(tmp_path, answer):
  """``"AB" in "ABCD"`` is a substring test: without the length check, "AB" and "" read as A."""
  (tmp_path / "high").mkdir()
  (tmp_path / "high" / "1.txt").write_text(json.dumps(
      {"id": "h1", "article": "a", "questions": ["q"], "options": [["w", "x", "y", "z"]],
       "answers": [answer]}))
  with pytest.raises(DataError, match=r"record 'h1-0', field 'answers'"):
    list(read_race(tmp_path, "high"))
  from poi_jax.data.readers import tfds
  rows = [{"example_id": "h1", "article": "a", "questions": ["q"],
           "options": [["w", "x", "y", "z"]], "answers": [answer]}]
  with pytest.raises(DataError, match=r"record 'h1-0', field 'answers'"):
    list(tfds.race_records(rows, "tfds:race/high:dev", "high"))


def test_a_squad_question_without_an_id_is_refused_at_its_position(tmp_path):
  """Ids key the evaluator's and the predictions file's answers: two questions without one used
  to both read as "<no id>" (one answer overwrote the other)."""
  p = tmp_path / "s.json"
  qa = {"question": "Where?", "answers": [{"text": "mat", "answer_start": 19}]}
  p.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
      {"context": "The cat sat on the mat.", "qas": [dict(qa, id="q1"), qa, qa]}]}]}))
  records = read_squad(p)
  assert next(records).qid == "q1"
  with pytest.raises(DataError, match=r"s.json: record 'data\[0\].paragraphs\[0\].qas\[1\]', "
                                      r"field 'id': missing"):
    next(records)
