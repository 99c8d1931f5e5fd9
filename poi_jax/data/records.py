"""Typed example records; each keeps the file and the id it came from (for error messages)."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np


def clip(text: str, limit: int = 400) -> str:
  """``text`` cut to ``limit`` characters, saying how long it was (a broken file can put a
  megabyte where an id belongs; the message must stay one readable line)."""
  text = str(text)
  return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


class DataError(ValueError):
  """Bad input data: the message names the file, the record id and the field."""

  def __init__(self, path, record, field: str | None, problem: str):
    where = ([f"record {clip(repr(record), 100)}"] if record is not None else []) + \
        ([f"field {clip(repr(field), 100)}"] if field and field != "<file>" else [])
    super().__init__(f"{path}: {', '.join(where) + ': ' if where else ''}{clip(problem)}")
    self.path, self.record, self.field = path, record, field


@dataclasses.dataclass
class SquadExample:
  qid: str
  question: str
  context: str
  answers: list[dict]  # [{"text", "answer_start"}]; the gold answers
  is_impossible: bool
  plausible_answers: list[dict]
  title: str
  source: str


@dataclasses.dataclass
class ChoiceExample:
  qid: str
  passage: str
  question: str
  options: list[str]
  label: int  # index of the correct option
  source: str
  level: str = ""  # RACE: high | middle


# Natural Questions (`poi_jax.data.readers.nq`); features/nq_windows.py and eval/nq.py use them.
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


# Annotated documents (DASSA's views; `poi_jax.data.readers.annotations` parses them).
# The 15 PDTB sense types of the CoNLL-2016 shallow discourse parsing task.
SENSES = (
    "Comparison.Concession", "Comparison.Contrast", "Contingency.Cause.Reason",
    "Contingency.Cause.Result", "Contingency.Condition", "EntRel", "Expansion.Alternative",
    "Expansion.Alternative.Chosen alternative", "Expansion.Conjunction", "Expansion.Exception",
    "Expansion.Instantiation", "Expansion.Restatement", "Temporal.Asynchronous.Precedence",
    "Temporal.Asynchronous.Succession", "Temporal.Synchrony")
# PropBank roles as AllenNLP's SRL model emits them (plus the continuation C- and reference R-
# forms of every role).
_CORE = ("ARG0", "ARG1", "ARG2", "ARG3", "ARG4", "ARG5", "ARGA")
_MODIFIERS = ("ADJ", "ADV", "CAU", "COM", "DIR", "DIS", "DSP", "EXT", "GOL", "LOC", "LVB", "MNR",
              "MOD", "NEG", "PNC", "PRD", "PRP", "PRR", "PRX", "REC", "TMP")
_ROLES = _CORE + tuple(f"ARGM-{m}" for m in _MODIFIERS)
SRL_TAGS = tuple(f"{bio}-{r}" for r in ("V",) + _ROLES + tuple(f"C-{x}" for x in _ROLES)
                 + tuple(f"R-{x}" for x in _ROLES) for bio in ("B", "I"))


class AnnotationError(DataError):
  """A bad annotation: names the file, the line, the document and the field."""

  def __init__(self, path, line, doc_id, field: str, problem: str):
    ValueError.__init__(self, f"{path}:{line}: document {clip(repr(doc_id), 100)}, field "
                        f"{clip(repr(field), 100)}: {clip(problem)}")
    self.path, self.record, self.field, self.line = path, doc_id, field, line


@dataclasses.dataclass(frozen=True)
class Arg:
  sent: int
  start: int  # sentence-relative token offsets, end exclusive
  end: int


@dataclasses.dataclass(frozen=True)
class Relation:
  type: str  # Explicit | Implicit | AltLex | EntRel ...
  sense: str  # "" when unknown (offline connectives)
  arg1: Arg
  arg2: Arg
  conn: Arg | None


@dataclasses.dataclass
class Document:
  """A tokenised document with optional annotations (``None`` = not annotated). ``plain``: read
  from plain text (NarrativeQA's CSV), all tokens in one sentence; the featurizer side computes
  its sentences and connectives (`poi_jax.data.features.offline_views.with_offline_views`)."""
  doc_id: str
  sentences: list[list[str]]
  srl: list[list[list[str]]] | None = None  # per sentence, per predicate: BIO tags
  relations: list[Relation] | None = None
  coref: list[list[tuple[int, int]]] | None = None  # clusters of [start, end) document offsets
  source: str = ""
  line: int = 0
  plain: bool = False

  @functools.cached_property
  def tokens(self) -> list[str]:
    return [t for s in self.sentences for t in s]

  @functools.cached_property
  def sentence_starts(self) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(s) for s in self.sentences])]).astype(np.int64)

  @functools.cached_property
  def sentence_ids(self) -> np.ndarray:
    return np.repeat(np.arange(len(self.sentences)), [len(s) for s in self.sentences])

  def error(self, field: str, problem: str) -> AnnotationError:
    return AnnotationError(self.source, self.line, self.doc_id, field, problem)


class NarrativeDataError(DataError):
  """A bad NarrativeQA line: names the file, the line, the document and the field."""

  def __init__(self, path, line, doc_id, field: str, problem: str):
    ValueError.__init__(self, f"{path}:{line}: document {clip(repr(doc_id), 100)}, field "
                        f"{clip(repr(field), 100)}: {clip(problem)}")
    self.path, self.record, self.field, self.line = path, doc_id, field, line


@dataclasses.dataclass
class NarrativeExample:
  """A NarrativeQA question (`poi_jax.data.readers.narrativeqa`)."""
  qid: str
  question: list[str]  # tokens
  answers: list[str]  # [answer1, answer2], whitespace-tokenised strings
  document: Document
  source: str
  line: int
