"""POS tags: the released alignment reproduces every example of the parity fixture."""
import json

import pytest

from poi_jax.data import pos
from tests.conftest import PARITY

FIXTURE = PARITY / "poi_pos_alignment.json"


def _examples():
  data = json.loads(FIXTURE.read_text())
  return [(name, i, ex, data["max_seq_length"]) for name, v in data["variants"].items()
          for i, ex in enumerate(v["examples"])]


def test_tag_map_equals_the_fixture():
  assert pos.POS_TAG_MAP == json.loads(FIXTURE.read_text())["pos_tag_map"]


@pytest.mark.parametrize("name,i,ex,max_len", _examples(),
                         ids=[f"{e[0]}-{e[1]}" for e in _examples()])
def test_original_alignment_reproduces_the_fixture(name, i, ex, max_len):
  q = pos.align_original(ex["question_subtokens"], ex["question_nltk_word_tags"])
  c = pos.align_original(ex["context_subtokens"], ex["context_nltk_word_tags"])
  assert q == ex["question_subtoken_tag_ids"]
  assert c == ex["context_subtoken_tag_ids"]
  tags, con_start, con_end = pos.original_layout(q, c, max_len)
  assert tags == ex["pos_tags"]
  assert (con_start, con_end) == (ex["con_start"], ex["con_end"])


@pytest.mark.parametrize("name,i,ex,max_len", _examples()[:6],
                         ids=[f"{e[0]}-{e[1]}" for e in _examples()[:6]])
def test_nltk_from_shared_data_gives_the_fixture_word_tags(name, i, ex, max_len):
  got = pos.tag_words(ex["question_text"])
  assert [list(t) for t in got] == ex["question_nltk_word_tags"]
  got = pos.tag_words(ex["context_text"])
  assert [list(t) for t in got] == ex["context_nltk_word_tags"]


def test_missing_nltk_resource_names_it(monkeypatch):
  import nltk
  monkeypatch.setattr(nltk.data, "path", ["/nonexistent"])
  with pytest.raises(pos.NltkResourceError, match="punkt_tab"):
    pos.tag_words("a test")
