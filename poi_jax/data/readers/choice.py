"""Multiple-choice readers: RACE (a tree of per-passage JSON files, read one file at a time) and
DREAM (one JSON list, streamed one dialogue at a time with `poi_jax.data.json_stream`)."""
from __future__ import annotations

import glob
import os
from typing import Iterator

from poi_jax.data import json_stream
from poi_jax.data.json_stream import load_json
from poi_jax.data.records import ChoiceExample, DataError

LETTERS = "ABCDEFGH"


def _strings(path, record, field, value) -> list[str]:
  if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
    raise DataError(path, record, field, "expected a list of strings")
  return value


def race_file_examples(path: str, level: str) -> Iterator[ChoiceExample]:
  """The questions of one RACE passage file (validated)."""
  d = load_json(path)
  if not isinstance(d, dict):
    raise DataError(path, os.path.basename(path), None, "expected a RACE passage object")
  pid = d.get("id", os.path.basename(path))
  if not isinstance(pid, str) or not pid:
    raise DataError(path, os.path.basename(path), "id", "not a string")
  for field in ("article", "questions", "options", "answers"):
    if field not in d:
      raise DataError(path, pid, field, "missing")
  if not isinstance(d["article"], str):
    raise DataError(path, pid, "article", "not a string")
  questions = _strings(path, pid, "questions", d["questions"])
  answers = _strings(path, pid, "answers", d["answers"])
  if not isinstance(d["options"], list):
    raise DataError(path, pid, "options", "expected a list of option lists")
  if not (len(questions) == len(d["options"]) == len(answers)):
    raise DataError(path, pid, "questions", "questions, options and answers differ in count")
  for i, (q, opts, ans) in enumerate(zip(questions, d["options"], answers)):
    rid = f"{pid}-{i}"
    opts = _strings(path, rid, f"options[{i}]", opts)
    if not 2 <= len(opts) <= len(LETTERS):
      raise DataError(path, rid, f"options[{i}]", f"expected 2 to {len(LETTERS)} options, got "
                      f"{len(opts)}")
    if len(ans) != 1 or ans not in LETTERS[:len(opts)]:
      raise DataError(path, rid, "answers", f"{ans!r} is not one of the {len(opts)} options")
    yield ChoiceExample(rid, d["article"], q, list(opts), LETTERS.index(ans), path, level)


def read_race(root: str, level: str = "all") -> Iterator[ChoiceExample]:
  """RACE ``<root>/{high,middle}/*.txt`` (``article``, ``questions``, ``options``, ``answers``
  as letters, ``id``); ``level`` = all | high | middle. The file list is made at the call (no
  file there raises at once); the passages are read one file at a time as the stream goes."""
  if level not in ("all", "high", "middle"):
    raise ValueError(f"RACE level must be all, high or middle, got {level!r}")
  root = os.fspath(root)
  levels = ("high", "middle") if level == "all" else (level,)
  files = []
  for lv in levels:
    found = sorted(glob.glob(os.path.join(root, lv, "*.txt")))
    files += [(lv, f) for f in found]
  if not files:
    raise DataError(root, None, "<dir>", f"no RACE files under {root}/{{{','.join(levels)}}}")
  return (ex for lv, path in files for ex in race_file_examples(path, lv))


def _dream_stream(path: str) -> Iterator[ChoiceExample]:
  for n, item in json_stream.iter_array(path, what="the DREAM list of dialogues"):
    if not (isinstance(item, list) and len(item) == 3):
      raise DataError(path, f"#{n}", None, "each record is [dialogue_lines, questions, id]")
    lines, questions, did = item
    if not isinstance(did, (str, int)) or isinstance(did, bool):
      raise DataError(path, f"#{n}", "id", "the dialogue id must be a string")
    lines = _strings(path, did, "dialogue", lines)
    if not isinstance(questions, list):
      raise DataError(path, did, "questions", "expected a list of questions")
    for i, q in enumerate(questions):
      rid = f"{did}-{i}"
      if not isinstance(q, dict):
        raise DataError(path, rid, "questions", "each question must be an object")
      for field in ("question", "choice", "answer"):
        if field not in q:
          raise DataError(path, rid, field, "missing")
      if not isinstance(q["question"], str):
        raise DataError(path, rid, "question", "not a string")
      choices = _strings(path, rid, "choice", q["choice"])
      if q["answer"] not in choices:
        raise DataError(path, rid, "answer", f"{q['answer']!r} is not among the choices")
      yield ChoiceExample(rid, "\n".join(lines), q["question"], list(choices),
                          choices.index(q["answer"]), path)


def read_dream(path: str) -> Iterator[ChoiceExample]:
  """DREAM ``[[dialogue_lines, [{question, choice, answer}], id], ...]``, one question at a time;
  the dialogue lines (with their ``M:``/``W:`` speakers) are joined with newlines into the
  passage. A missing or empty file raises at the call."""
  path = os.fspath(path)
  json_stream.check_readable(path)
  return _dream_stream(path)
