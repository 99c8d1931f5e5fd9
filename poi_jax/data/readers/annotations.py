"""Reading annotated documents for DASSA's views (`poi_jax.data.features.views`): the parsing and
validation (`parse_document`) of the JSON lines into a `records.Document` (tokenised sentences
with optional SRL, discourse relations and coreference).

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

from typing import Any, Mapping

# The record types and label vocabularies live in records.py; re-exported for old callers.
from poi_jax.data.records import (SENSES, SRL_TAGS, AnnotationError, Arg,  # noqa: F401
                                  Document, Relation)


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
  if not isinstance(sense, str):
    raise doc.error(f"{field}.Sense", f"expected a sense name, got {str(sense)[:40]!r}")
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
      verbs_in = sent["srl"].get("verbs", [])
      if not isinstance(verbs_in, list):
        raise doc.error(f"{f}.srl.verbs", "expected a list of {verb, tags}")
      for j, verb in enumerate(verbs_in):
        tags = verb.get("tags") if isinstance(verb, Mapping) else None
        vf = f"{f}.srl.verbs[{j}].tags"
        if not isinstance(tags, list) or len(tags) != len(tokens):
          raise doc.error(vf, f"expected {len(tokens)} tags (one per token), got "
                          f"{len(tags) if isinstance(tags, list) else tags!r}")
        for tag in tags:
          if tag != "O" and tag not in SRL_TAGS:
            raise doc.error(vf, f"SRL tag {tag!r} is not in the label vocabulary")
        verbs.append(list(tags))
    srl.append(verbs)
  if not any(t.strip() for s in doc.sentences for t in s):
    # A document without a token gives no passage to answer from (the featurizer would build
    # empty windows); spaces alone are not tokens either.
    raise doc.error("summary_parse.sentences", "the document has no tokens (an empty list, or "
                    "only blank tokens)")
  doc.srl = srl if any_srl else None
  if "sdp" in obj:
    if not isinstance(obj["sdp"], list):
      raise doc.error("sdp", "expected a list of relations")
    doc.relations = [parse_relation(doc, r, f"sdp[{i}]") for i, r in enumerate(obj["sdp"])]
  if "coref_clusters" in obj:
    n_tok = len(doc.tokens)
    clusters = []
    if not isinstance(obj["coref_clusters"], list):
      raise doc.error("coref_clusters", "expected a list of {mentions}")
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
