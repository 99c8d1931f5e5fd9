"""Extractive (SQuAD) features from a transformers fast tokenizer.

Layout: the encoder's own pair template (BERT/ALBERT ``[CLS] Q [SEP] C [SEP]``, RoBERTa
``<s> Q </s></s> C </s>``), question first and cut to ``max_query_length`` tokens, the context in
windows of ``max_seq_length`` tokens. ``doc_stride`` is the number of tokens two consecutive
windows share (transformers' ``stride``, as its ``run_qa`` example uses it).

Per window (``N`` windows, ``L = max_seq_length``), int32:
``input_ids, attention_mask, token_type_ids, pos_tags (N, L)``; ``con_start`` = index of the
first separator after the question, ``con_end`` = index of the final separator (SPEC §1/§5:
POI-Net's domains A = [0, con_start), B = [con_start, con_end]); ``start_positions,
end_positions`` (the [CLS] index 0 for unanswerable questions and answers outside the window);
``example_index``. Decoding metadata: ``offsets (N, L, 2)`` character spans of context tokens in
the context, surrounding whitespace trimmed (-1 elsewhere).

POS tags (``with_pos``): ``pos_alignment="offsets"`` (default) or ``"original"`` (the released
algorithm, `poi_jax.data.pos.align_original`). `merge_extractive_features` joins the features of
consecutive chunks of examples (`poi_jax.data.parallel`) into exactly the single-call result.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from poi_jax.data import pos as pos_lib
from poi_jax.data.features import passages as passages_lib
from poi_jax.data.features.base import Features, trim_span
from poi_jax.data.features.pos_tags import check_pos_alignment, offset_tags, original_ids
from poi_jax.data.records import SquadExample

# Bump when the features this module builds change (the cache key includes it).
FEATURE_VERSION = 3  # 3: data.pos_lowercase (cased POS tags by default)


def _truncate_question(tokenizer, question: str, max_query_length: int) -> str:
  enc = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
  if len(enc["input_ids"]) <= max_query_length:
    return question
  return question[:enc["offset_mapping"][max_query_length - 1][1]]


def check_options(tokenizer, *, max_seq_length: int, doc_stride: int, max_query_length: int,
                  pos_alignment: str = "offsets") -> None:
  """Raises ValueError for options the tokenizer cannot honour (before any tokenising).

  The context room of a window is ``max_seq_length - question - special tokens``; the fast
  tokenizer needs ``doc_stride`` below it (it panics otherwise) for the longest question.
  """
  check_pos_alignment(pos_alignment)
  if not getattr(tokenizer, "is_fast", False):
    raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: the features need "
                     f"its offsets (return_offsets_mapping)")
  specials = tokenizer.num_special_tokens_to_add(pair=True)
  room = max_seq_length - max_query_length - specials
  if room <= 0:
    raise ValueError(
        f"data.max_seq_length={max_seq_length} leaves no room for the context: it must exceed "
        f"data.max_query_length ({max_query_length}) + the {specials} special tokens; raise "
        f"max_seq_length or lower max_query_length")
  if doc_stride >= room:
    raise ValueError(
        f"data.doc_stride={doc_stride} must be smaller than the context room of a window, "
        f"max_seq_length ({max_seq_length}) - max_query_length ({max_query_length}) - special "
        f"tokens ({specials}) = {room}: raise data.max_seq_length or lower data.doc_stride")


def _window_start(full_offsets, window_offsets, guess: int) -> int:
  """Index of the window's first context token among the whole context's tokens."""
  n = len(window_offsets)
  if full_offsets[guess:guess + n] == window_offsets:
    return guess
  for k in range(len(full_offsets) - n + 1):
    if full_offsets[k:k + n] == window_offsets:
      return k
  raise RuntimeError("a window's context tokens are not a slice of the context's tokens")


_COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "pos_tags", "con_start", "con_end",
            "start_positions", "end_positions", "example_index", "offsets")


def build_extractive_features(examples: list[SquadExample], tokenizer, *, max_seq_length: int,
                              doc_stride: int, max_query_length: int, is_training: bool,
                              with_pos: bool = True, pos_alignment: str = "offsets",
                              pos_lowercase: bool = False, passages=None) -> Features:
  """Windows of every example; training drops answers whose text does not match the context at
  ``answer_start`` (counted in ``meta["skipped_mismatch"]``, as the original pipeline skips
  them).

  ``pos_lowercase``: tag the lowercased text (the released pipeline) instead of the cased text
  (`poi_jax.data.pos`).
  ``pos_alignment``: ``offsets`` (each sub-token takes the tag of the NLTK word covering it) or
  ``original`` (`pos.align_original` over the question's and the whole context's sub-tokens,
  then cut into the windows; ``meta["pos_original_past_end"]`` lists the ``qid:field`` where
  the released code would have failed with IndexError and the last word's tag was kept).
  ``passages``: a `poi_jax.data.features.passages.PassageCache` (``offsets`` alignment only):
  each window's trimming and tags are array lookups in the analyses of its question and passage
  (the passage's kept in the cache); the features are the same.
  """
  check_options(tokenizer, max_seq_length=max_seq_length, doc_stride=doc_stride,
                max_query_length=max_query_length, pos_alignment=pos_alignment)
  if passages is not None and pos_alignment == "offsets":
    return _build_analysed(examples, tokenizer, passages, max_seq_length=max_seq_length,
                           doc_stride=doc_stride, max_query_length=max_query_length,
                           is_training=is_training, with_pos=with_pos, lowercase=pos_lowercase)
  cols = {k: [] for k in _COLUMNS}
  skipped, past_end = [], []
  for ei, ex in enumerate(examples):
    answer, mismatch = _checked_answer(ex)
    if mismatch:
      skipped.append(ex.qid)
      if is_training:
        continue
    question = _truncate_question(tokenizer, ex.question, max_query_length)
    enc = tokenizer(question, ex.context, truncation="only_second", max_length=max_seq_length,
                    stride=doc_stride, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding="max_length",
                    return_token_type_ids=True)
    pos = (_ExamplePos.build(tokenizer, ex, pos_alignment, past_end, pos_lowercase)
           if with_pos else None)
    for w in range(len(enc["input_ids"])):
      row = _window_row(enc, w, ex, question, answer, max_seq_length)
      if pos is not None:
        row["pos_tags"] = pos.window_tags(tokenizer, enc, w, row, doc_stride, past_end)
      row["example_index"] = ei
      for k in _COLUMNS:
        cols[k].append(row[k])
  return _assemble(cols, max_seq_length, skipped, past_end)


def _build_analysed(examples: list[SquadExample], tokenizer, passages, *, max_seq_length: int,
                    doc_stride: int, max_query_length: int, is_training: bool, with_pos: bool,
                    lowercase: bool) -> Features:
  """`build_extractive_features` with a `PassageCache` (``offsets`` alignment): the same
  features, from two tokenizer calls for all the examples (its batch call: one Rust call
  instead of a Python round trip per example) and array lookups in the texts' analyses."""
  cols = {k: [] for k in _COLUMNS}
  skipped, kept = [], []
  for ei, ex in enumerate(examples):
    answer, mismatch = _checked_answer(ex)
    if mismatch:
      skipped.append(ex.qid)
      if is_training:
        continue
    kept.append((ei, ex, answer))
  if kept:
    asked = [ex.question for _, ex, _ in kept]
    # _truncate_question, for all the questions at once.
    enc = tokenizer(asked, add_special_tokens=False, return_offsets_mapping=True)
    questions = [q if len(ids) <= max_query_length else q[:offs[max_query_length - 1][1]]
                 for q, ids, offs in zip(asked, enc["input_ids"], enc["offset_mapping"])]
    enc = tokenizer(questions, [ex.context for _, ex, _ in kept], truncation="only_second",
                    max_length=max_seq_length, stride=doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True,
                    padding="max_length", return_token_type_ids=True)
    texts = [(passages_lib.analyse(ex.question, lowercase=lowercase, with_pos=with_pos),
              passages.get(ex.context, lowercase=lowercase, with_pos=with_pos))
             for _, ex, _ in kept]
    for w, k in enumerate(enc["overflow_to_sample_mapping"]):
      row = _window_row_analysed(enc, w, texts[k], kept[k][2], max_seq_length, with_pos)
      row["example_index"] = kept[k][0]
      for c in _COLUMNS:
        cols[c].append(row[c])
  return _assemble(cols, max_seq_length, skipped, [])


def _checked_answer(ex: SquadExample) -> tuple[tuple[int, int] | None, bool]:
  """``(answer, mismatch)``: the first answer's character span ``[start, end)`` (None for an
  unanswerable question, and when the answer's text does not match the context at
  ``answer_start``: then ``mismatch`` is True)."""
  if ex.is_impossible or not ex.answers:
    return None, False
  a = ex.answers[0]
  if ex.context[a["answer_start"]:a["answer_start"] + len(a["text"])] != a["text"]:
    return None, True
  return (a["answer_start"], a["answer_start"] + len(a["text"])), False


def _window_row(enc, w: int, ex: SquadExample, question: str, answer, length: int) -> dict:
  """Window ``w`` of one example's encoding: its token columns, ``con_start``/``con_end``, the
  answer's token positions (0 = [CLS] when it is not inside the window), the context tokens'
  ``offsets (L, 2)`` (-1 elsewhere), zero ``pos_tags``, and for the POS step ``offs`` (every
  token's trimmed span), ``seq`` (sequence ids), ``ctx`` (context token indices), ``n_real``."""
  seq = enc.sequence_ids(w)
  offs = [trim_span(ex.context, *o) if s == 1 else trim_span(question, *o) if s == 0
          else tuple(o) for o, s in zip(enc["offset_mapping"][w], seq)]
  ctx = [i for i, s in enumerate(seq) if s == 1]
  n_real = sum(enc["attention_mask"][w])
  first_sep = next(i for i, s in enumerate(seq) if i > 0 and s is None)
  offsets = np.full((length, 2), -1, np.int32)
  for i in ctx:
    offsets[i] = offs[i]
  start = end = 0
  if answer is not None and ctx:
    c0, c1 = offsets[ctx[0], 0], offsets[ctx[-1], 1]
    if c0 <= answer[0] and answer[1] <= c1:
      start = next(i for i in ctx if offs[i][1] > answer[0])
      end = next(i for i in reversed(ctx) if offs[i][0] < answer[1])
  return {"input_ids": enc["input_ids"][w], "attention_mask": enc["attention_mask"][w],
          "token_type_ids": enc["token_type_ids"][w], "pos_tags": np.zeros(length, np.int32),
          "con_start": first_sep, "con_end": n_real - 1, "start_positions": start,
          "end_positions": end, "offsets": offsets, "offs": offs, "seq": seq, "ctx": ctx,
          "n_real": n_real}


def _window_row_analysed(enc, w: int, texts, answer, length: int, with_pos: bool) -> dict:
  """`_window_row` (and `_ExamplePos.window_tags` with the ``offsets`` alignment) as array
  lookups in the question's and the passage's `TextAnalysis` (``texts``)."""
  seq = np.array([-1 if s is None else s for s in enc.sequence_ids(w)])
  raw = np.asarray(enc["offset_mapping"][w], np.int64).reshape(-1, 2)
  starts, ends = raw[:, 0].copy(), raw[:, 1].copy()
  tags = np.zeros(length, np.int32)
  idx = [np.flatnonzero(seq == k) for k in (0, 1)]
  for text, i in zip(texts, idx):
    starts[i], ends[i] = text.trim(raw[i, 0], raw[i, 1])
    if with_pos:
      tags[i] = text.tags(starts[i], ends[i])
  ctx = idx[1]
  n_real = int(np.sum(enc["attention_mask"][w]))
  first_sep = int(np.flatnonzero((seq == -1) & (np.arange(len(seq)) > 0))[0])
  offsets = np.full((length, 2), -1, np.int32)
  offsets[ctx, 0], offsets[ctx, 1] = starts[ctx], ends[ctx]
  start = end = 0
  if answer is not None and len(ctx):
    if offsets[ctx[0], 0] <= answer[0] and answer[1] <= offsets[ctx[-1], 1]:
      start = int(ctx[np.argmax(ends[ctx] > answer[0])])
      end = int(ctx[len(ctx) - 1 - np.argmax(starts[ctx][::-1] < answer[1])])
  if with_pos:
    tags[(seq == -1) & (np.arange(len(seq)) < n_real)] = pos_lib.SPECIAL_ID
  return {"input_ids": enc["input_ids"][w], "attention_mask": enc["attention_mask"][w],
          "token_type_ids": enc["token_type_ids"][w], "pos_tags": tags,
          "con_start": first_sep, "con_end": n_real - 1, "start_positions": start,
          "end_positions": end, "offsets": offsets}


@dataclasses.dataclass
class _ExamplePos:
  """One example's NLTK tags and, for ``pos_alignment="original"``, the whole context's aligned
  tag ids (cut into each window) and the question's (the same in every window)."""
  question: str
  context: str
  qid: str
  alignment: str
  q_tags: list
  c_tags: list
  full_offsets: list | None = None
  c_orig: list | None = None
  q_orig: list | None = None
  first_window_len: int | None = None

  @classmethod
  def build(cls, tokenizer, ex: SquadExample, alignment: str, past_end: list,
            lowercase: bool = False) -> "_ExamplePos":
    # The whole question is tagged (as the released code does): cutting it first would change
    # the tagger's context for its last words. The kept question is a prefix of it, so the
    # offsets index both.
    pos = cls(ex.question, ex.context, ex.qid, alignment,
              pos_lib.tag_words(ex.question, lowercase=lowercase),
              pos_lib.tag_words(ex.context, lowercase=lowercase))
    if alignment == "original":
      full = tokenizer(ex.context, add_special_tokens=False, return_offsets_mapping=True)
      pos.full_offsets = [tuple(o) for o in full["offset_mapping"]]
      pos.c_orig = original_ids(tokenizer, full["input_ids"], pos.c_tags, past_end, ex.qid,
                                "context")
    return pos

  def window_tags(self, tokenizer, enc, w: int, row: dict, doc_stride: int,
                  past_end: list) -> np.ndarray:
    """``row["pos_tags"]`` filled for window ``w``: question and context tokens by the
    alignment, the special tokens `pos.SPECIAL_ID`."""
    seq, offs, ctx, tags = row["seq"], row["offs"], row["ctx"], row["pos_tags"]
    q_idx = [i for i, s in enumerate(seq) if s == 0]
    if self.alignment == "offsets":
      tags[q_idx] = offset_tags(self.question, [offs[i] for i in q_idx], self.q_tags)
      tags[ctx] = offset_tags(self.context, [offs[i] for i in ctx], self.c_tags)
    else:
      if self.q_orig is None:  # the same question tokens in every window
        self.q_orig = original_ids(tokenizer, [enc["input_ids"][w][i] for i in q_idx],
                                   self.q_tags, past_end, self.qid, "question")
      tags[q_idx] = self.q_orig
      if ctx:
        window = [tuple(enc["offset_mapping"][w][i]) for i in ctx]
        if self.first_window_len is None:
          self.first_window_len = len(ctx)
        k = _window_start(self.full_offsets, window, w * (self.first_window_len - doc_stride))
        tags[ctx] = self.c_orig[k:k + len(ctx)]
    special = [i for i, s in enumerate(seq) if s is None and i < row["n_real"]]
    tags[special] = pos_lib.SPECIAL_ID
    return tags


def _assemble(cols: dict, length: int, skipped: list, past_end: list) -> Features:
  """The per-window columns as int32 arrays ``(N, L)`` / ``(N,)``; offsets to the meta."""
  arrays = {}
  for k in ("input_ids", "attention_mask", "token_type_ids", "pos_tags"):
    arrays[k] = np.asarray(cols[k], np.int32).reshape(-1, length)
  for k in ("con_start", "con_end", "start_positions", "end_positions", "example_index"):
    arrays[k] = np.asarray(cols[k], np.int32).reshape(-1)
  meta = {"offsets": np.asarray(cols["offsets"], np.int32).reshape(-1, length, 2),
          "skipped_mismatch": skipped, "pos_original_past_end": past_end}
  return Features(arrays, meta)


def merge_extractive_features(parts: list[Features], starts: list[int]) -> Features:
  """Concatenates the features of consecutive chunks of examples (``starts``: each chunk's first
  example index) into the features of all of them, ``example_index`` made global."""
  arrays = {}
  for k in parts[0].arrays:
    vals = [p.arrays[k] + s if k == "example_index" else p.arrays[k]
            for p, s in zip(parts, starts)]
    arrays[k] = np.concatenate(vals, axis=0).astype(np.int32)
  meta = {"offsets": np.concatenate([p.meta["offsets"] for p in parts], axis=0),
          "skipped_mismatch": [q for p in parts for q in p.meta["skipped_mismatch"]],
          "pos_original_past_end": [q for p in parts for q in p.meta["pos_original_past_end"]]}
  return Features(arrays, meta)
