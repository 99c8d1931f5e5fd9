"""NQ windows: `NqExample` records -> fixed-shape features with the document graph.

Per example (the original NQ_BERT-DM preprocessing, ``../shared/specs/nq_graph.md`` §1.1):

* Document: the **top-level** long-answer candidates in order, HTML tokens dropped (tokens outside
  every top-level candidate too), each candidate prefixed with one marker token ``[unusedK]``:
  with ``P = max_position`` (50) and ``n`` the 1-based count of that candidate kind so far,
  K = Table: ``min(n, P) - 1``; Paragraph (``<P>``): ``min(n + P, 2P) - 1``; List (``Ul``, ``Dl``,
  ``Ol``): ``min(n + 2P, 3P) - 1``; Other (``Tr``, ``Li``, ``Dd``, ``Dt``, ...):
  ``min(n + 3P, 4P) - 1``. Each candidate's text is split into sentences (spaCy's rule-based
  ``English()`` + ``sentencizer``, no model download; without spaCy: NLTK punkt, logged); the
  marker belongs to the first sentence.
* Question: the tokenizer's pieces of ``question_text``, only the **last** ``max_query_length``
  kept.
* Windows: ``[CLS] q [SEP] doc[s:s+m] [SEP]`` with ``m = max_seq_length - |q| - 3``; window
  starts advance by ``window_step`` sub-tokens (``data.nq.window_step``: the original NQ/BERT
  ``doc_stride``, a step between window starts, not an overlap; two windows share
  ``m - window_step`` tokens) until the document end is inside a window. It has its own name
  because ``data.doc_stride`` of the SQuAD features is the overlap (docs/data.md).
* Graph (`poi_jax.data.features.nq_graph`): [CLS] is sentence/paragraph 0, the question 1, the
  first [SEP] joins the window's first document sentence, the final [SEP] its last.
* Labels (training; answer type 0 UNKNOWN, 1 YES, 2 NO, 3 SHORT, 4 LONG; from the first
  annotation): SHORT examples: a window containing the hull [first short start, last short end)
  gets ``s``/``e`` = the hull's first/last sub-token and ``l`` = the paragraph containing ``s``;
  LONG/YES/NO examples: a window containing the whole long answer (its top-level candidate's
  content) gets ``s = e = -1`` (short loss ignored) and ``l`` its paragraph; any other window is
  null (``s = e = 0``, ``l = 0``, type 0) and kept with probability ``include_unknowns`` (a seeded
  draw per example id, so chunking and workers do not change it). Evaluation keeps every window.
  A target paragraph past the graph's capacity is ignored (-1).

Arrays (``N`` windows, ``L = max_seq_length``, node/edge capacities from the graph layout):
``input_ids, attention_mask, token_type_ids (N, L)``, ``st_mask (N, nodes)``, ``edge_src,
edge_tgt, edge_type, edge_pos (N, E)``, ``start_positions, end_positions, paragraph_label,
answer_type, example_index (N,)``. Meta (decoding): ``token_to_orig (N, L)`` (document token
index, -1 elsewhere), ``token_paragraph (N, L)`` (window paragraph index of document positions,
-1 elsewhere), ``paragraph_candidate (N, P)`` (candidate index of each paragraph node, -1 for
[CLS]/question/missing), ``graph_overflow`` (windows that dropped sentence/paragraph nodes).
"""
from __future__ import annotations

import functools
import logging
import zlib

import numpy as np

from poi_jax.data.features import graph_layout as g
from poi_jax.data.features import nq_graph
from poi_jax.data.features.base import Features
from poi_jax.data.records import NqExample

FEATURE_VERSION = 1
UNKNOWN, YES, NO, SHORT, LONG = range(5)
MAX_POSITION = 50
LIST_TAGS = ("Ul", "Dl", "Ol")
log = logging.getLogger(__name__)


def marker_index(tag: str, n: int, max_position: int = MAX_POSITION) -> int:
  """K of the ``[unusedK]`` marker of the ``n``-th (1-based) candidate of kind ``tag``."""
  p = max_position
  if tag == "Table":
    return min(n, p) - 1
  if tag == "P":
    return min(n + p, 2 * p) - 1
  if tag in LIST_TAGS:
    return min(n + 2 * p, 3 * p) - 1
  return min(n + 3 * p, 4 * p) - 1


def _kind(tag: str) -> str:
  return "Table" if tag == "Table" else "P" if tag == "P" else "List" if tag in LIST_TAGS \
      else "Other"


@functools.lru_cache(maxsize=1)
def sentence_splitter():
  """``text -> list of sentence start character offsets`` and the splitter's name."""
  try:
    from spacy.lang.en import English
    nlp = English()
    nlp.add_pipe("sentencizer")

    def split(text):
      return [s.start_char for s in nlp(text).sents]
    return split, "spacy-sentencizer"
  except ImportError:
    import nltk
    log.warning("spaCy is not installed (pip install -e \".[nq]\"): NQ sentences are split with "
                "NLTK punkt instead of the original's spaCy sentencizer")
    tok = nltk.data.load("tokenizers/punkt/english.pickle")

    def split(text):
      return [s for s, _ in tok.span_tokenize(text)]
    return split, "nltk-punkt"


def splitter_name() -> str:
  return sentence_splitter()[1]


def _sentences_of_words(words: list[str]) -> np.ndarray:
  """Sentence index (from 0) of each word of one candidate."""
  if not words:
    return np.zeros(0, np.int64)
  starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
  text = " ".join(words)
  sent_starts = np.asarray(sentence_splitter()[0](text) or [0])
  return np.maximum(np.searchsorted(sent_starts, starts, side="right") - 1, 0)


def document_stream(ex: NqExample, tokenizer, max_position: int = MAX_POSITION):
  """The example's document as sub-tokens: ``(ids, orig, cand, para, sent)`` int arrays
  (``orig`` -1 on markers) and the top-level candidate indices in order."""
  top = [i for i, c in enumerate(ex.candidates) if c.top_level]
  counts: dict[str, int] = {}
  ids, orig, cand, para, sent = [], [], [], [], []
  words_all, word_orig, word_sent = [], [], []
  marker_at = []  # (position in words_all, marker id, cand, para)
  sent_base = 0
  for p, ci in enumerate(top):
    c = ex.candidates[ci]
    kind = _kind(c.tag)
    counts[kind] = counts.get(kind, 0) + 1
    k = marker_index(c.tag, counts[kind], max_position)
    marker_id = tokenizer.convert_tokens_to_ids(f"[unused{k}]")
    if marker_id is None or marker_id == tokenizer.unk_token_id:
      raise ValueError(f"the tokenizer has no [unused{k}] token for NQ candidate markers")
    keep = [t for t in range(c.start_token, c.end_token) if not ex.html[t]]
    words = [ex.tokens[t] for t in keep]
    s = _sentences_of_words(words)
    marker_at.append((len(words_all), marker_id, ci, p, sent_base))
    words_all += words
    word_orig += keep
    word_sent += (s + sent_base).tolist()
    sent_base += int(s.max()) + 1 if len(s) else 1
  pieces, word_ids = [], []
  if words_all:
    enc = tokenizer(words_all, is_split_into_words=True, add_special_tokens=False)
    pieces, word_ids = enc["input_ids"], enc.word_ids()
  word_para = np.zeros(len(words_all), np.int64)
  word_cand = np.zeros(len(words_all), np.int64)
  bounds = [m[0] for m in marker_at] + [len(words_all)]
  for j, (_, _, ci, p, _) in enumerate(marker_at):
    word_para[bounds[j]:bounds[j + 1]] = p
    word_cand[bounds[j]:bounds[j + 1]] = ci
  m = 0
  for piece, w in zip(pieces, word_ids):
    while m < len(marker_at) and marker_at[m][0] <= w:
      _, mid, ci, p, sb = marker_at[m]
      ids.append(mid), orig.append(-1), cand.append(ci), para.append(p), sent.append(sb)
      m += 1
    ids.append(piece), orig.append(word_orig[w]), cand.append(int(word_cand[w]))
    para.append(int(word_para[w])), sent.append(int(word_sent[w]))
  while m < len(marker_at):  # candidates without pieces at the end
    _, mid, ci, p, sb = marker_at[m]
    ids.append(mid), orig.append(-1), cand.append(ci), para.append(p), sent.append(sb)
    m += 1
  arr = lambda x: np.asarray(x, np.int64)
  return arr(ids), arr(orig), arr(cand), arr(para), arr(sent), top


def _compact(x: np.ndarray) -> np.ndarray:
  return np.unique(x, return_inverse=True)[1].reshape(-1) if len(x) else x


def window_starts(doc_len: int, max_doc: int, window_step: int) -> list[int]:
  """Starts of the windows of ``max_doc`` tokens over ``doc_len`` tokens, ``window_step`` apart
  (at most ``max_doc``: no token is skipped), the last one holding the document end."""
  starts, s = [], 0
  while True:
    starts.append(s)
    if s + max_doc >= doc_len:
      return starts
    s += min(max_doc, window_step)


def _example_labels(ex: NqExample, top: list[int], orig: np.ndarray, para: np.ndarray):
  """``(type, short hull sub-token range or None, long answer sub-token range or None)``."""
  if not ex.annotations:
    return UNKNOWN, None, None
  a = ex.annotations[0]
  long_rng = None
  if a.candidate_index >= 0:
    c = ex.candidates[a.candidate_index]
    owner = [p for p, ci in enumerate(top) if ex.candidates[ci].start_token <= c.start_token
             and c.end_token <= ex.candidates[ci].end_token]
    if owner:
      pos = np.flatnonzero((para == owner[0]) & (orig >= 0))
      if len(pos):
        long_rng = (int(pos[0]), int(pos[-1]))
  short = [s for s in a.short if s.start_token >= 0]
  if short and long_rng is not None:
    lo, hi = min(s.start_token for s in short), max(s.end_token for s in short)
    pos = np.flatnonzero((orig >= lo) & (orig < hi))
    if len(pos):
      return SHORT, (int(pos[0]), int(pos[-1])), long_rng
  if long_rng is None:
    return UNKNOWN, None, None
  return {"YES": YES, "NO": NO}.get(a.yes_no, LONG), None, long_rng


def build_nq_features(records: list[NqExample], tokenizer, *, max_seq_length: int,
                      window_step: int, max_query_length: int, max_sentences: int,
                      max_paragraphs: int, is_training: bool, include_unknowns: float,
                      seed: int, max_position: int = MAX_POSITION) -> Features:
  layout = g.NodeLayout(max_seq_length, max_sentences, max_paragraphs)
  L = max_seq_length
  cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
  pad_id = tokenizer.pad_token_id or 0
  rows = {k: [] for k in ("input_ids", "attention_mask", "token_type_ids", "st_mask",
                          *nq_graph.EDGE_FIELDS, "start_positions", "end_positions",
                          "paragraph_label", "answer_type", "example_index")}
  meta = {k: [] for k in ("token_to_orig", "token_paragraph", "paragraph_candidate")}
  overflow = 0
  for ex_i, ex in enumerate(records):
    q = tokenizer(ex.question, add_special_tokens=False)["input_ids"][-max_query_length:]
    ids, orig, cand, para, sent, top = document_stream(ex, tokenizer, max_position)
    max_doc = L - len(q) - 3
    if max_doc <= 0:
      raise ValueError(f"max_seq_length={L} leaves no room for the document after a "
                       f"{len(q)}-piece question (max_query_length={max_query_length})")
    etype, short_rng, long_rng = (_example_labels(ex, top, orig, para) if ex.annotations
                                  else (UNKNOWN, None, None))
    rng = np.random.default_rng([seed, zlib.crc32(ex.example_id.encode())])
    off = len(q) + 2
    for ws in window_starts(len(ids), max_doc, window_step):
      we = min(ws + max_doc, len(ids))
      n_doc = we - ws
      # Labels.
      s = e = l = -1
      t = UNKNOWN
      d_para = _compact(para[ws:we])
      if etype == SHORT and ws <= short_rng[0] and short_rng[1] < we:
        s, e, t = off + short_rng[0] - ws, off + short_rng[1] - ws, SHORT
        l = 2 + int(d_para[short_rng[0] - ws])
      elif etype in (LONG, YES, NO) and ws <= long_rng[0] and long_rng[1] < we:
        t, l = etype, 2 + int(d_para[long_rng[0] - ws])
      else:
        s = e = l = 0
        if is_training and rng.random() >= include_unknowns:
          continue
      if l >= max_paragraphs:
        l = -1
      # Tokens.
      input_ids = np.full(L, pad_id, np.int64)
      seq = [cls_id] + q + [sep_id] + ids[ws:we].tolist() + [sep_id]
      input_ids[:len(seq)] = seq
      mask = np.zeros(L, np.int64)
      mask[:len(seq)] = 1
      types = np.zeros(L, np.int64)
      types[off:len(seq)] = 1
      # Graph ids: [CLS] 0, question 1, document from 2 (first/final [SEP] join its ends).
      if n_doc:
        d_sent = _compact(sent[ws:we]) + 2
        d_par = d_para + 2
        w_sent = np.r_[0, np.ones(len(q), np.int64), d_sent[0], d_sent, d_sent[-1]]
        w_para = np.r_[0, np.ones(len(q), np.int64), d_par[0], d_par, d_par[-1]]
      else:
        w_sent = np.r_[0, np.ones(len(q), np.int64), 2, 2]
        w_para = w_sent.copy()
      graph = nq_graph.build_graph(w_sent, w_para, layout)
      overflow += graph.overflow > 0
      for k, v in graph.as_features().items():
        rows[k].append(v)
      rows["input_ids"].append(input_ids)
      rows["attention_mask"].append(mask)
      rows["token_type_ids"].append(types)
      rows["start_positions"].append(s)
      rows["end_positions"].append(e)
      rows["paragraph_label"].append(l)
      rows["answer_type"].append(t)
      rows["example_index"].append(ex_i)
      t2o = np.full(L, -1, np.int64)
      t2o[off:off + n_doc] = orig[ws:we]
      tp = np.full(L, -1, np.int64)
      tp[off:off + n_doc] = d_para + 2 if n_doc else []
      pc = np.full(max_paragraphs, -1, np.int64)
      if n_doc:
        first = np.unique(d_para, return_index=True)[1]
        cands = cand[ws:we][first]
        k = min(len(cands), max_paragraphs - 2)
        pc[2:2 + k] = cands[:k]
      meta["token_to_orig"].append(t2o)
      meta["token_paragraph"].append(tp)
      meta["paragraph_candidate"].append(pc)
  nodes, edges = layout.num_nodes, nq_graph.edge_capacity(L, max_sentences, max_paragraphs)
  shapes = {"input_ids": (L,), "attention_mask": (L,), "token_type_ids": (L,),
            "st_mask": (nodes,), **{k: (edges,) for k in nq_graph.EDGE_FIELDS}}
  arrays = {k: (np.stack(v).astype(np.int32) if v else np.zeros((0,) + shapes.get(k, ()),
                                                                 np.int32))
            for k, v in rows.items()}
  mshapes = {"token_to_orig": (L,), "token_paragraph": (L,),
             "paragraph_candidate": (max_paragraphs,)}
  meta_arrays = {k: (np.stack(v).astype(np.int32) if v else np.zeros((0,) + mshapes[k],
                                                                     np.int32))
                 for k, v in meta.items()}
  return Features(arrays, dict(meta_arrays, graph_overflow=int(overflow),
                               sentence_splitter=splitter_name()))


def merge_nq_features(parts: list[Features], starts: list[int]) -> Features:
  """Concatenates chunk features (``example_index`` shifted by each chunk's start)."""
  arrays = {}
  for k in parts[0].arrays:
    vals = [p.arrays[k] + (s if k == "example_index" else 0) for p, s in zip(parts, starts)]
    arrays[k] = np.concatenate(vals)
  meta = {k: np.concatenate([p.meta[k] for p in parts])
          for k in ("token_to_orig", "token_paragraph", "paragraph_candidate")}
  meta["graph_overflow"] = int(sum(p.meta["graph_overflow"] for p in parts))
  meta["sentence_splitter"] = parts[0].meta["sentence_splitter"]
  return Features(arrays, meta)
