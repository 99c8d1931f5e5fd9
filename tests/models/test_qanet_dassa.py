"""QanetDassa pieces: DASSA only in the configured modeling blocks, GloVe-format loading (frozen
vectors, clear errors), span decoding."""
from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from poi_jax.data.features import vocab as vocab_lib
from poi_jax.eval import spans
from poi_jax.models import qanet_dassa


def test_dassa_only_in_blocks_1_3_5_and_glove_vectors_are_frozen(tmp_path):
  glove = tmp_path / "vectors.txt"
  glove.write_text("the 0.1 0.2 0.3 0.4\ncat 1 2 3 4\n")
  vocab, vectors = vocab_lib.read_glove(str(glove), 4)
  assert vocab == {"the": 2, "cat": 3}
  np.testing.assert_array_equal(vectors[3], [1, 2, 3, 4])
  np.testing.assert_array_equal(vectors[:2], np.zeros((2, 4)))
  model = qanet_dassa.QanetDassa(vocab_size=4, word_dim=4, char_dim=4, char_filters=4,
                                 hidden=16, num_heads=4, num_semantic_labels=20,
                                 word_vectors=vectors, rngs=nnx.Rngs(0))
  assert [b.is_dassa for b in model._modeling_layer] == [False, True, False, True, False, True,
                                                         False]
  params = nnx.state(model, nnx.Param)
  assert "word_embedding" not in params  # not an nnx.Param: the optimizer never sees it
  assert isinstance(model.word_embedding, qanet_dassa.FrozenEmbedding)
  assert vocab_lib.WordIndexer(4, vocab)("The") == 2
  assert vocab_lib.WordIndexer(4, vocab)("dog") == vocab_lib.OOV_ID


def test_malformed_glove_line_names_file_and_line(tmp_path):
  glove = tmp_path / "bad.txt"
  glove.write_text("the 0.1 0.2 0.3 0.4\ncat 1 2 3\n")
  with pytest.raises(ValueError, match=r"bad.txt:2: expected a word and 4 numbers"):
    vocab_lib.read_glove(str(glove), 4)


def test_best_span_is_start_before_end_without_length_cap():
  start = np.array([[0.0, 5.0, 0.0, 0.0, 9.0]])
  end = np.array([[0.0, 0.0, 0.0, 8.0, 0.0]])
  # start 4 (9.0) has no end >= 4 better than end 3 with start 1: 5 + 8 = 13 > 9 + 0.
  np.testing.assert_array_equal(spans.best_spans(start, end), [[1, 3]])
  np.testing.assert_array_equal(spans.best_spans(start, end, max_length=2), [[4, 4]])
  assert vocab_lib.char_ids("ab", 6) == [259, 98, 99, 260, 0, 0]


def _padded_batch(rng, lc, lq, pad, views, heads_labels):
  """A batch of 2 passages of ``lc`` real tokens (the second ``lc - 3``), padded with ``pad``
  extra positions; views random on real tokens, 0 on padding."""
  t = lc + pad
  mask = np.zeros((2, t), np.int32)
  mask[0, :lc], mask[1, :lc - 3] = 1, 1
  words = np.where(mask > 0, rng.integers(2, 50, (2, t)), 0)
  chars = np.where(mask[..., None] > 0, rng.integers(1, 200, (2, t, 6)), 0)
  qwords = rng.integers(2, 50, (2, lq))
  qchars = rng.integers(1, 200, (2, lq, 6))
  labels = np.where(mask[:, None] > 0, rng.integers(0, heads_labels, (2, views, t)), 0)
  scopes = np.where(mask[:, None] > 0, rng.integers(0, 4, (2, views, t)), 0)
  return {"passage_words": words, "passage_chars": chars, "passage_mask": mask,
          "question_words": qwords, "question_chars": qchars,
          "question_mask": np.ones((2, lq), np.int32),
          "view_labels": labels.astype(np.int32), "view_scopes": scopes.astype(np.int32)}


def test_default_config_outputs_at_real_tokens_do_not_depend_on_padding():
  """The default ``model.dassa.mode`` (every variant) keeps padding out of the DASSA heads, so a
  split padded to 800 (training) or 1,200 (evaluation) tokens gives the same scores; the original's
  ``released`` mode does not (its "No" heads attend the padding)."""
  from configs import narrativeqa as nqa_config
  from poi_jax.data.features import views as views_lib
  from poi_jax.tasks import narrativeqa
  assert nqa_config.get_config().model.dassa.mode == "masked"
  diffs = {}
  for mode in ("masked", "released"):
    config = nqa_config.get_config("tiny")
    assert config.model.dassa.mode == "masked"  # the variant keeps the default
    with config.unlocked():
      config.model.dassa.mode = mode
    model = narrativeqa.build_model(config, nnx.Rngs(0))
    n_views = sum(k for _, k in views_lib.parse_heads(config.model.dassa.heads))
    lc = 12
    short = _padded_batch(np.random.default_rng(0), lc, 5, 2, n_views, 30)
    long = dict(short)
    for k in ("passage_words", "passage_chars", "passage_mask", "view_labels", "view_scopes"):
      width = [(0, 0)] * short[k].ndim
      width[2 if k.startswith("view") else 1] = (0, 9)  # 9 more padding positions
      long[k] = np.pad(short[k], width)
    a, b = model(short), model(long)
    real = short["passage_mask"] > 0
    diffs[mode] = max(
        float(np.abs(np.asarray(a[k])[real] - np.asarray(b[k])[:, :lc + 2][real]).max())
        for k in ("span_start_logits", "span_end_logits"))
  assert diffs["masked"] < 1e-5, diffs
  assert diffs["released"] > 1e-3, diffs  # the test can fail: the original's mode does differ
