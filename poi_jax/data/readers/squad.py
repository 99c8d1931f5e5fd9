"""SQuAD 1.1 / 2.0 JSON (``version``, ``data[].paragraphs[].qas[]``), streamed one article at a
time (`poi_jax.data.json_stream`): memory holds one article, not the file."""
from __future__ import annotations

import os
from typing import Iterator

from poi_jax.data import json_stream
from poi_jax.data.records import DataError, SquadExample

WHAT = "a SQuAD object with a 'data' list"


def _answers(path, qid, field, value, context: str) -> list[dict]:
  if value is None:
    return []
  if not isinstance(value, list):
    raise DataError(path, qid, field, f"expected a list of answers, got {type(value).__name__}")
  for a in value:
    if not (isinstance(a, dict) and isinstance(a.get("text"), str)
            and type(a.get("answer_start")) is int):
      raise DataError(path, qid, field, "each answer needs 'text' and int 'answer_start'")
    if not 0 <= a["answer_start"] <= len(context) - len(a["text"]):
      raise DataError(path, qid, f"{field}.answer_start",
                      f"{a['answer_start']} is outside the context ({len(context)} characters)")
  return value


def _list(path, record, field, value) -> list:
  if value is None:
    return []
  if not isinstance(value, list):
    raise DataError(path, record, field, f"expected a list, got {type(value).__name__}")
  return value


def _article_examples(path: str, n: int, article, require_answers: bool
                      ) -> Iterator[SquadExample]:
  if not isinstance(article, dict):
    raise DataError(path, f"data[{n}]", "data", "each article must be an object")
  title = article.get("title", "")
  if not isinstance(title, str):
    raise DataError(path, f"data[{n}]", "title", "not a string")
  for p_i, para in enumerate(_list(path, f"data[{n}]", "paragraphs", article.get("paragraphs"))):
    where = f"data[{n}].paragraphs[{p_i}]"
    if not isinstance(para, dict):
      raise DataError(path, where, "paragraphs", "each paragraph must be an object")
    context = para.get("context")
    for q_i, qa in enumerate(_list(path, where, "qas", para.get("qas"))):
      if not isinstance(qa, dict):
        raise DataError(path, f"{where}.qas[{q_i}]", "qas", "each question must be an object")
      # No default id: SQuAD's evaluator and the predictions file key each answer by its id,
      # so a made-up one would either collide (every question "<no id>") or name a question
      # its author cannot find; the file is what needs fixing.
      qid = qa.get("id")
      if not isinstance(qid, str) or not qid.strip():
        raise DataError(path, f"{where}.qas[{q_i}]", "id",
                        "missing, empty or not a string (every question needs its unique id)")
      if not isinstance(context, str):
        raise DataError(path, qid, "context", "missing or not a string")
      if not isinstance(qa.get("question"), str):
        raise DataError(path, qid, "question", "missing or not a string")
      impossible = qa.get("is_impossible", False)
      if not isinstance(impossible, bool):
        raise DataError(path, qid, "is_impossible", f"expected true or false, got {impossible!r}")
      answers = _answers(path, qid, "answers", qa.get("answers"), context)
      plausible = _answers(path, qid, "plausible_answers", qa.get("plausible_answers"), context)
      if require_answers and not impossible and not answers:
        raise DataError(path, qid, "answers", "an answerable question without answers")
      yield SquadExample(qid, qa["question"], context, answers, impossible, plausible, title,
                         path)


def _stream(path: str, require_answers: bool) -> Iterator[SquadExample]:
  for n, article in json_stream.iter_array(path, key="data", what=WHAT):
    yield from _article_examples(path, n, article, require_answers)


def read_squad(path: str, *, require_answers: bool = True) -> Iterator[SquadExample]:
  """The questions of a SQuAD file, one at a time, each validated before it is yielded (a
  missing, empty or unreadable file raises here, at the call).

  ``answer_start`` outside the context or a missing field is a `DataError` naming the file, the
  question id and the field, raised when the stream reaches that question; a question without
  an ``id`` names its position (``data[i].paragraphs[j].qas[k]``). What
  `poi_jax.data.json_stream` refuses in any file (nesting, long numbers, lone surrogates, NUL
  bytes, a corrupt compressed file...) names the article (``#i``), the field and the position.
  (An ``answer_start`` whose text does not match the context is kept here; the feature builder
  counts and reports it, as the original pipeline skips it.) ``require_answers=False`` (prediction on unlabelled
  questions) accepts questions without answers.
  """
  path = os.fspath(path)
  json_stream.check_readable(path)
  return _stream(path, require_answers)
