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

from poi_jax.data.records import DataError, SquadExample, load_json


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
  if not isinstance(s, int) or not isinstance(e, int):
    raise DataError(path, qid, field, "each answer needs int 's' and 'e' (or noAnswer)")
  if not 0 <= s < e <= text_len:
    raise DataError(path, qid, field, f"span [{s}, {e}) is outside the article ({text_len} "
                    f"characters) or empty")
  return s, e


def load_newsqa(path: str, split: str = "") -> tuple[list[SquadExample], NewsqaCounts]:
  """The answerable, good questions of ``split`` and what was dropped."""
  path = os.fspath(path)
  data = load_json(path)
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise DataError(path, None, "data", "expected the combined NewsQA object with a 'data' list")
  has_type = any(isinstance(s, dict) and "type" in s for s in data["data"])
  counts = NewsqaCounts()
  out = []
  for n, story in enumerate(data["data"]):
    sid = story.get("storyId", f"<story {n}>") if isinstance(story, dict) else f"<story {n}>"
    if not isinstance(story, dict):
      raise DataError(path, sid, "data", "each story must be an object")
    if split and has_type and story.get("type") != split:
      continue
    text = story.get("text")
    if not isinstance(text, str):
      raise DataError(path, sid, "text", "missing or not a string")
    if not text.strip():
      raise DataError(path, sid, "text", "empty article")
    counts.stories += 1
    for i, qa in enumerate(story.get("questions", [])):
      qid = f"{sid}#{i}"
      counts.questions += 1
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
      for j, a in enumerate(qa.get("answers", [])):
        for m, src in enumerate(a.get("sourcerAnswers", []) if isinstance(a, dict) else []):
          sp = _span(path, qid, f"answers[{j}].sourcerAnswers[{m}]", src, len(text))
          if sp is not None and sp not in spans:
            spans.append(sp)
      for j, v in enumerate(qa.get("validatedAnswers", []) or []):
        sp = _span(path, qid, f"validatedAnswers[{j}]", v, len(text))
        if sp is not None and sp not in spans:
          spans.append(sp)
      answers = [{"text": text[s:e], "answer_start": s} for s, e in spans]
      out.append(SquadExample(qid, q, text, answers, False, [], sid, path))
      counts.kept += 1
  return out, counts


def read_newsqa(path: str, split: str = "") -> list[SquadExample]:
  """`load_newsqa`, logging what was dropped."""
  examples, counts = load_newsqa(path, split)
  logging.info("NewsQA %s (%s): %s", path, split or "all", counts)
  if not examples:
    raise DataError(path, None, "data", f"no answerable question in split {split!r} ({counts})")
  return examples
