"""DASSA views: per-head token labels and scope ids from linguistic annotations (paper §2, Table 2;
`../shared/specs/dassa.md` §3.1 "Views -> heads").

A *view* is one row of labels ``(T,)`` (ids in the shared vocabulary `LABELS`, 0 = none) and one
row of scope ids ``(T,)`` (0 = no scope) over a document's tokens (its sentences concatenated).
Each DASSA head reads one view; `dassa.prepare_views` pads them to H heads.

View types (``heads`` entries) and how each is built:

* ``srl``: view v = the v-th predicate of every sentence; labels its BIO tags (``SRL__B-ARG0`` ...,
  ``O`` -> 0); scope = sentence index + 1 over the whole sentence (0 in sentences with fewer
  predicates).
* ``dr_exp`` / ``dr_exp_nosense``: view v = the v-th explicit relation (by connective position)
  whose Arg1 lies in sentence s; labels ``DR_EXP__{sense}__{Arg1|Arg2|Conn}`` (NoSense:
  ``DR_EXP__{Arg1|Arg2|Conn}``) on the spans; scope = the whole Arg1 sentence. Only relations with
  Arg1, Arg2 and connective in one sentence are used (paper §2); at most ``n`` per sentence.
* ``dr_nonexp`` / ``dr_nonexp_nosense``: relations of ``nonexplicit_types`` (the original code:
  ``Implicit`` only) between consecutive sentences; view = (Arg1 sentence + 1) mod 2 so that
  neighbouring pairs never share a view; labels ``DR_NONEXP__{sense}__{Arg1|Arg2}``; scope = Arg1
  sentence + 1 on the Arg1 and Arg2 spans, 0 elsewhere.
* ``coref``: label = cluster number (``COREF__C01`` .. ``C50``) on its mentions; scope 1
  everywhere (full context); the one view repeated ``n`` times (Table 2: 3 heads). With more than
  ``max_clusters`` clusters the original keeps the smallest ones (``coref_keep="smallest"``, the
  spec's "probably a bug"; ``"largest"`` keeps the biggest).
* ``sent_span3``: windows of 3 consecutive sentences; view v shifts the windows by v sentences;
  labels ``SENT__Sent{1,2,3}`` (position of the sentence in its window), scope = window + 1.

Annotations are inputs (no SRL/coreference/discourse parser ships here). Without them,
`offline_document` computes the two views that need none: sentences (NLTK punkt) and explicit
connectives matched from the PDTB lexicon shipped beside this module (``pdtb_connectives.txt``;
no sense, so for the NoSense view and ``sent_span3``).

Annotated JSON lines (one document per line; spans are token offsets, end exclusive)::

  {"document_id": "...",
   "summary_parse": {"sentences": [{"tokens": [...], "srl": {"verbs": [{"verb", "tags"}]}}]},
   "sdp": [{"Type", "Sense", "Arg1": {"Sent", "Span": [s, e]}, "Arg2": {...}, "Conn": {...}}],
   "coref_clusters": [{"mentions": [{"start", "end"}]}],     # document-level token offsets
   "questions": [...]}                                        # read by the NarrativeQA reader

``Span`` offsets are relative to the sentence ``Sent``; bad input raises `AnnotationError`
naming the file, line, document and field.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.resources
from typing import Any, Mapping, Sequence

import numpy as np

from poi_jax.data.records import DataError

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
MAX_COREF_CLUSTERS = 50
SENT_SPAN = 3


def _vocabulary() -> tuple[str, ...]:
  names = ["O"]
  names += [f"SRL__{t}" for t in SRL_TAGS]
  for sense in SENSES:
    names += [f"DR_EXP__{sense}__{a}" for a in ("Arg1", "Arg2", "Conn")]
    names += [f"DR_NONEXP__{sense}__{a}" for a in ("Arg1", "Arg2")]
  names += [f"DR_EXP__{a}" for a in ("Arg1", "Arg2", "Conn")]
  names += [f"DR_NONEXP__{a}" for a in ("Arg1", "Arg2")]
  names += [f"COREF__C{i:02d}" for i in range(1, MAX_COREF_CLUSTERS + 1)]
  names += [f"SENT__Sent{i}" for i in range(1, SENT_SPAN + 1)]
  return tuple(names)


VOCABULARY = _vocabulary()
LABELS = {name: i for i, name in enumerate(VOCABULARY)}

# view type -> the most heads it can fill with distinct views (None: any; coref repeats).
VIEW_TYPES = {"srl": None, "dr_exp": None, "dr_exp_nosense": None, "dr_nonexp": 2,
              "dr_nonexp_nosense": 2, "coref": None, "sent_span3": SENT_SPAN}
# The paper's Table 2 head allocations (per DASSA block; the rest of the H heads are "No"
# heads). "srl_dr_all_coref" is 2+2+3+1 = 8 (the paper prints 4 "No" heads: a typo).
HEAD_PRESETS = {
    "baseline": (),
    "dr_all": (("dr_exp", 2), ("dr_nonexp", 2)),
    "dr_exp": (("dr_exp", 2),),
    "dr_nonexp": (("dr_nonexp", 2),),
    "dr_exp_nosense": (("dr_exp_nosense", 2),),
    "dr_nonexp_nosense": (("dr_nonexp_nosense", 2),),
    "coref": (("coref", 3),),
    "srl": (("srl", 3),),
    "sent_span3": (("sent_span3", 3),),
    "srl_dr_exp": (("srl", 3), ("dr_exp", 2)),
    "srl_dr_nonexp": (("srl", 3), ("dr_nonexp", 2)),
    "srl_dr_all": (("srl", 3), ("dr_exp", 2), ("dr_nonexp", 2)),
    "srl_dr_exp_coref": (("srl", 3), ("dr_exp", 2), ("coref", 1)),
    "srl_dr_all_coref": (("srl", 3), ("dr_exp", 2), ("dr_nonexp", 2), ("coref", 1)),
    # The views computed offline without any annotation tool.
    "offline": (("dr_exp_nosense", 2), ("sent_span3", 2)),
}
# Which annotation each view type needs (for the error on a document without it).
_NEEDS = {"srl": "srl", "dr_exp": "sdp", "dr_nonexp": "sdp", "dr_nonexp_nosense": "sdp",
          "coref": "coref_clusters"}


def num_semantic_labels(num_heads: int) -> int:
  """Rows of DASSA's label tables: the vocabulary plus one default label per head."""
  return len(VOCABULARY) + num_heads


class AnnotationError(DataError):
  """A bad annotation: names the file, the line, the document and the field."""

  def __init__(self, path, line, doc_id, field: str, problem: str):
    ValueError.__init__(self, f"{path}:{line}: document {doc_id!r}, field {field!r}: {problem}")
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
  """A tokenised document with optional annotations (``None`` = not annotated)."""
  doc_id: str
  sentences: list[list[str]]
  srl: list[list[list[str]]] | None = None  # per sentence, per predicate: BIO tags
  relations: list[Relation] | None = None
  coref: list[list[tuple[int, int]]] | None = None  # clusters of [start, end) document offsets
  source: str = ""
  line: int = 0

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


# ---- parsing and validation --------------------------------------------------------------------

def _arg(doc: Document, obj: Any, field: str) -> Arg:
  if not isinstance(obj, Mapping) or "Sent" not in obj or "Span" not in obj:
    raise doc.error(field, "expected {\"Sent\": int, \"Span\": [start, end]}")
  sent, span = obj["Sent"], obj["Span"]
  if not (isinstance(sent, int) and 0 <= sent < len(doc.sentences)):
    raise doc.error(f"{field}.Sent", f"sentence {sent!r} is not in the document's "
                    f"{len(doc.sentences)} sentences")
  if not (isinstance(span, (list, tuple)) and len(span) == 2
          and all(isinstance(x, int) for x in span)):
    raise doc.error(f"{field}.Span", f"expected [start, end], got {span!r}")
  n = len(doc.sentences[sent])
  if not 0 <= span[0] < span[1] <= n:
    raise doc.error(f"{field}.Span", f"span {list(span)} falls outside sentence {sent} "
                    f"({n} tokens; spans are [start, end) token offsets)")
  return Arg(sent, span[0], span[1])


def parse_relation(doc: Document, obj: Any, field: str) -> Relation:
  if not isinstance(obj, Mapping) or "Type" not in obj:
    raise doc.error(field, "expected a relation with Type, Sense, Arg1, Arg2 (and Conn)")
  sense = obj.get("Sense", "")
  if isinstance(sense, list):  # CoNLL files list senses
    sense = sense[0] if sense else ""
  if sense and sense not in SENSES:
    raise doc.error(f"{field}.Sense", f"unknown sense {sense!r}; known: {', '.join(SENSES)}")
  conn = obj.get("Conn")
  conn = _arg(doc, conn, f"{field}.Conn") if conn else None
  if obj["Type"] == "Explicit" and conn is None:
    raise doc.error(f"{field}.Conn", "an Explicit relation needs its connective span")
  return Relation(str(obj["Type"]), sense, _arg(doc, obj.get("Arg1"), f"{field}.Arg1"),
                  _arg(doc, obj.get("Arg2"), f"{field}.Arg2"), conn)


def parse_document(obj: Mapping, *, source: str = "", line: int = 0) -> Document:
  """One annotated JSON line -> a validated `Document` (raises `AnnotationError`)."""
  doc_id = str(obj.get("document_id", obj.get("id", "")))
  doc = Document(doc_id, [], source=source, line=line)
  if not doc_id:
    raise doc.error("document_id", "missing")
  parse = obj.get("summary_parse")
  if not isinstance(parse, Mapping) or not isinstance(parse.get("sentences"), list):
    raise doc.error("summary_parse.sentences", "missing (a list of {tokens, srl})")
  srl, any_srl = [], False
  for i, sent in enumerate(parse["sentences"]):
    f = f"summary_parse.sentences[{i}]"
    tokens = sent.get("tokens") if isinstance(sent, Mapping) else None
    if not (isinstance(tokens, list) and tokens and all(isinstance(t, str) for t in tokens)):
      raise doc.error(f"{f}.tokens", "expected a non-empty list of token strings")
    doc.sentences.append(tokens)
    verbs = []
    if isinstance(sent.get("srl"), Mapping):
      any_srl = True
      for j, verb in enumerate(sent["srl"].get("verbs", [])):
        tags = verb.get("tags") if isinstance(verb, Mapping) else None
        vf = f"{f}.srl.verbs[{j}].tags"
        if not isinstance(tags, list) or len(tags) != len(tokens):
          raise doc.error(vf, f"expected {len(tokens)} tags (one per token), got "
                          f"{len(tags) if isinstance(tags, list) else tags!r}")
        for tag in tags:
          if tag != "O" and f"SRL__{tag}" not in LABELS:
            raise doc.error(vf, f"SRL tag {tag!r} is not in the label vocabulary")
        verbs.append(list(tags))
    srl.append(verbs)
  doc.srl = srl if any_srl else None
  if "sdp" in obj:
    if not isinstance(obj["sdp"], list):
      raise doc.error("sdp", "expected a list of relations")
    doc.relations = [parse_relation(doc, r, f"sdp[{i}]") for i, r in enumerate(obj["sdp"])]
  if "coref_clusters" in obj:
    n_tok = len(doc.tokens)
    clusters = []
    for i, cluster in enumerate(obj["coref_clusters"]):
      mentions = cluster.get("mentions") if isinstance(cluster, Mapping) else None
      if not isinstance(mentions, list):
        raise doc.error(f"coref_clusters[{i}].mentions", "expected a list of {start, end}")
      spans = []
      for j, m in enumerate(mentions):
        s, e = (m.get("start"), m.get("end")) if isinstance(m, Mapping) else (None, None)
        if not (isinstance(s, int) and isinstance(e, int) and 0 <= s < e <= n_tok):
          raise doc.error(f"coref_clusters[{i}].mentions[{j}]",
                          f"span [{s}, {e}) falls outside the document's {n_tok} tokens")
        spans.append((s, e))
      clusters.append(spans)
    doc.coref = clusters
  return doc


# ---- offline views: sentences and connectives -------------------------------------------------

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


# ---- views -------------------------------------------------------------------------------------

def _empty(n_views: int, doc: Document) -> tuple[np.ndarray, np.ndarray]:
  t = len(doc.tokens)
  return np.zeros((n_views, t), np.int32), np.zeros((n_views, t), np.int32)


def _require(doc: Document, view: str):
  need = _NEEDS.get(view)
  have = {"srl": doc.srl, "sdp": doc.relations, "coref_clusters": doc.coref}
  if need and have[need] is None:
    raise doc.error(need, f"the {view!r} view needs this annotation and the document has none")


def srl_views(doc: Document, n: int):
  _require(doc, "srl")
  labels, scopes = _empty(n, doc)
  for s, verbs in enumerate(doc.srl):
    a, b = doc.sentence_starts[s], doc.sentence_starts[s + 1]
    for v, tags in enumerate(verbs[:n]):
      labels[v, a:b] = [0 if t == "O" else LABELS[f"SRL__{t}"] for t in tags]
      scopes[v, a:b] = s + 1
  return labels, scopes


def _label_span(doc, labels, scopes, v, arg: Arg, label: int, scope: int | None):
  a = doc.sentence_starts[arg.sent]
  labels[v, a + arg.start:a + arg.end] = label
  if scope is not None:
    scopes[v, a + arg.start:a + arg.end] = scope


def dr_exp_views(doc: Document, n: int, *, sense: bool = True):
  _require(doc, "dr_exp")
  labels, scopes = _empty(n, doc)
  per_sentence: dict[int, list[Relation]] = {}
  for r in doc.relations:
    if r.type != "Explicit" or r.conn is None:
      continue
    if not r.arg1.sent == r.arg2.sent == r.conn.sent:
      continue  # paper §2: only arguments within the connective's sentence
    per_sentence.setdefault(r.arg1.sent, []).append(r)
  for s, rels in per_sentence.items():
    rels = sorted(rels, key=lambda r: r.conn.start)[:n]  # at most n connectives per sentence
    a, b = doc.sentence_starts[s], doc.sentence_starts[s + 1]
    for v, r in enumerate(rels):
      if sense and not r.sense:
        raise doc.error("sdp", f"explicit relation in sentence {s} has no Sense; use the "
                        f"dr_exp_nosense view for relations without sense")
      prefix = f"DR_EXP__{r.sense}__" if sense else "DR_EXP__"
      scopes[v, a:b] = s + 1
      for arg, name in ((r.arg1, "Arg1"), (r.arg2, "Arg2"), (r.conn, "Conn")):
        _label_span(doc, labels, scopes, v, arg, LABELS[prefix + name], None)
  return labels, scopes


def dr_nonexp_views(doc: Document, n: int, *, sense: bool = True,
                    types: Sequence[str] = ("Implicit",)):
  _require(doc, "dr_nonexp")
  labels, scopes = _empty(n, doc)
  for r in doc.relations:
    if r.type not in types or r.arg2.sent != r.arg1.sent + 1:
      continue
    v = (r.arg1.sent + 1) % 2  # odd/even: neighbouring pairs never share a view
    if v >= n:
      continue
    if sense and not r.sense:
      raise doc.error("sdp", f"{r.type} relation at sentence {r.arg1.sent} has no Sense")
    prefix = f"DR_NONEXP__{r.sense}__" if sense else "DR_NONEXP__"
    for arg, name in ((r.arg1, "Arg1"), (r.arg2, "Arg2")):
      _label_span(doc, labels, scopes, v, arg, LABELS[prefix + name], r.arg1.sent + 1)
  return labels, scopes


def coref_views(doc: Document, n: int, *, max_clusters: int = MAX_COREF_CLUSTERS,
                keep: str = "smallest"):
  _require(doc, "coref")
  if keep not in ("smallest", "largest"):
    raise ValueError(f"coref_keep must be smallest or largest, got {keep!r}")
  if not 0 < max_clusters <= MAX_COREF_CLUSTERS:
    raise ValueError(f"max_clusters must be in 1..{MAX_COREF_CLUSTERS}, got {max_clusters}")
  clusters = list(doc.coref)
  if len(clusters) > max_clusters:
    order = sorted(range(len(clusters)), key=lambda i: len(clusters[i]),
                   reverse=keep == "largest")  # stable: ties keep document order
    kept = sorted(order[:max_clusters])
    clusters = [clusters[i] for i in kept]
  labels, scopes = _empty(1, doc)
  scopes[:] = 1
  for c, mentions in enumerate(clusters):
    for s, e in mentions:
      labels[0, s:e] = LABELS[f"COREF__C{c + 1:02d}"]
  return np.repeat(labels, n, axis=0), np.repeat(scopes, n, axis=0)


def sent_span_views(doc: Document, n: int, *, span: int = SENT_SPAN):
  labels, scopes = _empty(n, doc)
  sid = doc.sentence_ids
  for v in range(n):
    shifted = sid + v
    labels[v] = [LABELS[f"SENT__Sent{k + 1}"] for k in shifted % span]
    scopes[v] = shifted // span + 1
  return labels, scopes


def parse_heads(spec) -> tuple[tuple[str, int], ...]:
  """A Table 2 preset name (`HEAD_PRESETS`) or ``"srl:3,dr_exp:2"`` -> ``((view, n), ...)``."""
  if isinstance(spec, (tuple, list)):
    items = [tuple(x) for x in spec]
  elif spec in HEAD_PRESETS:
    return HEAD_PRESETS[spec]
  else:
    items = []
    for part in filter(None, (p.strip() for p in str(spec).split(","))):
      name, _, count = part.partition(":")
      if not count.isdigit():
        raise ValueError(f"head allocation {part!r}: expected view:count or a preset "
                         f"({', '.join(HEAD_PRESETS)})")
      items.append((name, int(count)))
  for name, count in items:
    if name not in VIEW_TYPES:
      raise ValueError(f"unknown view type {name!r}; known: {', '.join(VIEW_TYPES)}")
    limit = VIEW_TYPES[name]
    if count < 1 or (limit is not None and count > limit):
      raise ValueError(f"view {name!r} takes 1..{limit or 'any'} heads, got {count}")
  return tuple(items)


def document_views(doc: Document, heads, *, coref_max_clusters: int = MAX_COREF_CLUSTERS,
                   coref_keep: str = "smallest",
                   nonexplicit_types: Sequence[str] = ("Implicit",)):
  """All views of ``heads`` (`parse_heads`) stacked in order -> ``(labels, scopes)`` each
  ``(V, T)`` int32 with ``V`` = the number of view heads."""
  rows = []
  for name, n in parse_heads(heads):
    if name == "srl":
      rows.append(srl_views(doc, n))
    elif name in ("dr_exp", "dr_exp_nosense"):
      rows.append(dr_exp_views(doc, n, sense=name == "dr_exp"))
    elif name in ("dr_nonexp", "dr_nonexp_nosense"):
      rows.append(dr_nonexp_views(doc, n, sense=name == "dr_nonexp", types=nonexplicit_types))
    elif name == "coref":
      rows.append(coref_views(doc, n, max_clusters=coref_max_clusters, keep=coref_keep))
    elif name == "sent_span3":
      rows.append(sent_span_views(doc, n))
  if not rows:
    return _empty(0, doc)
  return (np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows]))


def crop(labels: np.ndarray, scopes: np.ndarray, max_tokens: int):
  """The first ``max_tokens`` tokens of ``(V, T)`` views (training passages are cut to 800)."""
  return labels[..., :max_tokens], scopes[..., :max_tokens]
