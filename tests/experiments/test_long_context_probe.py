"""experiments/long_context_probe.py: seeded, the answer right, and needing two segments: no segment
holds both the question's entity and the answer, and the two lie farther apart than any window."""
import re

import pytest

from experiments import long_context_probe as probe
from poi_jax.data import readers
from poi_jax.data.readers import newsqa

WINDOW_TOKENS = 256  # the probe's window: a word is at least one word piece, so words bound it


@pytest.fixture(scope="module")
def articles():
  return probe.make_split(0, 40, segments=4, distractors=3)


def test_same_seed_same_articles_other_seed_others():
  assert probe.make_split(3, 5) == probe.make_split(3, 5)
  assert probe.make_split(3, 5) != probe.make_split(4, 5)


def test_the_answer_needs_a_fact_from_another_segment(articles):
  for a in articles:
    entity = re.search(r"archive of (\w+)", a.question).group(1)
    assert a.text[a.answer_start:a.answer_start + len(a.answer)] == a.answer
    segs = [a.text[s:e] for s, e in a.segments]
    holding_entity = [k for k, s in enumerate(segs) if re.search(rf"\b{entity}\b", s)]
    holding_answer = [k for k, s in enumerate(segs) if re.search(rf"\b{a.answer}\b", s)]
    assert holding_entity == [a.entity_segment] and holding_answer == [a.answer_segment]
    assert a.entity_segment != a.answer_segment
    # The link: the entity's place is named in both segments, and nothing else ties them.
    place = re.search(rf"archive of {entity} is kept in (\w+)\.", segs[a.entity_segment]).group(1)
    assert re.search(rf"\b{place} was founded in {a.answer}\.", segs[a.answer_segment])
    # No window sees both: more words between the mention and the answer than a window has.
    mention = a.text.index(f"archive of {entity} ")
    lo, hi = sorted((mention, a.answer_start))
    assert len(a.text[lo:hi].split()) > WINDOW_TOKENS


def test_a_window_on_the_answer_segment_can_only_guess(articles):
  for a in articles:
    founding = a.text[slice(*a.segments[a.answer_segment])]
    years = re.findall(r"was founded in (\d{4})\.", founding)
    assert len(years) == 4 and len(set(years)) == 4 and a.answer in years  # 3 distractors
    assert "archive" not in founding


def test_files_read_back_through_the_project_readers(tmp_path, articles):
  news = probe.write_newsqa(tmp_path / "newsqa.json", articles, "dev")
  squad = probe.write_squad(tmp_path / "squad.json", articles)
  for records in (list(newsqa.read_newsqa(str(news), "dev")),
                  list(readers.read_squad(str(squad)))):
    assert len(records) == len(articles)
    for r, a in zip(records, articles):
      assert r.question == a.question and r.context == a.text
      assert r.answers[0]["text"] == a.answer and r.answers[0]["answer_start"] == a.answer_start
