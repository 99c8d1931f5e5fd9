"""Hostile input to the server's request parsing and the predict CLI's input handling, without a
model (issue 35): `poi_jax.inference.requests.loads` bounds nesting and numbers and names the field
of every problem; `poi_jax.predict` refuses an unreadable file in one line before loading the
model, skips bad lines naming file, line and field, and answers a chunk's other lines when one
line makes the Reader fail. The fuzzed versions, with the tiny model: tests/test_serve.py and
tests/test_reader.py (cases from tests/hostile_inputs.py)."""
from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import time

import pytest

from poi_jax import predict
from poi_jax.inference.requests import (MAX_DEPTH, InputError, JSONProblem, Unusable, _items,
                                    body_error, loads, parse_answer, parse_choose)
from tests.conftest import ROOT


def _problem(raw) -> InputError:
  """The request error `loads` gives ``raw`` (it must give one)."""
  with pytest.raises(JSONProblem) as e:
    loads(raw)
  return body_error(e.value)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
def test_nesting_past_the_limit_names_the_field_at_any_depth(depth):
  err = _problem(b'{"question": "q", "note": ' + b"[" * depth + b"]" * depth + b"}")
  assert (err.status, err.field, err.item) == (422, "note", None)
  assert f"nested deeper than {MAX_DEPTH}" in str(err)
  listed = _problem(b'[{"question": "q"}, {"options": ' + b'{"k": ' * depth + b"1" +
                    b"}" * depth + b"}]")
  assert (listed.field, listed.item) == ("options", 1)
  # Within the limit it parses (the request needs 3 levels).
  ok = b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1)
  assert loads(b'{"note": ' + ok + b"}")["note"] is not None


def test_a_megabyte_of_brackets_is_refused_in_linear_time():
  start = time.perf_counter()
  for body in (b"[" * (1 << 20), b"[" + b"{}," * 300_000 + b"1]", b'"' + b'\\"' * 500_000):
    with pytest.raises(JSONProblem):
      loads(body + b"x")
  assert time.perf_counter() - start < 10  # quadratic would take minutes


def test_numbers_python_cannot_use_are_kept_unconverted_and_refused_by_name():
  obj = loads(b'{"top_k": ' + b"9" * 5001 + b', "null_threshold": 1e400, "a": NaN, "b": -1e400,'
              b' "c": 1e-400, "d": 12}')
  assert isinstance(obj["top_k"], Unusable) and "5,001 digits" in repr(obj["top_k"])
  assert isinstance(obj["null_threshold"], Unusable) and "beyond the float range" in repr(
      obj["null_threshold"])
  assert isinstance(obj["a"], Unusable) and isinstance(obj["b"], Unusable)
  assert (obj["c"], obj["d"]) == (0.0, 12)
  for field, value in (("top_k", b"9" * 5001), ("null_threshold", b"1e400"),
                       ("null_threshold", b"NaN"), ("null_threshold", b"-Infinity"),
                       ("null_threshold", b"1" * 400)):
    body = loads(b'{"question": "q", "context": "c", "' + field.encode() + b'": ' + value + b"}")
    with pytest.raises(InputError) as e:
      parse_answer(body, None)
    assert (e.value.status, e.value.field) == (422, field)
    assert len(str(e.value)) < 200  # the 5,001 digits are not copied into the message
  # An ignored field may hold anything valid: the request is answered.
  record, (_, delta, top_k) = parse_answer(loads(b'{"question": "q", "context": "c", '
                                                 b'"note": 1e400, "top_k": 3}'), None)
  assert (record.question, delta, top_k) == ("q", None, 3)


def test_invalid_utf8_and_lone_surrogates_name_the_field():
  err = _problem(b'{"question": "Wh\xc3\x28o?", "context": "c"}')
  assert (err.status, err.field) == (400, "question") and "not UTF-8" in str(err)
  err = _problem(b'[{"question": "q", "context": "c"}, {"question": "q", "context": "\xed\xa0'
                 b'\x80"}]')  # a surrogate encoded in UTF-8 (CESU): not UTF-8
  assert (err.status, err.field, err.item) == (400, "context", 1)
  err = _problem(b'{"question": "q\x00", "context": "c"}')  # a raw NUL inside a string
  assert (err.status, err.field) == (400, "question") and "not JSON" in str(err)
  for body, field in ((b'{"question": "q", "context": "a \\ud800 b"}', "context"),
                      (b'{"question": "\\udfff", "context": "c"}', "question")):
    with pytest.raises(InputError) as e:
      parse_answer(loads(body), None)
    assert (e.value.status, e.value.field) == (422, field) and "lone surrogate" in str(e.value)
    json.dumps(e.value.body(), ensure_ascii=False).encode("utf-8")  # the error is valid UTF-8
  with pytest.raises(InputError) as e:
    parse_choose(loads(b'{"passage": "p", "question": "q", "options": ["a", "\\ud800"]}'), 3)
  assert (e.value.field, e.value.item) == ("options", 3) and "option 1" in str(e.value)
  # Valid: an escaped NUL, a surrogate pair, a byte-order mark, a lone surrogate in a key.
  record, _ = parse_answer(loads(b'\xef\xbb\xbf{"question": "q\\u0000", "context": '
                                 b'"\\ud83d\\ude00 c", "\\ud800": 1}'), None)
  assert record.context == "\U0001F600 c"


def test_a_list_that_can_never_fit_the_queue_is_a_413_naming_the_limit():
  with pytest.raises(InputError) as e:
    _items([{"question": "q", "context": "c"}] * 300, max_items=256)
  assert e.value.status == 413 and "--max_queue=256" in str(e.value)
  assert len(_items([{}] * 256, max_items=256)[0]) == 256
  with pytest.raises(InputError) as e:
    parse_choose({"passage": "p", "question": "q", "options": ["o"] * 1000}, None)
  assert (e.value.status, e.value.field) == (422, "options") and "1000 options" in str(e.value)


# ------------------------------------------------------------------------------------------------
# The predict CLI's input
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,content,told", [
    ("missing.jsonl", None, "does not exist"),
    ("a-directory", "dir", "is a directory"),
    ("empty.jsonl", b"", "is empty"),
    ("blank.jsonl", b"\n  \r\n\n", "only blank lines"),
    ("binary.jsonl", b"\x80\x81\x82\n\xc3\x28\n", "is not UTF-8 text"),
    ("utf16.jsonl", '{"question": "q", "context": "c"}\n'.encode("utf-16"), "is UTF-16"),
    ("questions.jsonl.gz", gzip.compress(b'{"question": "q", "context": "c"}\n'),
     "gzip-compressed"),
])
def test_an_unreadable_input_file_is_one_error_naming_it(tmp_path, name, content, told):
  path = tmp_path / name
  if content == "dir":
    path.mkdir()
  elif content is not None:
    path.write_bytes(content)
  with pytest.raises(predict.InputFileError, match=told) as e:
    predict.read_lines(str(path))
  assert str(e.value).startswith(f"{path}: ")


def test_the_cli_refuses_an_unreadable_input_before_loading_the_model(tmp_path):
  """No traceback, one ``error:`` line naming the input; the model path does not exist, so an
  error about the input proves the input was checked first."""
  questions = tmp_path / "questions"
  questions.mkdir()
  r = subprocess.run([sys.executable, "-m", "poi_jax.predict", f"--model={tmp_path / 'none'}",
                      f"--input={questions}", f"--output={tmp_path / 'out.jsonl'}"],
                     capture_output=True, text=True, timeout=300, cwd=ROOT,
                     env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert r.returncode == 1
  lines = [x for x in r.stderr.splitlines() if x.strip()]
  assert lines[-1] == f"error: {questions}: is a directory, not a JSON-lines file of questions"
  assert "Traceback" not in r.stderr and not (tmp_path / "out.jsonl").exists()


def test_bad_lines_name_file_line_and_field_whatever_they_hold(tmp_path):
  good = b'{"id": "g", "question": "q", "context": "c"}'
  lines = [good,
           b'{"id": "a", "question": "q\xff", "context": "c"}',  # invalid UTF-8
           b'{"id": ' + b"1" * 5001 + b', "question": "q", "context": "c"}',  # huge integer
           b'{"id": ' + b"[" * 1000 + b"]" * 1000 + b', "question": "q", "context": "c"}',
           b'{"id": "s", "question": "\\ud800", "context": "c"}',  # lone surrogate
           b'{"id": "t", "question": "q", "context": "c", "x": 1e400}',  # ignored: answered
           b'\xef\xbb\xbf' + good,  # a mark on any line (files joined by cat): allowed
           b'{"id": true, "question": "q", "context": "c"}']
  path = tmp_path / "q.jsonl"
  path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\r\n")  # BOM at the start: allowed
  err = io.StringIO()
  records, skipped = predict.parse_lines(predict.read_lines(str(path)), str(path), True, err=err)
  assert [qid for qid, _ in records] == ["g", "t", "g"] and skipped == 5
  told = err.getvalue().splitlines()
  assert [t.split(": field ")[0] for t in told] == [f"skipped: {path}:{i}" for i in
                                                    (2, 3, 4, 5, 8)]
  for t, field in zip(told, ("question", "id", "id", "question", "id")):
    assert f": field {field!r}: " in t and len(t) < 300, t


class _FaultyReader:
  """A Reader stand-in for `predict`: refuses (ValueError) a question "refuse", fails (a bug:
  TypeError) on "boom", and answers the others with their question."""
  is_extractive = True

  def answer_records(self, records):
    from poi_jax.inference.reader import Answer
    for r in records:
      if r.question == "refuse":
        raise ValueError(f"{r.source}: field 'question': refused")
      if r.question == "boom":
        raise TypeError("a bug")
    return [Answer(r.question, 0, 1, 1.0, 1.0, False, None) for r in records]


def test_one_line_that_breaks_the_reader_costs_only_itself(tmp_path):
  lines = [{"id": i, "question": q, "context": "c"}
           for i, q in enumerate(["a", "boom", "b", "refuse", "c"])]
  path, out = tmp_path / "q.jsonl", tmp_path / "a.jsonl"
  path.write_text("".join(json.dumps(x) + "\n" for x in lines))
  err = io.StringIO()
  assert predict.predict_file(_FaultyReader(), str(path), str(out), err=err) == (3, 2)
  assert [(a["id"], a["answer"]) for a in map(json.loads, out.read_text().splitlines())] == [
      (0, "a"), (2, "b"), (4, "c")]
  told = err.getvalue()
  assert f"{path}:2: internal error (TypeError: a bug)" in told
  assert f"skipped: {path}:4: field 'question': refused" in told
  # No good line at all: one error naming the file, nothing written.
  path.write_text('{"id": 1}\n[]\n')
  with pytest.raises(predict.InputFileError, match="none of its 2 line"):
    predict.predict_file(_FaultyReader(), str(path), str(tmp_path / "none.jsonl"),
                         err=io.StringIO())
  assert not (tmp_path / "none.jsonl").exists()
