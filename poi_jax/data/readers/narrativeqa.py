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
  optional ``question_tokens``, ``answer1``, ``answer2``, optional ``id``). A question without
  an ``id`` is ``<document_id>-<its index in the document's list>``: deterministic, and unique
  while the document ids are (the CSV's questions are ``<document_id>-<line>`` likewise).

Records stream one question at a time. Bad input raises `DataError` / `AnnotationError` naming
the file, the line, the document and the field, when the stream reaches it: a document without
tokens, an empty question or answer, and what `poi_jax.data.json_stream` refuses in any file
(JSON nested too deep, a number too long, a lone surrogate escape, a NUL byte, bytes that are
not UTF-8, a corrupt compressed file, an empty file). Both formats may be gzip or xz files.
"""
from __future__ import annotations

import csv
import io
import os
from typing import Iterator

from poi_jax.data import json_stream
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
  """The CSV file as text: decompressed when gzip or xz (`json_stream.open_data`, which also
  refuses a missing file or a directory), a UTF-8 byte order mark skipped (as every reader)."""
  return io.TextIOWrapper(json_stream.open_data(path), encoding="utf-8-sig", newline="")


def _nul_column(row: dict) -> str | None:
  """The first column of a `csv.DictReader` row holding a NUL byte (cells beyond the header's
  columns are a list under the key None), or None."""
  for column, value in row.items():
    cells = value if isinstance(value, list) else [value]
    if any(isinstance(c, str) and "\0" in c for c in cells):
      return "<extra column>" if column is None else column
  return None


def _csv_rows(path: str, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
  """``(line, row)`` of a CSV file, one at a time; a bad byte, a NUL byte, a broken quote, a
  short row or a corrupt compressed stream names its line."""
  line = 0
  csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))
  with _open_text(path) as f:
    reader = csv.DictReader(f)
    try:
      if any("\0" in c for c in reader.fieldnames or []):
        raise DataError(f"{path}:1", None, "<header>", "a NUL byte (binary data, not text)")
      missing = [c for c in required if c not in (reader.fieldnames or [])]
      if missing:
        raise DataError(path, None, "<header>", f"missing column(s) {missing}")
      for row in reader:
        line = reader.line_num
        # Python's csv module keeps NUL bytes (since 3.11); JSON refuses them: so do we, first
        # (a NUL is what is wrong with a row it also cuts short).
        nul = _nul_column(row)
        if nul is not None:
          raise NarrativeDataError(path, line, row.get("document_id"), nul,
                                   "a NUL byte (binary data, not text)")
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
    except json_stream.DECOMPRESSION_ERRORS as e:
      raise DataError(f"{path}:{reader.line_num + 1}", None, None,
                      f"cannot decompress it: the file is corrupt or truncated "
                      f"({type(e).__name__}: {e})") from None


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
    json_stream.check_readable(p)  # there, a file, decompressable, not empty (or only a BOM)
  return _qaps(qaps_path, summaries_path, split)


def _annotated(path: str) -> Iterator[NarrativeExample]:
  for line_no, raw in json_stream.iter_lines(path):
    obj = json_stream.loads_line(raw, path, line_no)
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
      if not isinstance(qid, (str, int)) or isinstance(qid, bool) or not str(qid).strip():
        raise NarrativeDataError(path, line_no, doc.doc_id, f"{field}.id",
                                 "not a string, or empty (leave it out for the default id)")
      yield NarrativeExample(str(qid), list(question),
                             [" ".join(q["answer1"].split()), " ".join(q["answer2"].split())],
                             doc, path, line_no)


def read_annotated(path: str) -> Iterator[NarrativeExample]:
  """Annotated JSON lines (DASSA's format), one line (document) at a time: its questions with
  their document's views' annotations."""
  path = os.fspath(path)
  json_stream.check_readable(path)  # there, a file, decompressable, not empty (or only a BOM)
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
