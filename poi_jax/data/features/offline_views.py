"""DASSA documents without annotation tools. Annotations are inputs (no SRL/coreference/discourse
parser ships here); without them, `offline_document` computes the two views that need none:
sentences (NLTK punkt) and explicit connectives matched from the PDTB lexicon shipped beside this
module (``pdtb_connectives.txt``; no sense, so for the NoSense view and ``sent_span3``).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.resources
from typing import Iterable, Iterator, Sequence

import numpy as np

from poi_jax.data.records import Arg, Document, Relation


@functools.lru_cache(maxsize=1)
def _punkt():
  from nltk.tokenize import PunktTokenizer
  try:
    return PunktTokenizer("english")
  except LookupError as e:
    raise RuntimeError("NLTK punkt_tab is missing: set NLTK_DATA to a directory holding "
                       "tokenizers/punkt_tab (e.g. ../shared/data/nltk_data)") from e


def split_sentences(tokens: Sequence[str]) -> list[list[str]]:
  """Splits a token sequence into sentences with NLTK punkt (run on the tokens joined by spaces,
  each token assigned to the sentence holding its first character)."""
  if not tokens:
    return []
  starts, pos = [], 0
  for t in tokens:
    starts.append(pos)
    pos += len(t) + 1
  spans = list(_punkt().span_tokenize(" ".join(tokens)))
  ends = np.array([e for _, e in spans])
  sent_of = np.minimum(np.searchsorted(ends, np.array(starts), side="right"), len(spans) - 1)
  out: list[list[str]] = []
  prev = -1
  for tok, s in zip(tokens, sent_of):
    if s != prev:
      out.append([])
      prev = s
    out[-1].append(tok)
  return out


@functools.lru_cache(maxsize=4)
def load_lexicon(path: str | None = None) -> tuple[tuple[str, ...], ...]:
  """Connectives as lower-case token tuples, longest first (``path`` None: the shipped PDTB
  list)."""
  if path is None:
    text = importlib.resources.files("poi_jax.data.features").joinpath(
        "pdtb_connectives.txt").read_text(encoding="utf-8")
  else:
    with open(path, encoding="utf-8") as f:
      text = f.read()
  entries = {tuple(line.lower().split()) for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")}
  return tuple(sorted(entries, key=lambda e: (-len(e), e)))


def find_connectives(tokens: Sequence[str], lexicon) -> list[tuple[int, int]]:
  """Non-overlapping ``[start, end)`` matches of the lexicon in one sentence, left to right,
  longest match first at each position."""
  low = [t.lower() for t in tokens]
  out, i = [], 0
  while i < len(low):
    for entry in lexicon:
      if tuple(low[i:i + len(entry)]) == entry:
        out.append((i, i + len(entry)))
        i += len(entry)
        break
    else:
      i += 1
  return out


def offline_document(doc_id: str, tokens: Sequence[str], *, lexicon_path: str | None = None,
                     source: str = "", line: int = 0) -> Document:
  """A `Document` from plain tokens: punkt sentences and lexicon connectives as Explicit
  relations without sense (Arg1 = the sentence left of the connective, Arg2 = the right; a
  connective with nothing on its right is skipped)."""
  doc = Document(doc_id, split_sentences(list(tokens)), source=source, line=line)
  lexicon = load_lexicon(lexicon_path)
  relations = []
  for s, sent in enumerate(doc.sentences):
    for cs, ce in find_connectives(sent, lexicon):
      if ce >= len(sent):
        continue
      arg1 = Arg(s, 0, cs) if cs > 0 else None
      arg2 = Arg(s, ce, len(sent))
      relations.append(Relation("Explicit", "", arg1 or Arg(s, cs, cs), arg2, Arg(s, cs, ce)))
  doc.relations = relations
  return doc


def with_offline_views(records: Iterable, *, lexicon_path: str | None = None) -> Iterator:
  """The records (anything with a ``document``, e.g. `records.NarrativeExample`) with each
  ``plain`` document (NarrativeQA's CSV: tokens only) replaced by its `offline_document`; built
  once per document, so the questions of one summary share it. Annotated documents pass as
  they are."""
  built: dict[tuple[str, str], Document] = {}
  for r in records:
    doc = r.document
    if doc.plain:
      key = (doc.source, doc.doc_id)
      if key not in built:
        built[key] = offline_document(doc.doc_id, doc.tokens, lexicon_path=lexicon_path,
                                      source=doc.source, line=doc.line)
      r = dataclasses.replace(r, document=built[key])
    yield r
