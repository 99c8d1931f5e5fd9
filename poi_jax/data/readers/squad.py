"""SQuAD 1.1 / 2.0 JSON (``version``, ``data[].paragraphs[].qas[]``)."""
from __future__ import annotations

import os

from poi_jax.data.records import DataError, SquadExample, load_json


def read_squad(path: str, *, require_answers: bool = True) -> list[SquadExample]:
  """All questions of a SQuAD file, validated before any tokenising.

  ``answer_start`` outside the context or a missing field is a `DataError` naming the file, the
  question id and the field. (An ``answer_start`` whose text does not match the context is kept
  here; the feature builder counts and reports it, as the original pipeline skips it.)
  ``require_answers=False`` (prediction on unlabelled questions) accepts questions without
  answers.
  """
  path = os.fspath(path)
  data = load_json(path)
  if not isinstance(data, dict) or not isinstance(data.get("data"), list):
    raise DataError(path, None, "data", "expected a SQuAD object with a 'data' list")
  out = []
  for article in data["data"]:
    title = article.get("title", "")
    for para in article.get("paragraphs", []):
      context = para.get("context")
      for qa in para.get("qas", []):
        qid = qa.get("id", "<no id>")
        if not isinstance(context, str):
          raise DataError(path, qid, "context", "missing or not a string")
        if not isinstance(qa.get("question"), str):
          raise DataError(path, qid, "question", "missing or not a string")
        impossible = bool(qa.get("is_impossible", False))
        answers = qa.get("answers", [])
        for field in ("answers", "plausible_answers"):
          for a in qa.get(field, []):
            if not isinstance(a.get("text"), str) or not isinstance(a.get("answer_start"), int):
              raise DataError(path, qid, field, "each answer needs 'text' and int 'answer_start'")
            if not 0 <= a["answer_start"] <= len(context) - len(a["text"]):
              raise DataError(path, qid, f"{field}.answer_start",
                              f"{a['answer_start']} is outside the context "
                              f"({len(context)} characters)")
        if require_answers and not impossible and not answers:
          raise DataError(path, qid, "answers", "an answerable question without answers")
        out.append(SquadExample(qid, qa["question"], context, answers, impossible,
                                qa.get("plausible_answers", []), title, path))
  return out
