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

The annotated documents (`Document`) and their JSON-lines schema are in
`poi_jax.data.features.annotations`; the views computed without annotations (punkt sentences,
lexicon connectives) in `poi_jax.data.features.offline_views`.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from poi_jax.data.records import SENSES, SRL_TAGS, Arg, Document, Relation

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
