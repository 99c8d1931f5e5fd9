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
  got = pos.tag_words(ex["question_text"], lowercase=True)
  assert [list(t) for t in got] == ex["question_nltk_word_tags"]
  got = pos.tag_words(ex["context_text"], lowercase=True)
  assert [list(t) for t in got] == ex["context_nltk_word_tags"]


def test_missing_nltk_resource_names_it_and_nltk_data_when_it_cannot_be_fetched(monkeypatch):
  import nltk
  monkeypatch.setattr(nltk.data, "path", ["/nonexistent"])
  monkeypatch.setattr(pos, "_resources_found_in", None)
  monkeypatch.setattr(pos, "_download", lambda packages: "<urlopen error offline>")
  with pytest.raises(pos.NltkResourceError) as e:
    pos.ensure_nltk_resources()
  line = str(e.value)
  assert "'punkt_tab' not found" in line and "<urlopen error offline>" in line
  assert "set NLTK_DATA" in line and "\n" not in line
  monkeypatch.setenv(pos.DOWNLOAD_ENV, "0")  # never fetched: said so
  monkeypatch.setattr(pos, "_download", lambda packages: pytest.fail("fetched"))
  with pytest.raises(pos.NltkResourceError, match=f"not fetched \\({pos.DOWNLOAD_ENV}=0\\)"):
    pos.ensure_nltk_resources()


@pytest.mark.required
def test_a_missing_resource_is_fetched_on_first_use_with_nltks_downloader(monkeypatch, tmp_path,
                                                                          data_dir):
  """NLTK's own mechanism (`nltk.download` into its default directory), here served from the
  offline copy instead of NLTK's data host."""
  import shutil

  import nltk
  copy = data_dir / "nltk_data"
  fetched = []

  def download(package, download_dir, **kwargs):
    folder = {"punkt_tab": "tokenizers", "averaged_perceptron_tagger_eng": "taggers"}[package]
    shutil.copytree(copy / folder / package, tmp_path / folder / package)
    fetched.append((package, download_dir))
    return True

  monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
  monkeypatch.setattr(nltk.downloader.Downloader, "default_download_dir",
                      lambda self: str(tmp_path))
  monkeypatch.setattr(nltk, "download", download)
  monkeypatch.setattr(pos, "_resources_found_in", None)
  monkeypatch.delenv(pos.DOWNLOAD_ENV, raising=False)
  pos.ensure_nltk_resources()
  assert fetched == [("punkt_tab", str(tmp_path)), ("averaged_perceptron_tagger_eng",
                                                     str(tmp_path))]
  pos.ensure_nltk_resources()  # found now: nothing fetched again
  assert len(fetched) == 2
  assert dict(pos.tag_words.__wrapped__("Paris is big."))["Paris"] == "NNP"


SENTENCE = "The Normans gave their name to Normandy, a region in France."


def test_default_tags_the_cased_text_and_keeps_proper_nouns():
  """NLTK's perceptron reads case: on the lowercased text (the released pipeline) the proper
  nouns of the sentence lose NNP; the default (cased) keeps them."""
  cased = dict(pos.tag_words(SENTENCE))
  assert cased["Normandy"] == "NNP" and cased["France"] == "NNP"
  lower = dict(pos.tag_words(SENTENCE, lowercase=True))
  assert lower["normandy"] != "NNP" and lower["france"] != "NNP"


def test_pos_lowercase_reaches_the_features_and_their_cache_key():
  """``data.pos_lowercase`` (default False) is a feature option of both tasks (so it is in the
  cache key) and changes the tags of the built features."""
  from configs import dream, squad2
  from poi_jax.data.features import extractive, multiple_choice
  from poi_jax.data.records import SquadExample
  from poi_jax.models.encoders.load import load_tokenizer, resolve_checkpoint
  from poi_jax.tasks import choice, squad
  config = squad2.get_config("tiny")
  assert config.data.pos_lowercase is False
  assert squad.feature_options(config, True)["pos_lowercase"] is False
  assert choice.feature_options(dream.get_config("tiny"))["pos_lowercase"] is False
  assert extractive.FEATURE_VERSION >= 3 and multiple_choice.FEATURE_VERSION >= 3  # rebuilt
  tokenizer = load_tokenizer(resolve_checkpoint("minilm"))
  ex = SquadExample("q", "Where is Normandy?", SENTENCE, [], True, [], "", "mem")
  tags = {}
  for lowercase in (False, True):
    f = extractive.build_extractive_features([ex], tokenizer, max_seq_length=48, doc_stride=8,
                                             max_query_length=16, is_training=False,
                                             pos_lowercase=lowercase)
    ids = f.arrays["input_ids"][0]
    tags[lowercase] = {t: int(f.arrays["pos_tags"][0, i]) for i, t in
                       enumerate(tokenizer.convert_ids_to_tokens(list(ids))) if t == "france"}
  assert tags[False]["france"] == pos.tag_id("NNP")
  assert tags[True]["france"] != pos.tag_id("NNP")
