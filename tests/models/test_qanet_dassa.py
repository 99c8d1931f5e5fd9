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
