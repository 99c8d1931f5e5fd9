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

import dataclasses
import gzip
import json
import os

from poi_jax.data.records import DataError

YES_NO = ("NONE", "YES", "NO")


@dataclasses.dataclass(frozen=True)
class Candidate:
  """A long-answer candidate: tokens ``[start_token, end_token)``; ``tag`` its first (HTML)
  token without brackets (``P``, ``Table``, ``Ul``, ``Tr``, ...)."""
  start_token: int
  end_token: int
  start_byte: int
  end_byte: int
  top_level: bool
  tag: str


@dataclasses.dataclass(frozen=True)
class Span:
  start_token: int
  end_token: int
  start_byte: int = -1
  end_byte: int = -1

  def to_json(self) -> dict:
    return dict(start_token=self.start_token, end_token=self.end_token,
                start_byte=self.start_byte, end_byte=self.end_byte)


@dataclasses.dataclass(frozen=True)
class Annotation:
  """``candidate_index`` -1 = no long answer; ``long`` its span (-1s when null)."""
  candidate_index: int
  long: Span
  short: tuple[Span, ...]
  yes_no: str  # NONE | YES | NO


@dataclasses.dataclass
class NqExample:
  example_id: str
  question: str
  tokens: list[str]
  html: list[bool]
  token_bytes: list[tuple[int, int]] | None  # (start, end) per token; None: simplified format
  candidates: list[Candidate]
  annotations: list[Annotation]
  source: str = ""
  line: int = 0


def _open(path: str):
  with open(path, "rb") as f:
    magic = f.read(2)
  if magic == b"\x1f\x8b":
    return gzip.open(path, "rt", encoding="utf-8")
  return open(path, encoding="utf-8")


def _tag(token: str) -> str:
  return token.strip("<>").split()[0] if token.startswith("<") else token


def _span(rec: dict, err, field: str, n_tokens: int) -> Span:
  try:
    s = Span(int(rec.get("start_token", -1)), int(rec.get("end_token", -1)),
             int(rec.get("start_byte", -1)), int(rec.get("end_byte", -1)))
  except (TypeError, ValueError, AttributeError):
    raise err(field, f"not a span: {rec!r}") from None
  if s.start_token >= 0 and not (s.start_token < s.end_token <= n_tokens):
    raise err(field, f"tokens [{s.start_token}, {s.end_token}) fall outside the document "
                     f"({n_tokens} tokens)")
  return s


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
  if "document_tokens" in obj:
    try:
      tokens = [str(t["token"]) for t in obj["document_tokens"]]
      html = [bool(t.get("html_token", False)) for t in obj["document_tokens"]]
      token_bytes = [(int(t.get("start_byte", -1)), int(t.get("end_byte", -1)))
                     for t in obj["document_tokens"]]
    except (TypeError, KeyError, ValueError):
      raise err("document_tokens", "each token needs 'token' (and 'html_token')") from None
  elif "document_text" in obj:
    tokens = str(obj["document_text"]).split(" ")
    html = [t.startswith("<") and t.endswith(">") and len(t) > 2 for t in tokens]
    token_bytes = None
  else:
    raise err("document_tokens", "missing (neither document_tokens nor document_text): not a "
                                 "Natural Questions line")
  if "question_text" in obj:
    question = str(obj["question_text"])
  elif "question_tokens" in obj:
    question = " ".join(map(str, obj["question_tokens"]))
  else:
    raise err("question_text", "missing")
  if not question.strip():
    raise err("question_text", "empty question")
  n = len(tokens)
  cands = []
  for i, c in enumerate(obj.get("long_answer_candidates", [])):
    s = _span(c, err, f"long_answer_candidates[{i}]", n)
    if s.start_token < 0:
      raise err(f"long_answer_candidates[{i}]", "a candidate needs start_token/end_token")
    cands.append(Candidate(s.start_token, s.end_token, s.start_byte, s.end_byte,
                           bool(c.get("top_level", True)), _tag(tokens[s.start_token])))
  if "annotations" not in obj:
    if require_answers:
      raise err("annotations", "missing: not a Natural Questions line with answers")
    annotations = []
  else:
    annotations = []
    for a_i, a in enumerate(obj["annotations"]):
      field = f"annotations[{a_i}]"
      if not isinstance(a, dict) or "long_answer" not in a:
        raise err(field, "needs 'long_answer'")
      la = a["long_answer"]
      ci = int(la.get("candidate_index", -1))
      if ci >= len(cands):
        raise err(f"{field}.long_answer.candidate_index",
                  f"points at candidate {ci}, the example has {len(cands)}")
      long = _span(la, err, f"{field}.long_answer", n)
      short = tuple(_span(s, err, f"{field}.short_answers[{k}]", n)
                    for k, s in enumerate(a.get("short_answers", [])))
      yes_no = str(a.get("yes_no_answer", "NONE")).upper()
      if yes_no not in YES_NO:
        raise err(f"{field}.yes_no_answer", f"{yes_no!r} is not one of {YES_NO}")
      annotations.append(Annotation(ci, long, short, yes_no))
  return NqExample(str(ex_id), question, tokens, html, token_bytes, cands, annotations,
                   source=os.path.abspath(path), line=line)


def read_nq(path: str, *, require_answers: bool = True, max_examples: int = -1
            ) -> list[NqExample]:
  """All examples of one NQ file (``.jsonl`` or ``.jsonl.gz``, full or simplified), or of every
  ``*.jsonl*`` file of a directory (sorted)."""
  if os.path.isdir(path):
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if ".jsonl" in f)
    if not files:
      raise FileNotFoundError(f"{path}: no *.jsonl / *.jsonl.gz files")
  else:
    files = [path]
  out = []
  for f in files:
    with _open(f) as fh:
      for line_no, line in enumerate(fh, 1):
        if not line.strip():
          continue
        try:
          obj = json.loads(line)
        except json.JSONDecodeError as e:
          raise DataError(f"{f}:{line_no}", None, "<line>", f"not JSON ({e})") from None
        out.append(parse_example(obj, f, line_no, require_answers=require_answers))
        if 0 <= max_examples <= len(out):
          return out
  return out
