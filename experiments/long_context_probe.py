r"""A long-context probe that a sliding window cannot solve: the answer needs a fact from another
segment of the article (issue 36, item 2; QOPN's claim of "long-range information integration").

  python experiments/long_context_probe.py --out=/tmp/probe --seed=0 --train=600 --eval=150 \
      --distractors=3                   # NewsQA-format (QOPN) and SQuAD-format (window) files

Each article has ``segments`` paragraphs, each long enough (``filler`` sentences of neutral text)
that two facts in different paragraphs never share a window of ``min_gap_words`` words:

* one paragraph says where the archives are kept: "The archive of Mora is kept in Velt." for the
  question's entity and for ``distractors`` other entities, each kept in another place;
* another paragraph (never the same) says when the places were founded: "Velt was founded in
  1612." for every place named, in shuffled order, all of the same shape.

The question: "When was the place that keeps the archive of Mora founded?"; the answer: "1612", a
span of the second paragraph. A window that sees the archive paragraph has no year; one that sees
the founding paragraph has ``distractors + 1`` years of the same shape and nothing linking them to
Mora: it can only guess, so its expected exact match is 1 / (distractors + 1). A model that carries
the question across segments (QOPN) can do better.

Names are syllable strings and years distinct within an article, all drawn from one seeded
``random.Random``: the same arguments give the same files on every machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import random
import sys
import tempfile

_SYLLABLES = ("ba", "do", "ke", "li", "mo", "ra", "ve", "lt", "sa", "no", "ti", "ru", "ga", "pe",
              "zo", "fi", "ha", "mu", "de", "lo", "vi", "ne", "ka", "so")
# Neutral filler: says nothing about archives, places or years, so it cannot leak an answer.
_FILLER = (
    "The river runs slowly past the old mills on its way to the sea.",
    "Travellers often stop at the market to buy bread and fruit.",
    "In the spring the hills turn green and the roads are busy with carts.",
    "Local musicians play in the square on most summer evenings.",
    "The weather along the coast is mild for much of the year.",
    "Fishing boats leave the harbour early and return before noon.",
    "Many of the houses have red roofs and small gardens behind them.",
    "A narrow bridge crosses the stream near the edge of the forest.",
    "Children walk to school along the avenue lined with tall trees.",
    "The valley is known for its quiet villages and clear lakes.",
)


@dataclasses.dataclass(frozen=True)
class ProbeArticle:
  """One article and its question. ``segments``: the paragraphs' ``(start, end)`` character spans
  in ``text``; ``entity_segment`` holds the question's entity, ``answer_segment`` the answer."""
  title: str
  text: str
  question: str
  answer: str
  answer_start: int
  segments: tuple[tuple[int, int], ...]
  entity_segment: int
  answer_segment: int


def _names(rng: random.Random, n: int, syllables: int) -> list[str]:
  seen: set[str] = set()
  while len(seen) < n:
    seen.add("".join(rng.choice(_SYLLABLES) for _ in range(syllables)).capitalize())
  out = sorted(seen)
  rng.shuffle(out)
  return out


def _filler(rng: random.Random, sentences: int) -> list[str]:
  return [rng.choice(_FILLER) for _ in range(sentences)]


def make_article(rng: random.Random, index: int, *, segments: int = 4, distractors: int = 3,
                 filler: int = 18) -> ProbeArticle:
  """One probe article; ``filler`` sentences (~12 words each) pad every paragraph on both sides
  of its facts, so facts of different paragraphs are ``2 * filler * 12`` words or more apart."""
  if segments < 2:
    raise ValueError("segments must be >= 2: the facts must be in different paragraphs")
  names = _names(rng, 2 * (distractors + 1), 3)
  entities, places = names[:distractors + 1], names[distractors + 1:]
  years = rng.sample(range(1500, 2000), distractors + 1)
  entity_seg, answer_seg = rng.sample(range(segments), 2)
  archive = [f"The archive of {e} is kept in {p}." for e, p in zip(entities, places)]
  founded = [f"{p} was founded in {y}." for p, y in zip(places, years)]
  rng.shuffle(archive)
  order = list(range(distractors + 1))
  rng.shuffle(order)
  paragraphs = []
  for s in range(segments):
    facts = archive if s == entity_seg else [founded[k] for k in order] if s == answer_seg else []
    paragraphs.append(" ".join(_filler(rng, filler) + facts + _filler(rng, filler)))
  text, spans = "", []
  for p in paragraphs:
    start = len(text) + (2 if text else 0)
    text = text + ("\n\n" if text else "") + p
    spans.append((start, len(text)))
  answer = str(years[0])
  needle = f"{places[0]} was founded in {answer}."
  answer_start = text.index(needle) + needle.index(answer)
  return ProbeArticle(title=f"probe-{index}", text=text,
                      question=f"When was the place that keeps the archive of {entities[0]} "
                               f"founded?",
                      answer=answer, answer_start=answer_start, segments=tuple(spans),
                      entity_segment=entity_seg, answer_segment=answer_seg)


def make_split(seed: int, count: int, **kwargs) -> list[ProbeArticle]:
  rng = random.Random(seed)
  return [make_article(rng, i, **kwargs) for i in range(count)]


def _dump_atomic(path: pathlib.Path, data: dict) -> None:
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
  with os.fdopen(fd, "w") as f:
    json.dump(data, f)
  os.replace(tmp, path)


def write_newsqa(path, articles: list[ProbeArticle], split: str) -> pathlib.Path:
  """NewsQA's combined JSON (what ``configs/newsqa.py`` reads)."""
  path = pathlib.Path(path)
  _dump_atomic(path, {"version": "1", "data": [{
      "storyId": a.title, "text": a.text, "type": split, "questions": [{
          "q": a.question, "consensus": {"s": a.answer_start, "e": a.answer_start + len(a.answer)},
          "isAnswerAbsent": 0, "isQuestionBad": 0,
          "answers": [{"sourcerAnswers": [{"s": a.answer_start,
                                           "e": a.answer_start + len(a.answer)}]}],
          "validatedAnswers": []}]} for a in articles]})
  return path


def write_squad(path, articles: list[ProbeArticle]) -> pathlib.Path:
  """SQuAD v1.1 JSON (what ``configs/squad1.py``'s sliding window reads)."""
  path = pathlib.Path(path)
  _dump_atomic(path, {"version": "1.1", "data": [{
      "title": a.title, "paragraphs": [{"context": a.text, "qas": [{
          "id": a.title, "question": a.question,
          "answers": [{"text": a.answer, "answer_start": a.answer_start}]}]}]}
      for a in articles]})
  return path


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", required=True)
  p.add_argument("--seed", type=int, default=0, help="train uses seed, eval seed + 1")
  p.add_argument("--train", type=int, default=600)
  p.add_argument("--eval", type=int, default=150)
  p.add_argument("--segments", type=int, default=4)
  p.add_argument("--distractors", type=int, default=3)
  p.add_argument("--filler", type=int, default=18, help="filler sentences each side of the facts")
  args = p.parse_args(argv)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  shape = dict(segments=args.segments, distractors=args.distractors, filler=args.filler)
  for split, seed, count in (("train", args.seed, args.train), ("dev", args.seed + 1, args.eval)):
    articles = make_split(seed, count, **shape)
    print(write_newsqa(out / f"newsqa-{split}.json", articles, split))
    print(write_squad(out / f"squad-{split}.json", articles))
  years = args.distractors + 1
  print(f"a window's expected exact match by guessing: {1 / years:.1%}")
  # QOPN's loss is -(log p_start + log p_end) (eq. 8): a model that finds the years but cannot
  # tell which one is asked for spreads each of the two over the years' tokens, ln(years) each.
  print(f"QOPN's training loss when it guesses among the years: 2 ln {years} = "
        f"{2 * math.log(years):.2f}; below it, it links the two paragraphs")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
