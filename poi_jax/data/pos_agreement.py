"""How often the `offsets` and `original` POS alignments disagree, and why.

Both alignments give each sub-token the tag of one NLTK word: `offsets` the word whose
character span covers the sub-token, `original` (the released algorithm, SPEC §5) a word index
``k`` that only moves forward by one, and only when the sub-token is not a substring of word
``k`` but is of word ``k + 1``. Once the two pick different words, `original` usually stays
off for the rest of the text (it can only re-synchronise by the same substring rule), so every
disagreeing sub-token is charged to the *cause* at the point where the two last diverged:

* ``quote``: NLTK rewrote a ``"`` as ``` `` ``` or ``''``; no sub-token is a substring of
  those, so `original` never advances past them again.
* ``in_current_word``: the sub-token is also a substring of the current word ("a" after
  "france"), so `original` does not move to the word it belongs to.
* ``wordpiece``: a WordPiece continuation (``##s``) is never a substring of a word, so it cannot
  advance `original` (a word split by NLTK, "cannot" -> "can" "not", ends up here).
* ``not_in_next_word``: any other sub-token that is in neither word ``k`` nor ``k + 1``
  (tokenizer normalisation such as stripped accents, NLTK splitting "U.S." or "$", ...).
* ``early_advance``: the sub-token is also a substring of the next word, so `original` moved on
  one word too early (a "." in "u.s.", "a" inside the next word ...).
* ``no_covering_word``: `offsets` found no NLTK word under the sub-token (a character NLTK
  dropped or rewrote); `original` still tags it.
* ``past_end``: the released code would fail (IndexError) here; the last word is kept.

Sequences are the questions and the contexts (each context once), tokenised whole (no windows),
tagged on the lowercased text as the released pipeline does (``data.pos_lowercase=True``: the
released alignment's substring rule compares with the lowercased words).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Sequence

from poi_jax.data import pos as pos_lib
from poi_jax.data.features.pos_tags import offset_word_indices
from poi_jax.data.records import SquadExample

CAUSES = ("quote", "in_current_word", "wordpiece", "not_in_next_word", "early_advance",
          "no_covering_word", "past_end")


@dataclasses.dataclass
class Agreement:
  """Counts over sub-tokens (empty sub-tokens, 38 in both, are counted as agreeing)."""
  subtokens: int = 0
  disagree: int = 0
  sequences: int = 0
  sequences_with_disagreement: int = 0
  by_cause: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  examples: dict = dataclasses.field(default_factory=dict)  # cause -> one (text, sub-token)

  @property
  def rate(self) -> float:
    return self.disagree / max(self.subtokens, 1)

  def add(self, other: "Agreement") -> None:
    self.subtokens += other.subtokens
    self.disagree += other.disagree
    self.sequences += other.sequences
    self.sequences_with_disagreement += other.sequences_with_disagreement
    self.by_cause.update(other.by_cause)
    for k, v in other.examples.items():
      self.examples.setdefault(k, v)

  def table(self) -> str:
    lines = [f"sub-tokens {self.subtokens:,}, disagreeing {self.disagree:,} "
             f"({100 * self.rate:.2f}%); sequences {self.sequences:,}, with a disagreement "
             f"{self.sequences_with_disagreement:,}",
             f"{'cause':<18} {'sub-tokens':>10} {'share':>7}  first example"]
    for cause, n in self.by_cause.most_common():
      ex = self.examples.get(cause, "")
      lines.append(f"{cause:<18} {n:>10,} {100 * n / max(self.disagree, 1):>6.1f}%  {ex}")
    return "\n".join(lines)


def _cause(subtoken: str, k_orig: int, k_off: int, words: Sequence[str]) -> str:
  s = subtoken.replace("\u2581", "")
  if k_off < 0:
    return "no_covering_word"
  if k_orig > k_off:
    return "early_advance"
  if any(w in ("``", "''") for w in words[k_orig + 1:k_off + 1]):
    return "quote"
  if s in words[k_orig]:
    return "in_current_word"
  if s.startswith("##"):
    return "wordpiece"
  return "not_in_next_word"


def compare_sequence(text: str, tokenizer, word_tags=None) -> Agreement:
  """Both alignments on the sub-tokens of ``text`` (no special tokens)."""
  word_tags = pos_lib.tag_words(text, lowercase=True) if word_tags is None else word_tags
  enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
  subtokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
  res = Agreement(sequences=1, subtokens=len(subtokens))
  if not subtokens:
    return res
  words = [w for w, _ in word_tags]
  try:
    k_orig = pos_lib.align_original_indices(subtokens, word_tags)
    past_end_at = None
  except IndexError:
    k_orig = pos_lib.align_original_indices(subtokens, word_tags, strict=False)
    strict_prefix = []
    for i in range(len(subtokens)):  # where the strict version would have raised
      try:
        strict_prefix = pos_lib.align_original_indices(subtokens[:i + 1], word_tags)
      except IndexError:
        break
    past_end_at = len(strict_prefix)
  k_off = offset_word_indices(text, enc["offset_mapping"], word_tags)
  tag = lambda k: pos_lib.OTHER_ID if k < 0 else pos_lib.tag_id(word_tags[k][1])
  cause = None  # the cause of the current divergence (None while both pick the same word)
  for i, (s, ko, kf) in enumerate(zip(subtokens, k_orig, k_off)):
    if ko < 0:
      continue  # empty sub-token: 38 in both
    if past_end_at is not None and i >= past_end_at:
      cause = "past_end"
    elif ko == kf:
      cause = None
    elif cause is None:
      cause = _cause(s, ko, kf, words)
    if tag(ko) != tag(kf):
      res.disagree += 1
      res.by_cause[cause] += 1
      res.examples.setdefault(
          cause, f"{s!r}: original {words[ko]!r}, offsets {words[kf] if kf >= 0 else None!r}")
  res.sequences_with_disagreement = int(res.disagree > 0)
  return res


def squad_agreement(examples: Sequence[SquadExample], tokenizer) -> dict[str, Agreement]:
  """Both alignments over every question and every distinct context of ``examples``:
  ``{"question": ..., "context": ..., "all": ...}``."""
  out = {"question": Agreement(), "context": Agreement(), "all": Agreement()}
  seen = set()
  for ex in examples:
    out["question"].add(compare_sequence(ex.question, tokenizer))
    if ex.context not in seen:
      seen.add(ex.context)
      out["context"].add(compare_sequence(ex.context, tokenizer))
  out["all"].add(out["question"])
  out["all"].add(out["context"])
  return out
