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
the context (-1 elsewhere).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from poi_jax.data import pos as pos_lib
from poi_jax.data.records import SquadExample


@dataclasses.dataclass
class Features:
  arrays: dict[str, np.ndarray]
  meta: dict


def _truncate_question(tokenizer, question: str, max_query_length: int) -> str:
  enc = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
  if len(enc["input_ids"]) <= max_query_length:
    return question
  return question[:enc["offset_mapping"][max_query_length - 1][1]]


def _word_spans(text: str, word_tags):
  """Character span of each NLTK word in ``text`` (NLTK rewrites quotes: map them back)."""
  spans, pos = [], 0
  low = text.lower()
  for word, tag in word_tags:
    candidates = [word] + ({"``": ['"', "''"], "''": ['"', "``"]}.get(word, []))
    found = -1
    for c in candidates:
      found = low.find(c, pos)
      if found >= 0:
        spans.append((found, found + len(c), tag))
        pos = found + len(c)
        break
  return spans


def offset_tags(text: str, offsets, word_tags) -> list[int]:
  """`offsets` alignment: each sub-token takes the tag of the NLTK word whose character span
  covers its first character (38 when none does)."""
  spans = _word_spans(text, word_tags)
  starts = np.array([s for s, _, _ in spans]) if spans else np.zeros(0, int)
  out = []
  for s, e in offsets:
    if e <= s:
      out.append(pos_lib.OTHER_ID)
      continue
    i = int(np.searchsorted(starts, s, side="right")) - 1
    if i >= 0 and spans[i][0] <= s < spans[i][1]:
      out.append(pos_lib.tag_id(spans[i][2]))
    else:
      out.append(pos_lib.OTHER_ID)
  return out


def build_extractive_features(examples: list[SquadExample], tokenizer, *, max_seq_length: int,
                              doc_stride: int, max_query_length: int, is_training: bool,
                              with_pos: bool = True) -> Features:
  """Windows of every example; training drops answers whose text does not match the context at
  ``answer_start`` (counted in ``meta["skipped_mismatch"]``, as the original pipeline skips
  them)."""
  cols = {k: [] for k in ("input_ids", "attention_mask", "token_type_ids", "pos_tags",
                          "con_start", "con_end", "start_positions", "end_positions",
                          "example_index", "offsets")}
  skipped = []
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
      q_tags = pos_lib.tag_words(question)
      c_tags = pos_lib.tag_words(ex.context)
    for w in range(len(enc["input_ids"])):
      seq = enc.sequence_ids(w)
      offs = enc["offset_mapping"][w]
      ctx = [i for i, s in enumerate(seq) if s == 1]
      n_real = sum(enc["attention_mask"][w])
      first_sep = next(i for i, s in enumerate(seq) if i > 0 and s is None)
      con_end = n_real - 1
      offsets = np.full((max_seq_length, 2), -1, np.int32)
      for i in ctx:
        offsets[i] = offs[i]
      start = end = 0
      if answer is not None and ctx:
        c0, c1 = offsets[ctx[0], 0], offsets[ctx[-1], 1]
        if c0 <= answer[0] and answer[1] <= c1:
          start = next(i for i in ctx if offs[i][1] > answer[0])
          end = next(i for i in reversed(ctx) if offs[i][0] < answer[1])
      tags = np.zeros(max_seq_length, np.int32)
      if with_pos:
        q_idx = [i for i, s in enumerate(seq) if s == 0]
        tags[q_idx] = offset_tags(question, [offs[i] for i in q_idx], q_tags)
        tags[ctx] = offset_tags(ex.context, [offs[i] for i in ctx], c_tags)
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
  arrays = {k: np.asarray(v, np.int32) for k, v in cols.items() if k != "offsets"}
  meta = {"offsets": np.asarray(cols["offsets"], np.int32).reshape(-1, max_seq_length, 2),
          "skipped_mismatch": skipped}
  return Features(arrays, meta)
