"""POS tags of sub-tokens (SPEC §1), shared by the extractive and multiple-choice features:
``pos_alignment="offsets"`` (each sub-token takes the tag of the NLTK word covering it) or
``"original"`` (the released algorithm, `poi_jax.data.pos.align_original`)."""
from __future__ import annotations

import bisect
import functools

from poi_jax.data import pos as pos_lib
from poi_jax.data.features.base import trim_span

POS_ALIGNMENTS = ("offsets", "original")


def check_pos_alignment(pos_alignment: str) -> None:
  """Raises ValueError for an unknown ``data.pos_alignment``."""
  if pos_alignment not in POS_ALIGNMENTS:
    raise ValueError(f"data.pos_alignment={pos_alignment!r}; choose one of {POS_ALIGNMENTS}")


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
    s, e = trim_span(text, s, e)
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
