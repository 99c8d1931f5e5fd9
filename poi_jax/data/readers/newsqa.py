"""NewsQA in the combined JSON format of Maluuba's tool (``combined-newsqa-data-v1.json``).

``data[{storyId, text, type (train|dev|test), questions[{q, consensus {s, e} | {noAnswer} |
{badQuestion}, answers[{sourcerAnswers[{s, e} | {noAnswer}]}], validatedAnswers[...]}]}]``;
character offsets, ``e`` exclusive.

Decisions (the QOPN paper is silent; issue 9 / the spec's usual practice):

* Questions whose consensus is ``noAnswer`` or ``badQuestion`` are dropped and counted.
* The consensus span is the training target (``answers[0]``); evaluation scores against every
  crowd answer: the consensus, each sourcer's span and each validated span (deduplicated).
* ``split`` keeps the stories whose ``type`` equals it (all stories when it is empty or when the
  file has no ``type``).
* Question ids are ``<storyId>#<index of the question in its story>``.

Bad input (an empty article, a span outside the article or inverted, a missing field) is a
`DataError` naming the file, the story or question and the field.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Iterator

from poi_jax.data import json_stream
from poi_jax.data.records import DataError, SquadExample

WHAT = "the combined NewsQA object with a 'data' list"


@dataclasses.dataclass
class NewsqaCounts:
  stories: int = 0
  questions: int = 0
  kept: int = 0
  no_answer: int = 0
  bad_question: int = 0


def _span(path, qid, field, ans, text_len) -> tuple[int, int] | None:
  """``(s, e)`` of an answer dict, None for ``noAnswer``/``badQuestion``; validated."""
  if not isinstance(ans, dict):
    raise DataError(path, qid, field, f"expected an object, got {type(ans).__name__}")
  if ans.get("noAnswer") or ans.get("badQuestion"):
    return None
  s, e = ans.get("s"), ans.get("e")
  if type(s) is not int or type(e) is not int:
    raise DataError(path, qid, field, "each answer needs int 's' and 'e' (or noAnswer)")
  if not 0 <= s < e <= text_len:
    raise DataError(path, qid, field, f"span [{s}, {e}) is outside the article ({text_len} "
                    f"characters) or empty")
  return s, e


def _stories(path: str, split: str, counts: NewsqaCounts) -> Iterator[SquadExample]:
  has_type = bool(split) and json_stream.has_key(path, "data.item", "type")
  for n, story in json_stream.iter_array(path, key="data", what=WHAT):
    sid = story.get("storyId", f"<story {n}>") if isinstance(story, dict) else f"<story {n}>"
    if not isinstance(story, dict):
      raise DataError(path, sid, "data", "each story must be an object")
    if not isinstance(sid, str) or not sid:
      raise DataError(path, f"<story {n}>", "storyId", "not a string")
    if split and has_type and story.get("type") != split:
      continue
    text = story.get("text")
    if not isinstance(text, str):
      raise DataError(path, sid, "text", "missing or not a string")
    if not text.strip():
      raise DataError(path, sid, "text", "empty article")
    counts.stories += 1
    questions = story.get("questions", [])
    if not isinstance(questions, list):
      raise DataError(path, sid, "questions", "expected a list of questions")
    for i, qa in enumerate(questions):
      qid = f"{sid}#{i}"
      counts.questions += 1
      if not isinstance(qa, dict):
        raise DataError(path, qid, "questions", "each question must be an object")
      q = qa.get("q")
      if not isinstance(q, str) or not q.strip():
        raise DataError(path, qid, "q", "missing or empty question")
      consensus = qa.get("consensus")
      if consensus is None:
        raise DataError(path, qid, "consensus", "missing")
      if isinstance(consensus, dict) and consensus.get("badQuestion"):
        counts.bad_question += 1
        continue
      main = _span(path, qid, "consensus", consensus, len(text))
      if main is None:
        counts.no_answer += 1
        continue
      spans = [main]
      answers = qa.get("answers", [])
      if not isinstance(answers, list):
        raise DataError(path, qid, "answers", "expected a list")
      for j, a in enumerate(answers):
        sourcer = a.get("sourcerAnswers", []) if isinstance(a, dict) else []
        if not isinstance(sourcer, list):
          raise DataError(path, qid, f"answers[{j}].sourcerAnswers", "expected a list")
        for m, src in enumerate(sourcer):
          sp = _span(path, qid, f"answers[{j}].sourcerAnswers[{m}]", src, len(text))
          if sp is not None and sp not in spans:
            spans.append(sp)
      validated = qa.get("validatedAnswers", []) or []
      if not isinstance(validated, list):
        raise DataError(path, qid, "validatedAnswers", "expected a list")
      for j, v in enumerate(validated):
        sp = _span(path, qid, f"validatedAnswers[{j}]", v, len(text))
        if sp is not None and sp not in spans:
          spans.append(sp)
      answers = [{"text": text[s:e], "answer_start": s} for s, e in spans]
      counts.kept += 1
      yield SquadExample(qid, q, text, answers, False, [], sid, path)


def iter_newsqa(path: str, split: str = "", counts: NewsqaCounts | None = None
                ) -> Iterator[SquadExample]:
  """The answerable, good questions of ``split``, one at a time; ``counts`` (updated as the
  stream goes) says what was dropped. A missing or empty file raises at the call."""
  path = os.fspath(path)
  json_stream.check_readable(path)
  return _stories(path, split, counts if counts is not None else NewsqaCounts())


def load_newsqa(path: str, split: str = "") -> tuple[list[SquadExample], NewsqaCounts]:
  """The answerable, good questions of ``split`` (a list) and what was dropped."""
  counts = NewsqaCounts()
  return list(iter_newsqa(path, split, counts)), counts


def _logged(path: str, split: str) -> Iterator[SquadExample]:
  counts = NewsqaCounts()
  kept = 0
  for ex in iter_newsqa(path, split, counts):
    kept += 1
    yield ex
  logging.info("NewsQA %s (%s): %s", path, split or "all", counts)
  if not kept:
    raise DataError(path, None, "data", f"no answerable question in split {split!r} ({counts})")


def read_newsqa(path: str, split: str = "") -> Iterator[SquadExample]:
  """`iter_newsqa`, logging what was dropped at the end of the stream (and raising there if
  nothing was kept)."""
  path = os.fspath(path)
  json_stream.check_readable(path)
  return _logged(path, split)
