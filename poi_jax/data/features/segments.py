"""QOPN's segmenter: an article as at most ``max_segments`` non-overlapping segments, each laid
out with the question in the encoder's own pair template, with character <-> token offsets back
to the article.

Per question (decisions of issue 9):

* The article is tokenised once (no special tokens, offsets trimmed of surrounding whitespace, as
  byte-level BPE tokenizers include the space a ``Ġword`` token starts with). The question is cut
  to ``max_query_length`` tokens (``< 0``: never cut; then a question that leaves no room for the
  article in the window is a `DataError` naming file, record and field).
* Each segment holds ``S = max_seq_length - question tokens - special tokens`` article tokens
  (the last one fewer when the article ends): ``[CLS] Q [SEP] S^k [SEP]`` (RoBERTa ``<s> Q
  </s></s> S^k </s>``; the template and token types are read from the tokenizer). Segments do not
  overlap; K = min(max_segments, ceil(T / S)). Tokens past ``max_segments * S`` are cut
  (``meta["truncated_articles"]`` counts the questions concerned).
* Segment k covers the characters from its first token's start (0 for k = 0) to the next
  segment's first token's start (the article's end for the last one), so the segments' texts
  concatenate back to the article (to the cut point when truncated).
* Answers: character span ``[a, b)`` -> the first token ending after ``a`` and the last token
  starting before ``b``, in article tokens, then the flat index ``k * L + row`` of the model's
  global logits (`poi_jax.models.qopn`). A span may start in one segment and end in another.
  Training questions whose answer is (partly) cut are dropped and counted
  (``meta["dropped_cut"]``); evaluation questions keep label -1 and are still scored.

Arrays (N questions, K = ``max_segments``, L = ``max_seq_length``): ``input_ids,
attention_mask, token_type_ids, span_mask (N, K, L)`` int32 (``span_mask``: the segment's own
tokens, the answer candidates), ``segment_mask (N, K)``, ``question_rows (N,)`` (1 + question
tokens), ``start_positions, end_positions, example_index (N,)``. Meta: ``token_index (N, K*L)``
(article token of each position, -1 elsewhere), ``offsets (N, K*L, 2)`` (its characters in the
article, -1 elsewhere), ``segment_chars`` (per question, the ``(start, end)`` characters of each
segment), ``qids``, ``contexts``, counts.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from poi_jax.data.features.base import Features
from poi_jax.data.records import DataError, SquadExample

FEATURE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Template:
  """The encoder's pair template: special ids before the question, between question and segment,
  after the segment, and the token type of each part."""
  prefix: tuple[int, ...]
  between: tuple[int, ...]
  suffix: tuple[int, ...]
  types: tuple[int, int, int, int, int]  # prefix, question, between, segment, suffix

  @property
  def num_special(self) -> int:
    return len(self.prefix) + len(self.between) + len(self.suffix)

  def build(self, q_ids, s_ids) -> tuple[list[int], list[int]]:
    parts = (self.prefix, q_ids, self.between, s_ids, self.suffix)
    ids = [i for p in parts for i in p]
    types = [t for p, t in zip(parts, self.types) for _ in p]
    return ids, types


def template(tokenizer) -> Template:
  """Reads the pair template off the tokenizer (a pair of one-token texts and its sequence ids)."""
  if not getattr(tokenizer, "is_fast", False):
    raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: the segmenter needs "
                     f"its offsets (return_offsets_mapping)")
  enc = tokenizer("a", "b")
  seq = enc.sequence_ids()
  ids = enc["input_ids"]
  types = enc.get("token_type_ids") or [0] * len(ids)
  first_q, first_s = seq.index(0), seq.index(1)
  last_q = max(i for i, s in enumerate(seq) if s == 0)
  last_s = max(i for i, s in enumerate(seq) if s == 1)
  t = Template(prefix=tuple(ids[:first_q]), between=tuple(ids[last_q + 1:first_s]),
               suffix=tuple(ids[last_s + 1:]),
               types=(types[0], types[first_q], types[last_q + 1] if last_q + 1 < first_s
                      else types[first_s], types[first_s], types[-1]))
  if len(t.prefix) != 1:
    raise ValueError(f"{type(tokenizer).__name__}: QOPN expects one special token before the "
                     f"question ([CLS] / <s>), the template has {len(t.prefix)}")
  return t


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
  while start < end and text[start].isspace():
    start += 1
  while end > start and text[end - 1].isspace():
    end -= 1
  return start, end


def tokenize_article(tokenizer, text: str) -> tuple[list[int], np.ndarray]:
  """Article token ids and their ``(T, 2)`` character offsets (whitespace trimmed)."""
  enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
  offsets = np.array([_trim(text, s, e) for s, e in enc["offset_mapping"]],
                     np.int64).reshape(-1, 2)
  return list(enc["input_ids"]), offsets


def segment_ranges(num_tokens: int, segment_tokens: int, max_segments: int
                   ) -> list[tuple[int, int]]:
  """Non-overlapping ``[start, end)`` token ranges of at most ``segment_tokens`` each."""
  if segment_tokens <= 0:
    raise ValueError(f"segment_tokens must be positive, got {segment_tokens}")
  n = min(max_segments, max(1, -(-num_tokens // segment_tokens)))
  return [(k * segment_tokens, min(num_tokens, (k + 1) * segment_tokens)) for k in range(n)]


def segment_chars(offsets: np.ndarray, ranges, text_len: int) -> list[tuple[int, int]]:
  """Character span of each segment; consecutive spans touch, the first starts at 0, the last
  ends at the article's end (or, when tokens were cut, at the first cut token's start)."""
  n_tok = len(offsets)
  starts = [0] + [int(offsets[s, 0]) for s, _ in ranges[1:]]
  last_end = ranges[-1][1]
  end = text_len if last_end >= n_tok else int(offsets[last_end, 0])
  return [(starts[k], starts[k + 1] if k + 1 < len(ranges) else end) for k in range(len(ranges))]


def char_span_to_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
  """Article tokens ``(s, e)`` (inclusive) covering characters ``[start, end)``; None when no
  token overlaps it (an all-whitespace span)."""
  if not len(offsets):
    return None
  over = np.nonzero((offsets[:, 1] > start) & (offsets[:, 0] < end))[0]
  if not len(over):
    return None
  return int(over[0]), int(over[-1])


def check_options(tokenizer, *, max_seq_length: int, max_query_length: int,
                  max_segments: int) -> None:
  t = template(tokenizer)
  if max_segments < 1:
    raise ValueError(f"data.qopn.max_segments must be >= 1, got {max_segments}")
  if max_query_length == 0 or max_seq_length - max(max_query_length, 0) - t.num_special < 1:
    raise ValueError(f"data.max_query_length={max_query_length} leaves no room for the article "
                     f"in data.max_seq_length={max_seq_length} ({t.num_special} special tokens)")


def build_segment_features(examples: list[SquadExample], tokenizer, *, max_seq_length: int,
                           max_query_length: int, max_segments: int, is_training: bool
                           ) -> Features:
  """QOPN features of ``examples`` (answers ``[{"text", "answer_start"}]``; the first is the
  training target). See the module docstring for the arrays."""
  check_options(tokenizer, max_seq_length=max_seq_length, max_query_length=max_query_length,
                max_segments=max_segments)
  tpl = template(tokenizer)
  pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
  k_max, length = max_segments, max_seq_length
  articles: dict[str, tuple[list[int], np.ndarray]] = {}
  rows: list[dict] = []
  counts = dict(dropped_cut=0, dropped_unmappable=0, truncated_articles=0,
                truncated_questions=0)
  for ei, ex in enumerate(examples):
    if ex.context not in articles:
      articles[ex.context] = tokenize_article(tokenizer, ex.context)
    a_ids, offsets = articles[ex.context]
    q_ids = tokenizer(ex.question, add_special_tokens=False, verbose=False)["input_ids"]
    if 0 <= max_query_length < len(q_ids):
      q_ids = q_ids[:max_query_length]
      counts["truncated_questions"] += 1
    seg_tokens = length - len(q_ids) - tpl.num_special
    if seg_tokens < 1:
      raise DataError(ex.source, ex.qid, "question",
                      f"{len(q_ids)} tokens: with {tpl.num_special} special tokens it leaves no "
                      f"room for the article in a window of {length} (data.max_seq_length)")
    ranges = segment_ranges(len(a_ids), seg_tokens, k_max)
    covered = ranges[-1][1]
    if covered < len(a_ids):
      counts["truncated_articles"] += 1
    label = (-1, -1)
    if ex.answers:
      ans = ex.answers[0]
      span = char_span_to_tokens(offsets, ans["answer_start"],
                                 ans["answer_start"] + len(ans["text"]))
      if span is None:
        if is_training:
          counts["dropped_unmappable"] += 1
          continue
      elif span[1] >= covered:
        if is_training:
          counts["dropped_cut"] += 1
          continue
      else:
        label = span
    elif is_training:
      raise DataError(ex.source, ex.qid, "answers", "a training question without an answer")
    rows.append(dict(ei=ei, q_ids=q_ids, ranges=ranges, seg_tokens=seg_tokens, label=label,
                     chars=segment_chars(offsets, ranges, len(ex.context))))
  n = len(rows)
  arrays = {
      "input_ids": np.full((n, k_max, length), pad, np.int32),
      "attention_mask": np.zeros((n, k_max, length), np.int32),
      "token_type_ids": np.zeros((n, k_max, length), np.int32),
      "span_mask": np.zeros((n, k_max, length), np.int32),
      "segment_mask": np.zeros((n, k_max), np.int32),
      "question_rows": np.zeros(n, np.int32),
      "start_positions": np.full(n, -1, np.int32),
      "end_positions": np.full(n, -1, np.int32),
      "example_index": np.zeros(n, np.int32),
  }
  token_index = np.full((n, k_max * length), -1, np.int32)
  offs = np.full((n, k_max * length, 2), -1, np.int32)
  content = len(tpl.prefix) + len(tpl.between)
  for r, row in enumerate(rows):
    ex = examples[row["ei"]]
    a_ids, offsets = articles[ex.context]
    q_ids = row["q_ids"]
    start = content + len(q_ids)  # the segment's first row
    for k, (s, e) in enumerate(row["ranges"]):
      ids, types = tpl.build(q_ids, a_ids[s:e])
      arrays["input_ids"][r, k, :len(ids)] = ids
      arrays["token_type_ids"][r, k, :len(ids)] = types
      arrays["attention_mask"][r, k, :len(ids)] = 1
      arrays["span_mask"][r, k, start:start + e - s] = 1
      arrays["segment_mask"][r, k] = 1
      flat = k * length + start
      token_index[r, flat:flat + e - s] = np.arange(s, e)
      offs[r, flat:flat + e - s] = offsets[s:e]
    arrays["question_rows"][r] = len(tpl.prefix) + len(q_ids)
    arrays["example_index"][r] = row["ei"]
    if row["label"][0] >= 0:
      for name, tok in zip(("start_positions", "end_positions"), row["label"]):
        k = tok // row["seg_tokens"]
        arrays[name][r] = k * length + start + tok - row["ranges"][k][0]
  if any(counts.values()):
    logging.info("QOPN segments: %s", counts)
  meta = dict(counts, token_index=token_index, offsets=offs,
              segment_chars=[row["chars"] for row in rows],
              qids=[examples[row["ei"]].qid for row in rows],
              contexts=[examples[row["ei"]].context for row in rows],
              num_examples=len(examples))
  return Features(arrays, meta)


def merge_segment_features(parts: list[Features], starts: list[int]) -> Features:
  """Concatenates the features of consecutive chunks of questions (``starts``: each chunk's first
  question index) into those of all of them, ``example_index`` made global."""
  arrays = {k: np.concatenate([p.arrays[k] + s if k == "example_index" else p.arrays[k]
                               for p, s in zip(parts, starts)]).astype(np.int32)
            for k in parts[0].arrays}
  meta = {k: int(sum(p.meta[k] for p in parts))
          for k in ("dropped_cut", "dropped_unmappable", "truncated_articles",
                    "truncated_questions", "num_examples")}
  for k in ("token_index", "offsets"):
    meta[k] = np.concatenate([p.meta[k] for p in parts]).astype(np.int32)
  for k in ("segment_chars", "qids", "contexts"):
    meta[k] = [v for p in parts for v in p.meta[k]]
  return Features(arrays, meta)
