"""NarrativeQA (summary setting) readers: the official ``qaps.csv`` + ``summaries.csv`` and the
annotated JSON lines of DASSA (`poi_jax.data.readers.annotations` documents the schema).

* CSV (GitHub ``deepmind/narrativeqa``): ``qaps.csv`` (document_id, set, question, answer1,
  answer2, question_tokenized, answer1_tokenized, answer2_tokenized) and
  ``third_party/wikipedia/summaries.csv`` (document_id, set, summary, summary_tokenized). The
  tokenized columns are used when present (the metrics split on whitespace), else the raw text
  is tokenised with NLTK. Each summary is read as a ``plain`` document (its tokens); its
  sentences (punkt) and explicit connectives (lexicon) are the featurizer's work
  (`poi_jax.data.features.offline_views.with_offline_views`), so reading imports no feature code.
* JSON lines: one annotated document per line with its ``questions`` list (``question``,
  optional ``question_tokens``, ``answer1``, ``answer2``, optional ``id``).

Records stream one question at a time. Bad input raises `DataError` / `AnnotationError` naming
the file, the line, the document and the field, when the stream reaches it.
"""
from __future__ import annotations

import csv
import json
import os
from typing import Iterator

from poi_jax.data.readers import annotations
from poi_jax.data.records import DataError, Document, NarrativeDataError, NarrativeExample

SPLITS = ("train", "valid", "test")
# Summaries are a few kB; a field of more than this is a broken file (csv's default is 128 kB).
_CSV_FIELD_LIMIT = 1 << 24


def _tokenize(text: str) -> list[str]:
  from nltk.tokenize import word_tokenize
  try:
    return word_tokenize(text)
  except LookupError:
    raise RuntimeError("NLTK punkt_tab is missing (the CSV's untokenised columns need it): set "
                       "NLTK_DATA to a directory holding tokenizers/punkt_tab (e.g. "
                       "../shared/data/nltk_data)") from None


def _tokens(row: dict, name: str) -> list[str]:
  tok = row.get(f"{name}_tokenized")
  return tok.split() if tok else _tokenize(row[name] or "")


def _open_text(path: str):
  try:
    return open(path, encoding="utf-8", newline="")
  except OSError as e:
    raise DataError(path, None, "<file>", f"cannot open ({e.strerror})") from None


def _csv_rows(path: str, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
  """``(line, row)`` of a CSV file, one at a time; a bad byte, a broken quote or a short row
  names its line."""
  line = 0
  csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))
  with _open_text(path) as f:
    reader = csv.DictReader(f)
    try:
      missing = [c for c in required if c not in (reader.fieldnames or [])]
      if missing:
        raise DataError(path, None, "<header>", f"missing column(s) {missing}")
      for row in reader:
        line = reader.line_num
        absent = [c for c in required if row.get(c) is None]
        if absent:
          raise NarrativeDataError(path, line, row.get("document_id"), absent[0],
                                   "missing (the row has fewer columns than the header)")
        yield line, row
    except UnicodeDecodeError as e:
      raise DataError(f"{path}:{reader.line_num + 1}", None, "<line>",
                      f"not UTF-8 text (byte 0x{e.object[e.start]:02x}); re-encode it as "
                      f"UTF-8") from None
    except csv.Error as e:
      raise DataError(f"{path}:{reader.line_num}", None, "<line>", f"not valid CSV ({e})") from None


def summaries_path_for(qaps_path: str) -> str:
  """``summaries.csv`` beside ``qaps.csv`` or in ``third_party/wikipedia/`` (the repo layout)."""
  root = os.path.dirname(os.path.abspath(qaps_path))
  for cand in (os.path.join(root, "summaries.csv"),
               os.path.join(root, "third_party", "wikipedia", "summaries.csv")):
    if os.path.exists(cand):
      return cand
  raise DataError(qaps_path, None, "<file>", "no summaries.csv beside it or in "
                  "third_party/wikipedia/")


def _qaps(qaps_path: str, summaries_path: str, split: str | None
          ) -> Iterator[NarrativeExample]:
  # The summaries are looked up by the questions' document ids in any order, so they are held
  # (one per book or film: 1,572 in the whole corpus); the questions stream.
  summaries: dict[str, tuple[int, dict]] = {}
  for line, row in _csv_rows(summaries_path, ("document_id", "summary")):
    summaries[row["document_id"]] = (line, row)
  docs: dict[str, Document] = {}
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
      # Plain tokens: the sentences and connectives are the featurizer's work
      # (`features.offline_views.with_offline_views`), so reading needs no feature code.
      docs[doc_id] = Document(doc_id, [tokens], source=summaries_path, line=s_line, plain=True)
    question = _tokens(row, "question")
    answers = [" ".join(_tokens(row, a)) for a in ("answer1", "answer2")]
    for name, value in (("question", question), ("answer1", answers[0]),
                        ("answer2", answers[1])):
      if not value:
        raise NarrativeDataError(qaps_path, line, doc_id, name, "empty")
    yield NarrativeExample(f"{doc_id}-{line}", question, answers, docs[doc_id], qaps_path, line)


def read_qaps(qaps_path: str, summaries_path: str | None = None, split: str | None = None
              ) -> Iterator[NarrativeExample]:
  """Questions of ``split`` (train | valid | test; None: all) with their summaries, one at a
  time. Each summary is a ``plain`` `Document` (all its tokens in one sentence): run the records
  through `poi_jax.data.features.offline_views.with_offline_views` for DASSA's offline views."""
  if split is not None and split not in SPLITS:
    raise ValueError(f"NarrativeQA split must be one of {SPLITS}, got {split!r}")
  qaps_path = os.fspath(qaps_path)
  summaries_path = summaries_path or summaries_path_for(qaps_path)
  for p in (summaries_path, qaps_path):
    _open_text(p).close()
  return _qaps(qaps_path, summaries_path, split)


def _annotated(path: str) -> Iterator[NarrativeExample]:
  line_no = 0
  with open(path, "rb") as f:
    for line_no, raw in enumerate(f, 1):
      if not raw.strip():
        continue
      try:
        obj = json.loads(raw.decode("utf-8"))
      except UnicodeDecodeError as e:
        raise NarrativeDataError(path, line_no, None, "<line>",
                                 f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                                 f"{e.start + 1}); re-encode it as UTF-8") from None
      except (json.JSONDecodeError, RecursionError) as e:
        raise NarrativeDataError(path, line_no, None, "<line>", f"not valid JSON ({e})") from None
      if not isinstance(obj, dict):
        raise NarrativeDataError(path, line_no, None, "<line>", "not a JSON object")
      doc = annotations.parse_document(obj, source=path, line=line_no)
      questions = obj.get("questions")
      if not isinstance(questions, list):
        raise NarrativeDataError(path, line_no, doc.doc_id, "questions", "missing (a list)")
      for i, q in enumerate(questions):
        field = f"questions[{i}]"
        if not isinstance(q, dict):
          raise NarrativeDataError(path, line_no, doc.doc_id, field, "expected an object")
        for name in ("question", "answer1", "answer2"):
          if not isinstance(q.get(name), str) or not q[name].strip():
            raise NarrativeDataError(path, line_no, doc.doc_id, f"{field}.{name}",
                                     "missing or empty")
        question = q.get("question_tokens") or q["question"].split()
        if not (isinstance(question, list) and all(isinstance(t, str) for t in question)):
          raise NarrativeDataError(path, line_no, doc.doc_id, f"{field}.question_tokens",
                                   "expected a list of strings")
        qid = q.get("id", f"{doc.doc_id}-{i}")
        if not isinstance(qid, (str, int)) or isinstance(qid, bool):
          raise NarrativeDataError(path, line_no, doc.doc_id, f"{field}.id", "not a string")
        yield NarrativeExample(str(qid), list(question),
                               [" ".join(q["answer1"].split()), " ".join(q["answer2"].split())],
                               doc, path, line_no)


def read_annotated(path: str) -> Iterator[NarrativeExample]:
  """Annotated JSON lines (DASSA's format), one line (document) at a time: its questions with
  their document's views' annotations."""
  path = os.fspath(path)
  _open_text(path).close()
  return _annotated(path)


def read_narrativeqa(path: str, split: str | None = None, *, summaries_path: str | None = None
                     ) -> Iterator[NarrativeExample]:
  """``*.jsonl`` -> `read_annotated`; a directory (the repo checkout) or ``qaps.csv`` ->
  `read_qaps` of ``split``."""
  path = os.fspath(path)
  if path.endswith((".jsonl", ".json")):
    return read_annotated(path)
  if os.path.isdir(path):
    path = os.path.join(path, "qaps.csv")
  return read_qaps(path, summaries_path, split)
