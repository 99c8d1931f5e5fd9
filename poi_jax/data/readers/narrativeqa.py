"""NarrativeQA (summary setting) readers: the official ``qaps.csv`` + ``summaries.csv`` and the
annotated JSON lines of DASSA (`poi_jax.data.features.annotations` documents the schema).

* CSV (GitHub ``deepmind/narrativeqa``): ``qaps.csv`` (document_id, set, question, answer1,
  answer2, question_tokenized, answer1_tokenized, answer2_tokenized) and
  ``third_party/wikipedia/summaries.csv`` (document_id, set, summary, summary_tokenized). The
  tokenized columns are used when present (the metrics split on whitespace), else the raw text
  is tokenised with NLTK. Sentences (punkt) and explicit connectives (lexicon) are computed
  offline (`offline_views.offline_document`).
* JSON lines: one annotated document per line with its ``questions`` list (``question``,
  optional ``question_tokens``, ``answer1``, ``answer2``, optional ``id``).

Bad input raises `DataError` / `annotations.AnnotationError` naming the file, the line, the document
and the field, before any compute.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os

from poi_jax.data.features import annotations, offline_views
from poi_jax.data.records import DataError

SPLITS = ("train", "valid", "test")


@dataclasses.dataclass
class NarrativeExample:
  qid: str
  question: list[str]  # tokens
  answers: list[str]  # [answer1, answer2], whitespace-tokenised strings
  document: annotations.Document
  source: str
  line: int


class NarrativeDataError(DataError):
  def __init__(self, path, line, doc_id, field: str, problem: str):
    ValueError.__init__(self, f"{path}:{line}: document {doc_id!r}, field {field!r}: {problem}")
    self.path, self.record, self.field, self.line = path, doc_id, field, line


def _tokenize(text: str) -> list[str]:
  from nltk.tokenize import word_tokenize
  return word_tokenize(text)


def _tokens(row: dict, name: str) -> list[str]:
  tok = row.get(f"{name}_tokenized")
  return tok.split() if tok else _tokenize(row[name])


def _csv_rows(path: str, required: tuple[str, ...]):
  try:
    f = open(path, encoding="utf-8", newline="")
  except OSError as e:
    raise DataError(path, None, "<file>", f"cannot open ({e.strerror})") from None
  with f:
    reader = csv.DictReader(f)
    missing = [c for c in required if c not in (reader.fieldnames or [])]
    if missing:
      raise DataError(path, None, "<header>", f"missing column(s) {missing}")
    for row in reader:
      yield reader.line_num, row


def summaries_path_for(qaps_path: str) -> str:
  """``summaries.csv`` beside ``qaps.csv`` or in ``third_party/wikipedia/`` (the repo layout)."""
  root = os.path.dirname(os.path.abspath(qaps_path))
  for cand in (os.path.join(root, "summaries.csv"),
               os.path.join(root, "third_party", "wikipedia", "summaries.csv")):
    if os.path.exists(cand):
      return cand
  raise DataError(qaps_path, None, "<file>", "no summaries.csv beside it or in "
                  "third_party/wikipedia/")


def read_qaps(qaps_path: str, summaries_path: str | None = None, split: str | None = None, *,
              lexicon_path: str | None = None) -> list[NarrativeExample]:
  """Questions of ``split`` (train | valid | test; None: all) with their summaries."""
  if split is not None and split not in SPLITS:
    raise ValueError(f"NarrativeQA split must be one of {SPLITS}, got {split!r}")
  summaries_path = summaries_path or summaries_path_for(qaps_path)
  summaries: dict[str, tuple[int, dict]] = {}
  for line, row in _csv_rows(summaries_path, ("document_id", "summary")):
    summaries[row["document_id"]] = (line, row)
  docs: dict[str, annotations.Document] = {}
  out = []
  for line, row in _csv_rows(qaps_path, ("document_id", "set", "question", "answer1",
                                         "answer2")):
    if split is not None and row["set"] != split:
      continue
    doc_id = row["document_id"]
    if doc_id not in summaries:
      raise NarrativeDataError(qaps_path, line, doc_id, "document_id",
                               f"no summary for this document in {summaries_path}")
    if doc_id not in docs:
      s_line, s_row = summaries[doc_id]
      tokens = _tokens(s_row, "summary")
      if not tokens:
        raise NarrativeDataError(summaries_path, s_line, doc_id, "summary", "empty")
      docs[doc_id] = offline_views.offline_document(doc_id, tokens, lexicon_path=lexicon_path,
                                            source=summaries_path, line=s_line)
    question = _tokens(row, "question")
    answers = [" ".join(_tokens(row, a)) for a in ("answer1", "answer2")]
    for name, value in (("question", question), ("answer1", answers[0]),
                        ("answer2", answers[1])):
      if not value:
        raise NarrativeDataError(qaps_path, line, doc_id, name, "empty")
    out.append(NarrativeExample(f"{doc_id}-{line}", question, answers, docs[doc_id], qaps_path,
                                line))
  return out


def read_annotated(path: str) -> list[NarrativeExample]:
  """Annotated JSON lines (DASSA's format): documents with their views' annotations and
  questions."""
  out = []
  try:
    f = open(path, encoding="utf-8")
  except OSError as e:
    raise DataError(path, None, "<file>", f"cannot open ({e.strerror})") from None
  with f:
    for line_no, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        obj = json.loads(line)
      except json.JSONDecodeError as e:
        raise NarrativeDataError(path, line_no, None, "<line>", f"not valid JSON ({e})") from None
      doc = annotations.parse_document(obj, source=path, line=line_no)
      questions = obj.get("questions")
      if not isinstance(questions, list):
        raise NarrativeDataError(path, line_no, doc.doc_id, "questions", "missing (a list)")
      for i, q in enumerate(questions):
        field = f"questions[{i}]"
        for name in ("question", "answer1", "answer2"):
          if not isinstance(q.get(name), str) or not q[name].strip():
            raise NarrativeDataError(path, line_no, doc.doc_id, f"{field}.{name}",
                                     "missing or empty")
        question = q.get("question_tokens") or q["question"].split()
        out.append(NarrativeExample(str(q.get("id", f"{doc.doc_id}-{i}")), list(question),
                                    [" ".join(q["answer1"].split()),
                                     " ".join(q["answer2"].split())], doc, path, line_no))
  return out


def read_narrativeqa(path: str, split: str | None = None, *, summaries_path: str | None = None,
                     lexicon_path: str | None = None) -> list[NarrativeExample]:
  """``*.jsonl`` -> `read_annotated`; a directory (the repo checkout) or ``qaps.csv`` ->
  `read_qaps` of ``split``."""
  if path.endswith((".jsonl", ".json")):
    return read_annotated(path)
  if os.path.isdir(path):
    path = os.path.join(path, "qaps.csv")
  return read_qaps(path, summaries_path, split, lexicon_path=lexicon_path)
