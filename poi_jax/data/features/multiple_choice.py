"""Multiple-choice (RACE, DREAM) features: one sequence per option,
``[CLS] passage [SEP] question option [SEP]`` in the encoder's pair template, the passage
truncated first so that the question and option survive.

Arrays (``N`` questions, ``C`` options, ``L = max_seq_length``), int32:
``input_ids, attention_mask, token_type_ids, pos_tags (N, C, L)``;
``con_start`` (first separator) and ``con_end`` (final separator) ``(N, C)``: POI-Net's domains
A = [CLS] + passage, B = separators + question + option (SPEC §1); ``p_end`` (last passage
token), ``q_start`` (first question token), ``q_end`` (last option token) ``(N, C)`` for DUMA
(SPEC §2); ``labels, example_index (N,)``.
"""
from __future__ import annotations

import numpy as np

from poi_jax.data import pos as pos_lib
from poi_jax.data.features.extractive import Features, offset_tags
from poi_jax.data.records import ChoiceExample, DataError


def build_choice_features(examples: list[ChoiceExample], tokenizer, *, max_seq_length: int,
                          with_pos: bool = True) -> Features:
  if not examples:
    raise ValueError("no examples")
  n_opt = len(examples[0].options)
  for ex in examples:
    if len(ex.options) != n_opt:
      raise DataError(ex.source, ex.qid, "options",
                      f"{len(ex.options)} options where the first record has {n_opt}")
  keys = ("input_ids", "attention_mask", "token_type_ids", "pos_tags", "con_start", "con_end",
          "p_end", "q_start", "q_end")
  cols = {k: [] for k in keys}
  for ex in examples:
    seconds = [f"{ex.question} {opt}".strip() for opt in ex.options]
    enc = tokenizer([ex.passage] * n_opt, seconds, truncation="only_first",
                    max_length=max_seq_length, padding="max_length",
                    return_offsets_mapping=True, return_token_type_ids=True)
    p_tags = pos_lib.tag_words(ex.passage) if with_pos else None
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
        tags[first] = offset_tags(ex.passage, [offs[i] for i in first], p_tags)
        tags[second] = offset_tags(seconds[o], [offs[i] for i in second],
                                   pos_lib.tag_words(seconds[o]))
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
                           "levels": [ex.level for ex in examples]})
