"""Multiple-choice (RACE, DREAM) features: one sequence per option,
``[CLS] passage [SEP] question option [SEP]`` in the encoder's pair template, the passage
truncated first so that the question and option survive.

Arrays (``N`` questions, ``C`` options, ``L = max_seq_length``), int32:
``input_ids, attention_mask, token_type_ids, pos_tags (N, C, L)``;
``con_start`` (first separator) and ``con_end`` (final separator) ``(N, C)``: POI-Net's domains
A = [CLS] + passage, B = separators + question + option (SPEC §1); ``p_end`` (last passage
token), ``q_start`` (first question token), ``q_end`` (last option token) ``(N, C)`` for DUMA
(SPEC §2); ``labels, example_index (N,)``. With RoBERTa's ``<s> P </s></s> Q O </s>``,
``con_start`` is the first of the two separators and ``q_start = p_end + 3``.
"""
from __future__ import annotations

import numpy as np

from poi_jax.data import pos as pos_lib
from poi_jax.data.features.base import Features
from poi_jax.data.features.pos_tags import check_pos_alignment, offset_tags, original_ids
from poi_jax.data.records import ChoiceExample, DataError

# Bump when the features this module builds change (the cache key includes it).
FEATURE_VERSION = 3  # 3: data.pos_lowercase (cased POS tags by default)


def check_choice_examples(examples: list[ChoiceExample]) -> None:
  """Every record has as many options as the first (the arrays are ``(N, C, L)``); checked over
  all records before any tokenising (the parallel path featurises chunks separately)."""
  if not examples:
    raise ValueError("no examples")
  n_opt = len(examples[0].options)
  for ex in examples:
    if len(ex.options) != n_opt:
      raise DataError(ex.source, ex.qid, "options",
                      f"{len(ex.options)} options where the first record has {n_opt}")


def _check_room(ex: ChoiceExample, seconds: list[str], tokenizer, max_seq_length: int) -> None:
  """DataError when question + option (never truncated) leave no token for the passage."""
  specials = tokenizer.num_special_tokens_to_add(pair=True)
  lengths = [len(ids) for ids in tokenizer(seconds, add_special_tokens=False)["input_ids"]]
  for o, n in enumerate(lengths):
    if n + specials >= max_seq_length:
      raise DataError(ex.source, ex.qid, "question",
                      f"question + option {o} take {n} tokens (+{specials} special), which leaves "
                      f"no room for the passage in {max_seq_length} tokens")


def build_choice_features(examples: list[ChoiceExample], tokenizer, *, max_seq_length: int,
                          with_pos: bool = True, pos_alignment: str = "offsets",
                          pos_lowercase: bool = False) -> Features:
  """One sequence per option of every question (see the module docstring).

  ``pos_lowercase``: tag the lowercased text (the released pipeline) instead of the cased text
  (`poi_jax.data.pos`).
  ``pos_alignment``: ``offsets`` (each sub-token takes the tag of the NLTK word covering it) or
  ``original`` (`pos.align_original` over the sub-tokens of the whole passage and of
  question+option; ``meta["pos_original_past_end"]`` lists where the released code would have
  failed and the last word's tag was kept).
  """
  check_choice_examples(examples)
  check_pos_alignment(pos_alignment)
  if not getattr(tokenizer, "is_fast", False):
    raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: the features need "
                     f"its offsets (return_offsets_mapping)")
  n_opt = len(examples[0].options)
  keys = ("input_ids", "attention_mask", "token_type_ids", "pos_tags", "con_start", "con_end",
          "p_end", "q_start", "q_end")
  cols = {k: [] for k in keys}
  past_end = []
  for ex in examples:
    seconds = [f"{ex.question} {opt}".strip() for opt in ex.options]
    try:
      enc = tokenizer([ex.passage] * n_opt, seconds, truncation="only_first",
                      max_length=max_seq_length, padding="max_length",
                      return_offsets_mapping=True, return_token_type_ids=True)
    except Exception:  # the Rust tokenizer's "Truncation error": name the record instead
      _check_room(ex, seconds, tokenizer, max_seq_length)
      raise
    if with_pos:
      p_tags = pos_lib.tag_words(ex.passage, lowercase=pos_lowercase)
      if pos_alignment == "original":
        full = tokenizer(ex.passage, add_special_tokens=False)
        p_orig = original_ids(tokenizer, full["input_ids"], p_tags, past_end, ex.qid, "passage")
    per = {k: [] for k in keys}
    for o in range(n_opt):
      seq = enc.sequence_ids(o)
      offs = enc["offset_mapping"][o]
      first = [i for i, s in enumerate(seq) if s == 0]
      second = [i for i, s in enumerate(seq) if s == 1]
      if not first or not second:
        raise DataError(ex.source, ex.qid, "question",
                        f"question + option {o} leave no room for the passage in "
                        f"{max_seq_length} tokens")
      n_real = sum(enc["attention_mask"][o])
      tags = np.zeros(max_seq_length, np.int32)
      if with_pos:
        s_tags = pos_lib.tag_words(seconds[o], lowercase=pos_lowercase)
        if pos_alignment == "offsets":
          tags[first] = offset_tags(ex.passage, [offs[i] for i in first], p_tags)
          tags[second] = offset_tags(seconds[o], [offs[i] for i in second], s_tags)
        else:
          # The passage is truncated from its end, so its window is a prefix of its tokens.
          tags[first] = p_orig[:len(first)]
          tags[second] = original_ids(tokenizer, [enc["input_ids"][o][i] for i in second],
                                      s_tags, past_end, ex.qid, f"options[{o}]")
        tags[[i for i, s in enumerate(seq) if s is None and i < n_real]] = pos_lib.SPECIAL_ID
      per["input_ids"].append(enc["input_ids"][o])
      per["attention_mask"].append(enc["attention_mask"][o])
      per["token_type_ids"].append(enc["token_type_ids"][o])
      per["pos_tags"].append(tags)
      per["con_start"].append(first[-1] + 1)
      per["con_end"].append(n_real - 1)
      per["p_end"].append(first[-1])
      per["q_start"].append(second[0])
      per["q_end"].append(second[-1])
    for k in keys:
      cols[k].append(per[k])
  arrays = {k: np.asarray(v, np.int32) for k, v in cols.items()}
  arrays["labels"] = np.asarray([ex.label for ex in examples], np.int32)
  arrays["example_index"] = np.arange(len(examples), dtype=np.int32)
  return Features(arrays, {"ids": [ex.qid for ex in examples],
                           "levels": [ex.level for ex in examples],
                           "pos_original_past_end": past_end})


def merge_choice_features(parts: list[Features], starts: list[int]) -> Features:
  """Concatenates the features of consecutive chunks of questions (``starts``: each chunk's
  first question index) into those of all of them, ``example_index`` made global."""
  # One row per question: a chunk's example_index (0..) shifted by its first question's index.
  arrays = {k: np.concatenate([p.arrays[k] + s if k == "example_index" else p.arrays[k]
                               for p, s in zip(parts, starts)], axis=0)
            for k in parts[0].arrays}
  arrays["example_index"] = arrays["example_index"].astype(np.int32)
  return Features(arrays, {k: [v for p in parts for v in p.meta[k]] for k in ("ids", "levels",
                                                                  "pos_original_past_end")})
