"""NLQuAD (Soleimani et al., EACL 2021) in its SQuAD v1.1 JSON format (one long answer per
question: the body paragraphs under an interrogative sub-heading of a BBC article).

On top of `poi_jax.data.readers.squad.read_squad` (file, record and field named on errors): an
empty article and an answer whose text differs from the article at ``answer_start`` are
`DataError`s (NLQuAD answers are copied from the article, so a mismatch is a broken file, not
the annotation noise SQuAD tolerates).
"""
from __future__ import annotations

import os
from typing import Iterator

from poi_jax.data import json_stream
from poi_jax.data.readers.squad import read_squad
from poi_jax.data.records import DataError, SquadExample


def _checked(path: str, require_answers: bool) -> Iterator[SquadExample]:
  n = 0
  for ex in read_squad(path, require_answers=require_answers):
    if not ex.context.strip():
      raise DataError(path, ex.qid, "context", "empty article")
    if not ex.question.strip():
      raise DataError(path, ex.qid, "question", "empty question")
    for a in ex.answers:
      got = ex.context[a["answer_start"]:a["answer_start"] + len(a["text"])]
      if got != a["text"]:
        raise DataError(path, ex.qid, "answers.text",
                        f"does not match the article at answer_start={a['answer_start']} "
                        f"(article has {got[:40]!r}, answer {a['text'][:40]!r})")
    n += 1
    yield ex
  if not n:
    raise DataError(path, None, "data", "no questions")


def read_nlquad(path: str, *, require_answers: bool = True) -> Iterator[SquadExample]:
  """The questions of an NLQuAD file, one at a time (a missing or empty file raises at the
  call; a bad question when the stream reaches it; a file without questions at its end)."""
  path = os.fspath(path)
  json_stream.check_readable(path)
  return _checked(path, require_answers)
