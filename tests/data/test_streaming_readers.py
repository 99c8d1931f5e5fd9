"""Streaming readers (issue 27, item 1): every reader returns an iterator that reads as it goes.
For each, a file whose first record is good and whose later record is broken: the first record
comes out, and the `DataError` (naming the file, the record and the field) comes only when the
stream reaches the broken one. One-document JSON files are parsed incrementally (a file cut after
its first article still yields that article first), and memory while streaming a large NQ or
SQuAD file stays far below the file's size (tracemalloc's peak)."""
from __future__ import annotations

import copy
import gzip
import json
import tracemalloc

import pytest

from poi_jax.data.json_stream import load_json
from poi_jax.data.readers import choice, narrativeqa, newsqa, nlquad, nq, squad, tfds
from poi_jax.data.records import DataError
from tests.conftest import SQUAD
from tests.data import nq_synthetic, qopn_fixtures



def _squad() -> dict:
  return load_json(str(SQUAD))


def _first_then_error(records, *patterns: str):
  """The first record comes out; the error comes at the next and names each pattern."""
  assert iter(records) is records, "the reader must return an iterator, not a list"
  first = next(records)
  with pytest.raises(DataError) as e:
    for _ in records:
      pass
  for p in patterns:
    assert p in str(e.value), str(e.value)
  return first


def _two_articles():
  data = _squad()
  good, bad = copy.deepcopy(data["data"][0]), copy.deepcopy(data["data"][1])
  good["paragraphs"], bad["paragraphs"] = good["paragraphs"][:1], bad["paragraphs"][:1]
  qa = next(q for q in bad["paragraphs"][0]["qas"] if q["answers"])
  bad["paragraphs"][0]["qas"] = [qa]
  qa["answers"][0]["answer_start"] = 10**6
  return {"version": "v2.0", "data": [good, bad]}, qa["id"]


def test_squad_streams_and_fails_at_the_bad_question(tmp_path):
  doc, bad_id = _two_articles()
  path = tmp_path / "s.json"
  path.write_text(json.dumps(doc))
  first = _first_then_error(squad.read_squad(path), str(path), f"record '{bad_id}'",
                            "field 'answers.answer_start'")
  assert first.qid == doc["data"][0]["paragraphs"][0]["qas"][0]["id"]


def test_nlquad_streams_and_fails_at_the_bad_question(tmp_path):
  doc, bad_id = _two_articles()
  for a in doc["data"][0]["paragraphs"][0]["qas"]:
    a.pop("is_impossible", None)
  doc["data"][0]["paragraphs"][0]["qas"] = [
      q for q in doc["data"][0]["paragraphs"][0]["qas"] if q["answers"]]
  path = tmp_path / "n.json"
  path.write_text(json.dumps(doc))
  _first_then_error(nlquad.read_nlquad(path), str(path), f"record '{bad_id}'", "answer_start")


def test_a_truncated_document_yields_its_first_article_first(tmp_path):
  """Incremental parsing: the whole document is not parsed before the first record."""
  doc, _ = _two_articles()
  text = json.dumps(doc)
  path = tmp_path / "cut.json"
  path.write_text(text[:text.index(doc["data"][1]["title"]) + 5])
  _first_then_error(squad.read_squad(path), str(path), "record '#1'",
                    "truncated (it ends early) at line 1")


def test_newsqa_streams_and_fails_at_the_bad_question(tmp_path):
  articles = qopn_fixtures.long_articles(str(SQUAD),
                                         paragraphs_per_article=1, articles=(0, 1))[:2]
  path = tmp_path / "news.json"
  qopn_fixtures.write_newsqa(path, articles)
  doc = json.loads(path.read_text())
  doc["data"][1]["questions"][0]["consensus"] = {"s": 5, "e": 10**6}
  path.write_text(json.dumps(doc))
  sid = doc["data"][1]["storyId"]
  _first_then_error(newsqa.read_newsqa(path, "train"), str(path), f"record '{sid}#0'",
                    "field 'consensus'")


def test_dream_streams_and_fails_at_the_bad_dialogue(data_dir, tmp_path):
  dialogues = json.loads((data_dir / "dream" / "dev.json").read_text())[:2]
  dialogues[1][1][0]["answer"] = "not a choice"
  path = tmp_path / "d.json"
  path.write_text(json.dumps(dialogues))
  _first_then_error(choice.read_dream(path), str(path), f"record '{dialogues[1][2]}-0'",
                    "field 'answer'")


def test_race_streams_one_file_at_a_time(data_dir, tmp_path):
  files = sorted((data_dir / "race" / "dev" / "high").glob("*.txt"))[:2]
  (tmp_path / "high").mkdir()
  for f in files:
    (tmp_path / "high" / f.name).write_text(f.read_text())
  later = tmp_path / "high" / files[1].name
  passage = json.loads(later.read_text())
  passage["answers"][0] = "Z"
  later.write_text(json.dumps(passage))
  _first_then_error(choice.read_race(tmp_path, "high"), str(later),
                    f"record '{passage['id']}-0'", "field 'answers'")


@pytest.mark.parametrize("gz", [True, False], ids=["full-gz", "simplified"])
def test_nq_streams_line_by_line(tmp_path, gz):
  # A JSON round trip: the writer's two questions of one page share their candidate lists.
  pages = json.loads(json.dumps(nq_synthetic.page_examples(
      str(SQUAD), max_examples=2)))
  if not gz:  # the simplified format: document_text
    for p in pages:
      p["document_text"] = " ".join(t["token"] for t in p.pop("document_tokens"))
  pages[1]["long_answer_candidates"][0]["end_token"] = 10**6
  text = "".join(json.dumps(p) + "\n" for p in pages).encode()
  path = tmp_path / ("nq.jsonl.gz" if gz else "nq.jsonl")
  path.write_bytes(gzip.compress(text) if gz else text)
  _first_then_error(nq.read_nq(path), f"{path}:2", f"record {pages[1]['example_id']}",
                    "field 'long_answer_candidates[0]'")


def test_nq_truncated_gzip_is_a_data_error_at_its_line(tmp_path):
  pages = nq_synthetic.page_examples(str(SQUAD), max_examples=3)
  raw = gzip.compress("".join(json.dumps(p) + "\n" for p in pages).encode())
  path = tmp_path / "cut.jsonl.gz"
  path.write_bytes(raw[:len(raw) * 2 // 3])
  with pytest.raises(DataError, match=r"cut.jsonl.gz:\d+: cannot decompress it: the file is "
                                      r"corrupt or truncated"):
    list(nq.read_nq(path))


def test_narrativeqa_csv_streams_and_needs_no_feature_code(tmp_path):
  (tmp_path / "summaries.csv").write_text("document_id,set,summary\nd1,train,A b . C d .\n")
  (tmp_path / "qaps.csv").write_text("document_id,set,question,answer1,answer2\n"
                                     "d1,train,what ?,b,A b\nd1,train,who ?,,C\n")
  first = _first_then_error(narrativeqa.read_narrativeqa(str(tmp_path), "train"),
                            f"{tmp_path / 'qaps.csv'}:3", "document 'd1'", "field 'answer1'")
  # Read as plain tokens; the sentences are the featurizer's (offline_views) work.
  assert first.document.plain and first.document.sentences == [["A", "b", ".", "C", "d", "."]]
  from poi_jax.data.features import offline_views
  (ready,) = offline_views.with_offline_views([first])
  assert not ready.document.plain and len(ready.document.sentences) == 2


def test_narrativeqa_annotated_streams_line_by_line(tmp_path):
  good = {"document_id": "d1", "summary_parse": {"sentences": [{"tokens": ["A", "b", "."]}]},
          "questions": [{"question": "what ?", "answer1": "b", "answer2": "A b"}]}
  bad = dict(good, document_id="d2", questions=[{"question": "what ?", "answer1": 3}])
  path = tmp_path / "ann.jsonl"
  path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
  _first_then_error(narrativeqa.read_narrativeqa(str(path)), f"{path}:2", "document 'd2'",
                    "field 'questions[0].answer1'")


def test_tfds_records_stream(tmp_path):
  """The TFDS converters are generators over the data source's rows (read on demand)."""
  rows = [{"id": "a", "context": "one two", "question": "q?",
           "answers": {"text": ["one"], "answer_start": [0]}},
          {"id": "b", "context": "one two", "question": "q?",
           "answers": {"text": ["two"], "answer_start": [99]}}]
  _first_then_error(tfds.squad_records(iter(rows), "tfds:squad/v1.1:train"),
                    "tfds:squad/v1.1:train", "record 'b'", "field 'answers.answer_start'")
  race = [{"example_id": "p1", "article": "t", "questions": ["q"], "options": [["x", "y"]],
           "answers": ["A"]},
          {"example_id": "p2", "article": "t", "questions": ["q"], "options": [["x", "y"]],
           "answers": ["E"]}]
  _first_then_error(tfds.race_records(iter(race), "tfds:race/high:dev", "high"),
                    "record 'p2-0'", "field 'answers'")


def test_calls_fail_at_once_on_a_missing_file(tmp_path):
  """What can be checked without reading (the file is there, not empty) raises at the call."""
  missing = tmp_path / "missing.json"
  for read in (squad.read_squad, choice.read_dream, nlquad.read_nlquad, newsqa.read_newsqa,
               nq.read_nq, narrativeqa.read_annotated):
    with pytest.raises(DataError, match="missing.json"):
      read(str(missing))
  (tmp_path / "empty.json").write_text(" \n")
  with pytest.raises(DataError, match="empty.json: the file is empty"):
    squad.read_squad(tmp_path / "empty.json")


def _peak_while_streaming(records) -> tuple[int, int]:
  tracemalloc.start()
  try:
    n = sum(1 for _ in records)
    return n, tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()


def test_nq_streaming_memory_stays_far_below_the_file(tmp_path):
  pages = nq_synthetic.page_examples(str(SQUAD), max_examples=4,
                                     num_annotations=1)
  path = tmp_path / "big.jsonl"
  with open(path, "w") as f:
    for i in range(150):
      f.write(json.dumps(dict(pages[i % len(pages)], example_id=i)) + "\n")
  size = path.stat().st_size
  assert size > 3_000_000
  n, peak = _peak_while_streaming(nq.read_nq(path))
  assert n == 150
  # One page as Python objects is a few hundred kB; the whole file would be many times its size.
  assert peak < size / 10, (peak, size)


def test_squad_streaming_memory_is_flat(tmp_path):
  """Streaming a document 4x larger peaks at the same memory (one article and the events of one
  parser buffer), below the size of the file."""
  data = _squad()["data"]
  small = [dict(a, paragraphs=a["paragraphs"][:4]) for a in data]
  peaks, sizes = [], []
  for reps in (1, 4):
    articles = [dict(a, title=f"{a['title']}-{i}") for i in range(reps) for a in small]
    path = tmp_path / f"big{reps}.json"
    path.write_text(json.dumps({"version": "v2.0", "data": articles}))
    n, peak = _peak_while_streaming(squad.read_squad(path))
    assert n == reps * sum(len(p["qas"]) for a in small for p in a["paragraphs"])
    peaks.append(peak)
    sizes.append(path.stat().st_size)
  assert peaks[1] < 1.25 * peaks[0] + 65536, (peaks, sizes)
  assert peaks[1] < sizes[1] / 1.5, (peaks, sizes)


def test_a_narrativeqa_document_without_tokens_is_refused(tmp_path):
  good = {"document_id": "d1", "summary_parse": {"sentences": [{"tokens": ["A", "b", "."]}]},
          "questions": [{"question": "what ?", "answer1": "b", "answer2": "A b"}]}
  path = tmp_path / "ann.jsonl"
  for parse in ({"sentences": []}, {"sentences": [{"tokens": [" ", "\n"]}]}):
    path.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, document_id="d2",
                                                              summary_parse=parse)) + "\n")
    _first_then_error(narrativeqa.read_narrativeqa(str(path)), f"{path}:2", "document 'd2'",
                      "field 'summary_parse.sentences'", "the document has no tokens")


def test_tfds_rows_that_cannot_be_read_or_decoded_are_data_errors():
  """A TFDS row is read back from its record file on demand: a row that fails there, or holds
  bytes that are not UTF-8, names the source and the row."""
  good = {"id": b"a", "context": b"one two", "question": b"q?",
          "answers": {"text": [b"one"], "answer_start": [0]}}
  _first_then_error(tfds.squad_records(iter([good, dict(good, id=b"b", context=b"\xffx")]),
                                       "tfds:squad/v1.1:train"),
                    "tfds:squad/v1.1:train", "record '#1'", "not UTF-8 text (byte 0xff")

  def rows():
    yield good
    raise OSError("corrupted record at offset 1234")
  _first_then_error(tfds.squad_records(rows(), "tfds:squad/v1.1:train"), "record '#1'",
                    "cannot read this row (OSError: corrupted record")
