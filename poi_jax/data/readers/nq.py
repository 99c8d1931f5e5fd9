"""Natural Questions readers: the full format and the simplified format.

* Full (``v1.0-simplified`` is the other one): gzipped (or plain) JSON lines with
  ``example_id``, ``question_text``/``question_tokens``, ``document_tokens`` (``token``,
  ``start_byte``, ``end_byte``, ``html_token``), ``long_answer_candidates`` (``start_token``,
  ``end_token``, ``start_byte``, ``end_byte``, ``top_level``) and ``annotations`` (``long_answer``
  with ``candidate_index``, ``short_answers``, ``yes_no_answer``).
* Simplified: ``document_text`` (space-separated tokens, HTML tags as tokens such as ``<P>``)
  instead of ``document_tokens``, no byte offsets (they read as -1).

Both become `NqExample` records. Every line is validated before any feature is built: a line that
is not NQ (no ``document_tokens``/``document_text``, no ``annotations`` when answers are
required), a candidate whose tokens fall outside the document, an annotation pointing at a
missing candidate or outside the document: `DataError` naming the file, the line and the
``example_id``.
"""
from __future__ import annotations

import os
from typing import Iterator

from poi_jax.data import json_stream
# The record types live in records.py; re-exported here for callers of the old location.
from poi_jax.data.records import (Annotation, Candidate, DataError, NqExample,  # noqa: F401
                                  Span)

YES_NO = ("NONE", "YES", "NO")


def _tag(token: str) -> str:
  return (token.strip("<>").split() or [""])[0] if token.startswith("<") else token


def _int(value, default: int = -1) -> int:
  """A JSON integer field (absent: ``default``); a bool, float or string is not one."""
  if value is None:
    return default
  if type(value) is not int:
    raise TypeError(value)
  return value


def _span(rec, err, field: str, n_tokens: int) -> Span:
  try:
    s = Span(_int(rec.get("start_token")), _int(rec.get("end_token")),
             _int(rec.get("start_byte")), _int(rec.get("end_byte")))
  except (TypeError, AttributeError):
    raise err(field, f"not a span: {str(rec)[:80]}") from None
  if s.start_token >= 0 and not (s.start_token < s.end_token <= n_tokens):
    raise err(field, f"tokens [{s.start_token}, {s.end_token}) fall outside the document "
                     f"({n_tokens} tokens)")
  return s


def _list(obj: dict, key: str, err) -> list:
  value = obj.get(key, [])
  if not isinstance(value, list):
    raise err(key, f"expected a list, got {type(value).__name__}")
  return value


def parse_example(obj: dict, path: str, line: int, *, require_answers: bool = True
                  ) -> NqExample:
  """One NQ JSON object (full or simplified) -> `NqExample` (validated)."""
  ex_id = obj.get("example_id") if isinstance(obj, dict) else None

  def err(field, problem):
    return DataError(f"{path}:{line}", ex_id, field, problem)

  if not isinstance(obj, dict):
    raise err("<line>", "not a JSON object")
  if ex_id is None:
    raise err("example_id", "missing: not a Natural Questions line")
  if not isinstance(ex_id, (int, str)) or isinstance(ex_id, bool) or ex_id == "":
    raise err("example_id", f"expected an integer or a string, got {str(ex_id)[:40]}")
  if "document_tokens" in obj:
    doc_tokens = obj["document_tokens"]
    if not isinstance(doc_tokens, list):
      raise err("document_tokens", "expected a list of tokens")
    tokens, html, token_bytes = [], [], []
    for i, t in enumerate(doc_tokens):
      if not (isinstance(t, dict) and isinstance(t.get("token"), str)):
        raise err(f"document_tokens[{i}]", "each token needs 'token' (and 'html_token')")
      html_token = t.get("html_token", False)
      if not isinstance(html_token, bool):
        raise err(f"document_tokens[{i}].html_token", "expected true or false")
      try:
        token_bytes.append((_int(t.get("start_byte")), _int(t.get("end_byte"))))
      except TypeError:
        raise err(f"document_tokens[{i}]", "start_byte/end_byte must be integers") from None
      tokens.append(t["token"])
      html.append(html_token)
  elif "document_text" in obj:
    if not isinstance(obj["document_text"], str):
      raise err("document_text", "expected a string")
    tokens = obj["document_text"].split(" ")
    html = [t.startswith("<") and t.endswith(">") and len(t) > 2 for t in tokens]
    token_bytes = None
  else:
    raise err("document_tokens", "missing (neither document_tokens nor document_text): not a "
                                 "Natural Questions line")
  if "question_text" in obj:
    if not isinstance(obj["question_text"], str):
      raise err("question_text", "expected a string")
    question = obj["question_text"]
  elif "question_tokens" in obj:
    q_tokens = obj["question_tokens"]
    if not (isinstance(q_tokens, list) and all(isinstance(t, str) for t in q_tokens)):
      raise err("question_tokens", "expected a list of strings")
    question = " ".join(q_tokens)
  else:
    raise err("question_text", "missing")
  if not question.strip():
    raise err("question_text", "empty question")
  n = len(tokens)
  cands = []
  for i, c in enumerate(_list(obj, "long_answer_candidates", err)):
    field = f"long_answer_candidates[{i}]"
    s = _span(c, err, field, n)
    if s.start_token < 0:
      raise err(field, "a candidate needs start_token/end_token")
    top_level = c.get("top_level", True)
    if not isinstance(top_level, bool):
      raise err(f"{field}.top_level", "expected true or false")
    cands.append(Candidate(s.start_token, s.end_token, s.start_byte, s.end_byte, top_level,
                           _tag(tokens[s.start_token])))
  if "annotations" not in obj:
    if require_answers:
      raise err("annotations", "missing: not a Natural Questions line with answers")
    annotations = []
  else:
    annotations = []
    for a_i, a in enumerate(_list(obj, "annotations", err)):
      field = f"annotations[{a_i}]"
      if not isinstance(a, dict) or not isinstance(a.get("long_answer"), dict):
        raise err(field, "needs 'long_answer'")
      la = a["long_answer"]
      try:
        ci = _int(la.get("candidate_index"))
      except TypeError:
        raise err(f"{field}.long_answer.candidate_index", "expected an integer") from None
      if not -1 <= ci < len(cands):
        raise err(f"{field}.long_answer.candidate_index",
                  f"points at candidate {ci}, the example has {len(cands)}")
      long = _span(la, err, f"{field}.long_answer", n)
      short = tuple(_span(s, err, f"{field}.short_answers[{k}]", n)
                    for k, s in enumerate(_list(a, "short_answers", err)))
      yes_no = a.get("yes_no_answer", "NONE")
      if not isinstance(yes_no, str) or yes_no.upper() not in YES_NO:
        raise err(f"{field}.yes_no_answer", f"{str(yes_no)[:20]!r} is not one of {YES_NO}")
      annotations.append(Annotation(ci, long, short, yes_no.upper()))
  return NqExample(str(ex_id), question, tokens, html, token_bytes, cands, annotations,
                   source=os.path.abspath(path), line=line)


def _stream(files: list[str], require_answers: bool, max_examples: int
            ) -> Iterator[NqExample]:
  n = 0
  for f in files:
    for line_no, raw in json_stream.iter_lines(f):
      if 0 <= max_examples <= n:
        return
      obj = json_stream.loads_line(raw, f, line_no)
      yield parse_example(obj, f, line_no, require_answers=require_answers)
      n += 1


def read_nq(path: str, *, require_answers: bool = True, max_examples: int = -1
            ) -> Iterator[NqExample]:
  """The examples of one NQ file (``.jsonl`` or ``.jsonl.gz``, full or simplified), or of every
  ``*.jsonl*`` file of a directory (sorted), one line at a time: memory holds one page. The file
  list is made (and each file checked: there, a file, not empty) at the call; a bad line raises
  when the stream reaches it. Lines go through `json_stream.loads_line` (its limits, a BOM
  before the first line skipped)."""
  path = os.fspath(path)
  if os.path.isdir(path):
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if ".jsonl" in f)
    if not files:
      raise DataError(path, None, None, "no *.jsonl or *.jsonl.gz file in this directory")
  else:
    files = [path]
  for f in files:
    json_stream.check_readable(f)
  return _stream(files, require_answers, max_examples)
