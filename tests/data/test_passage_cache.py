"""Featurising with a `PassageCache` (array lookups in per-text analyses, what the Reader and the
server use) gives exactly the per-token path's features, on the SQuAD sample with two tokenizers
(MiniLM's WordPiece, and a byte-level BPE whose offsets keep the space before a word), training
labels and both POS casings included; and the cache is a bounded LRU."""
import numpy as np
import pytest
import transformers

from poi_jax.data.features import passages
from poi_jax.data.features.extractive import build_extractive_features
from poi_jax.data.readers import read_squad
from tests.data.test_roberta_layout import _roberta_tokenizer

pytestmark = pytest.mark.required  # MiniLM's vocabulary (tests/conftest.py: minilm_dir)


@pytest.fixture(scope="module")
def examples(squad_file):
  return list(read_squad(squad_file))[:120]


def _assert_same(a, b):
  assert a.arrays.keys() == b.arrays.keys()
  for k in a.arrays:
    np.testing.assert_array_equal(a.arrays[k], b.arrays[k], err_msg=k)
  np.testing.assert_array_equal(a.meta["offsets"], b.meta["offsets"])


@pytest.mark.parametrize("is_training,lowercase", [(True, False), (False, True)])
def test_analysed_features_equal_the_per_token_path_wordpiece(minilm_dir, examples, is_training,
                                                               lowercase):
  tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
  options = dict(max_seq_length=96, doc_stride=32, max_query_length=16, is_training=is_training,
                 pos_lowercase=lowercase)
  cache = passages.PassageCache(8)
  want = build_extractive_features(examples, tok, **options)
  got = build_extractive_features(examples, tok, **options, passages=cache)
  _assert_same(got, want)
  assert (want.arrays["pos_tags"] > 0).any() and (want.arrays["start_positions"] > 0).any()
  assert cache.hits > cache.misses > 0  # the sample asks several questions a paragraph


def test_analysed_features_equal_the_per_token_path_untrimmed_bpe(examples):
  texts = sorted({e.context for e in examples}) + [e.question for e in examples]
  tok = _roberta_tokenizer(texts, trim_offsets=False)
  options = dict(max_seq_length=128, doc_stride=48, max_query_length=24, is_training=True)
  got = build_extractive_features(examples[:120], tok, **options,
                                  passages=passages.PassageCache(0))
  _assert_same(got, build_extractive_features(examples[:120], tok, **options))
  got = build_extractive_features(examples[:40], tok, **options, with_pos=False,
                                  passages=passages.PassageCache(4))
  _assert_same(got, build_extractive_features(examples[:40], tok, **options, with_pos=False))


def test_trim_and_tags_of_spaces_and_unknown_words():
  text = "  Paris  is\tbig . "
  a = passages.analyse(text)
  s, e = a.trim(np.array([0, 0, 7, 11, 17]), np.array([2, 7, 11, 12, 18]))
  # all-space spans collapse onto their end; others lose the spaces around them
  assert s.tolist() == [2, 2, 9, 12, 18] and e.tolist() == [2, 7, 11, 12, 18]
  tags = a.tags(s, e)
  from poi_jax.data import pos
  assert tags.tolist() == [pos.OTHER_ID, pos.tag_id("NNP"), pos.tag_id("VBZ"), pos.OTHER_ID,
                           pos.OTHER_ID]


def test_the_cache_keeps_the_most_recent_passages_only():
  cache = passages.PassageCache(2)
  for text in ("one.", "two.", "one.", "three."):
    cache.get(text, with_pos=False)
  assert (cache.hits, cache.misses, len(cache)) == (1, 3, 2)
  cache.get("two.", with_pos=False)  # evicted: the least recently used
  assert cache.misses == 4
  off = passages.PassageCache(0)
  off.get("one.", with_pos=False)
  off.get("one.", with_pos=False)
  assert (off.hits, off.misses, len(off)) == (0, 2, 0)
  with pytest.raises(ValueError, match="must be >= 0"):
    passages.PassageCache(-1)
