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

import bisect
import dataclasses
import functools

import numpy as np

from poi_jax.data import pos as pos_lib
from poi_jax.data.records import SquadExample

# Bump when the features this module builds change (the cache key includes it).
FEATURE_VERSION = 3  # 3: data.pos_lowercase (cased POS tags by default)
POS_ALIGNMENTS = ("offsets", "original")


@dataclasses.dataclass
class Features:
  arrays: dict[str, np.ndarray]
  meta: dict


def _truncate_question(tokenizer, question: str, max_query_length: int) -> str:
  enc = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
  if len(enc["input_ids"]) <= max_query_length:
    return question
  return question[:enc["offset_mapping"][max_query_length - 1][1]]


@functools.lru_cache(maxsize=256)
def _word_spans(text: str, word_tags) -> tuple[list[int], list[tuple[int, int, str, int]]]:
  """``(starts, spans)``: ``(start, end, tag, word index)`` of each NLTK word found in ``text``
  (NLTK rewrites quotes as ``` `` ``` / ``''``: map them back). Cached: a passage is aligned
  once per option and per question."""
  spans, pos = [], 0
  low = text.lower()
  for k, (word, tag) in enumerate(word_tags):
    candidates = [word] + ({"``": ['"', "''"], "''": ['"', "``"]}.get(word, []))
    found = -1
    for c in candidates:
      c = c.lower()  # the words are cased unless data.pos_lowercase
      found = low.find(c, pos)
      if found >= 0:
        spans.append((found, found + len(c), tag, k))
        pos = found + len(c)
        break
  return [sp[0] for sp in spans], spans


def offset_word_indices(text: str, offsets, word_tags) -> list[int]:
  """The index of the NLTK word whose character span covers each sub-token's first non-space
  character (-1 when none does, and for empty or all-space sub-tokens)."""
  starts, spans = _word_spans(text, tuple(word_tags))
  out = []
  for s, e in offsets:
    s, e = _trim(text, s, e)
    i = bisect.bisect_right(starts, s) - 1
    if e > s and i >= 0 and spans[i][0] <= s < spans[i][1]:
      out.append(spans[i][3])
    else:
      out.append(-1)
  return out


def offset_tags(text: str, offsets, word_tags) -> list[int]:
  """`offsets` alignment: each sub-token takes the tag of the NLTK word whose character span
  covers its first non-space character (38 when none does, and for empty or all-space
  sub-tokens)."""
  return [pos_lib.OTHER_ID if k < 0 else pos_lib.tag_id(word_tags[k][1])
          for k in offset_word_indices(text, offsets, word_tags)]


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
  """The span without surrounding whitespace: byte-level BPE tokenizers (RoBERTa) whose
  post-processor does not trim offsets include the space a ``Ġword`` token starts with."""
  while start < end and text[start].isspace():
    start += 1
  while end > start and text[end - 1].isspace():
    end -= 1
  return start, end


def check_options(tokenizer, *, max_seq_length: int, doc_stride: int, max_query_length: int,
                  pos_alignment: str = "offsets") -> None:
  """Raises ValueError for options the tokenizer cannot honour (before any tokenising).

  The context room of a window is ``max_seq_length - question - special tokens``; the fast
  tokenizer needs ``doc_stride`` below it (it panics otherwise) for the longest question.
  """
  if pos_alignment not in POS_ALIGNMENTS:
    raise ValueError(f"data.pos_alignment={pos_alignment!r}; choose one of {POS_ALIGNMENTS}")
  if not getattr(tokenizer, "is_fast", False):
    raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: the features need "
                     f"its offsets (return_offsets_mapping)")
  room = max_seq_length - max_query_length - tokenizer.num_special_tokens_to_add(pair=True)
  if room <= 0 or doc_stride >= room:
    raise ValueError(
        f"data.doc_stride={doc_stride} must be smaller than the context room of a window, "
        f"max_seq_length ({max_seq_length}) - max_query_length ({max_query_length}) - special "
        f"tokens ({tokenizer.num_special_tokens_to_add(pair=True)}) = {room}")


def original_ids(tokenizer, token_ids, word_tags, past_end: list, record_id: str,
                 field: str) -> list[int]:
  """`pos.align_original` on the tokenizer's sub-token strings. Where the released code would
  fail (IndexError: a sub-token at the last NLTK word that is not in it) the last word's tag is
  kept and ``"<record_id>:<field>"`` is appended to ``past_end`` (reported in the meta)."""
  subtokens = tokenizer.convert_ids_to_tokens(list(token_ids))
  if not word_tags:
    return [pos_lib.OTHER_ID] * len(subtokens)
  # The released code matches sub-tokens against the words of the lowercased text: cased tags
  # (data.pos_lowercase=False) are matched by their lowercased words, so only the tags change.
  word_tags = [(w.lower(), t) for w, t in word_tags]
  try:
    return pos_lib.align_original(subtokens, word_tags)
  except IndexError:
    past_end.append(f"{record_id}:{field}")
    return pos_lib.align_original(subtokens, word_tags, strict=False)


def _window_start(full_offsets, window_offsets, guess: int) -> int:
  """Index of the window's first context token among the whole context's tokens."""
  n = len(window_offsets)
  if full_offsets[guess:guess + n] == window_offsets:
    return guess
  for k in range(len(full_offsets) - n + 1):
    if full_offsets[k:k + n] == window_offsets:
      return k
  raise RuntimeError("a window's context tokens are not a slice of the context's tokens")


def build_extractive_features(examples: list[SquadExample], tokenizer, *, max_seq_length: int,
                              doc_stride: int, max_query_length: int, is_training: bool,
                              with_pos: bool = True, pos_alignment: str = "offsets",
                              pos_lowercase: bool = False) -> Features:
  """Windows of every example; training drops answers whose text does not match the context at
  ``answer_start`` (counted in ``meta["skipped_mismatch"]``, as the original pipeline skips
  them).

  ``pos_lowercase``: tag the lowercased text (the released pipeline) instead of the cased text
  (`poi_jax.data.pos`).
  ``pos_alignment``: ``offsets`` (each sub-token takes the tag of the NLTK word covering it) or
  ``original`` (`pos.align_original` over the question's and the whole context's sub-tokens,
  then cut into the windows; ``meta["pos_original_past_end"]`` lists the ``qid:field`` where
  the released code would have failed with IndexError and the last word's tag was kept).
  """
  check_options(tokenizer, max_seq_length=max_seq_length, doc_stride=doc_stride,
                max_query_length=max_query_length, pos_alignment=pos_alignment)
  length = max_seq_length
  cols = {k: [] for k in ("input_ids", "attention_mask", "token_type_ids", "pos_tags",
                          "con_start", "con_end", "start_positions", "end_positions",
                          "example_index", "offsets")}
  skipped, past_end = [], []
  for ei, ex in enumerate(examples):
    answer = None
    if not ex.is_impossible and ex.answers:
      a = ex.answers[0]
      if ex.context[a["answer_start"]:a["answer_start"] + len(a["text"])] != a["text"]:
        skipped.append(ex.qid)
        if is_training:
          continue
      else:
        answer = (a["answer_start"], a["answer_start"] + len(a["text"]))
    question = _truncate_question(tokenizer, ex.question, max_query_length)
    enc = tokenizer(question, ex.context, truncation="only_second", max_length=max_seq_length,
                    stride=doc_stride, return_overflowing_tokens=True,
                    return_offsets_mapping=True, padding="max_length",
                    return_token_type_ids=True)
    if with_pos:
      # The whole question is tagged (as the released code does): cutting it first would change
      # the tagger's context for its last words. The kept question is a prefix of it, so the
      # offsets index both.
      q_tags = pos_lib.tag_words(ex.question, lowercase=pos_lowercase)
      c_tags = pos_lib.tag_words(ex.context, lowercase=pos_lowercase)
      if pos_alignment == "original":
        q_orig = None
        full = tokenizer(ex.context, add_special_tokens=False, return_offsets_mapping=True)
        full_offsets = [tuple(o) for o in full["offset_mapping"]]
        c_orig = original_ids(tokenizer, full["input_ids"], c_tags, past_end, ex.qid,
                              "context")
        first_window_len = None
    for w in range(len(enc["input_ids"])):
      seq = enc.sequence_ids(w)
      offs = [_trim(ex.context, *o) if s == 1 else _trim(question, *o) if s == 0 else tuple(o)
              for o, s in zip(enc["offset_mapping"][w], seq)]
      ctx = [i for i, s in enumerate(seq) if s == 1]
      n_real = sum(enc["attention_mask"][w])
      first_sep = next(i for i, s in enumerate(seq) if i > 0 and s is None)
      con_end = n_real - 1
      offsets = np.full((length, 2), -1, np.int32)
      for i in ctx:
        offsets[i] = offs[i]
      start = end = 0
      if answer is not None and ctx:
        c0, c1 = offsets[ctx[0], 0], offsets[ctx[-1], 1]
        if c0 <= answer[0] and answer[1] <= c1:
          start = next(i for i in ctx if offs[i][1] > answer[0])
          end = next(i for i in reversed(ctx) if offs[i][0] < answer[1])
      tags = np.zeros(length, np.int32)
      if with_pos:
        q_idx = [i for i, s in enumerate(seq) if s == 0]
        if pos_alignment == "offsets":
          tags[q_idx] = offset_tags(ex.question, [offs[i] for i in q_idx], q_tags)
          tags[ctx] = offset_tags(ex.context, [offs[i] for i in ctx], c_tags)
        else:
          if q_orig is None:  # the same question tokens in every window
            q_orig = original_ids(tokenizer, [enc["input_ids"][w][i] for i in q_idx], q_tags,
                                  past_end, ex.qid, "question")
          tags[q_idx] = q_orig
          if ctx:
            window = [tuple(enc["offset_mapping"][w][i]) for i in ctx]
            if first_window_len is None:
              first_window_len = len(ctx)
            k = _window_start(full_offsets, window, w * (first_window_len - doc_stride))
            tags[ctx] = c_orig[k:k + len(ctx)]
        special = [i for i, s in enumerate(seq) if s is None and i < n_real]
        tags[special] = pos_lib.SPECIAL_ID
      cols["input_ids"].append(enc["input_ids"][w])
      cols["attention_mask"].append(enc["attention_mask"][w])
      cols["token_type_ids"].append(enc["token_type_ids"][w])
      cols["pos_tags"].append(tags)
      cols["con_start"].append(first_sep)
      cols["con_end"].append(con_end)
      cols["start_positions"].append(start)
      cols["end_positions"].append(end)
      cols["example_index"].append(ei)
      cols["offsets"].append(offsets)
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
