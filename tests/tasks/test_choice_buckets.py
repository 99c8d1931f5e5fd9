"""Length buckets for multiple choice (RACE, DREAM): a batch of ``(B, options, L)`` sequences is
cut to the bucket of its longest option. POI-Net (both co-attention variants), the plain encoder
and DUMA ``paper`` give the same logits cut or not (float32 tolerance) through the Reader's path
(ordered by length, cut, put back in order); DUMA ``released``, whose pooling averages over every
position, padding included, is never bucketed, and the test shows why: cut, its logits move."""
from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from configs import dream as dream_config
from poi_jax import Reader, tasks
from poi_jax.data import buckets, readers
from poi_jax.models import encoders

HEADS = {
    "poi-paper": {"model.head": "poi", "model.coattention.variant": "paper"},
    "poi-released": {"model.head": "poi", "model.coattention.variant": "released"},
    "none": {"model.head": "none", "model.pos_embedding": False},
    "duma-paper": {"model.head": "duma", "model.duma.variant": "paper"},
}
RELEASED = {"model.head": "duma", "model.duma.variant": "released", "model.duma.num_layers": 1,
            "model.duma.output_projection": None}


def _config(fields, buckets_spec):
  c = dream_config.get_config("tiny")
  with c.unlocked():
    c.data.max_seq_length = 256
    c.data.length_buckets = buckets_spec
    c.model.dropout = 0.0
    for key, value in fields.items():
      section, *rest = key.split(".")
      node = c[section]
      for name in rest[:-1]:
        node = node[name]
      node[rest[-1]] = value
  return c


@pytest.fixture(scope="module")
def records(data_dir):
  """DREAM dev questions of different lengths (some batches land in each bucket)."""
  every = list(readers.read_dream(str(data_dir / "dream" / "dev.json")))
  by_len = sorted(every, key=lambda r: len(r.passage))
  picks = np.linspace(0, len(by_len) // 2, 8).astype(int)  # short to middling dialogues
  return [by_len[i] for i in picks]


@pytest.fixture(scope="module")
def tokenizer():
  return encoders.load.load_tokenizer(encoders.resolve_checkpoint("minilm"))


def _readers(fields, tokenizer):
  off = _config(fields, "off")
  task = tasks.get_task(off.task)
  model = task.build_model(off, nnx.Rngs(0))  # random weights: parity, not accuracy
  make = lambda c: Reader(c, task, model, tokenizer=tokenizer, step=0, null_threshold=0.0,
                          batch_size=4)
  return make(off), make(_config(fields, "auto")), task


@pytest.fixture(scope="module")
def features(records, tokenizer):
  """The records' option sequences (with POS tags), featurized once for every head."""
  c = _config(HEADS["poi-paper"], "auto")
  return tasks.get_task(c.task).featurize(records, tokenizer, c, is_training=False)


def _logits(reader, features):
  return np.asarray(reader.predict(features)["logits"], np.float32)


# The default suite checks POI-Net (the configs' default head); DUMA paper, the released
# co-attention and the plain encoder run with `-m slow` (a minute of compilation on 2 cores).
# The default suite's DUMA check is the layer-level one below (paper: unchanged when cut).
@pytest.mark.parametrize("head", [pytest.param(h, marks=() if h == "poi-paper"
                                               else (pytest.mark.slow,)) for h in sorted(HEADS)])
def test_bucketed_choice_logits_equal_full_length(head, features, tokenizer):
  off, on, _ = _readers(HEADS[head], tokenizer)
  assert off.buckets == (256,) and on.buckets == (64, 128, 192, 256)
  lengths = buckets.window_lengths(features.arrays)
  used = {buckets.bucket_of(int(lengths[i].max()), on.buckets)
          for i, _ in buckets.sorted_batches(lengths, on.batch_size, on.buckets)}
  assert len(used & {64, 128, 192}) >= 1, (used, lengths)  # some batches were cut
  a, b = _logits(off, features), _logits(on, features)
  np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
  assert on.compiled_shapes > off.compiled_shapes


def test_duma_released_is_not_bucketed(features, tokenizer):
  off, on, _ = _readers(RELEASED, tokenizer)
  assert on.buckets == (256,)  # data.length_buckets=auto, but the model opts out
  np.testing.assert_array_equal(_logits(on, features), _logits(off, features))


@pytest.mark.parametrize("variant, moves", [("released", True), ("paper", False)])
def test_why_released_opts_out_its_pooling_counts_the_padding(variant, moves):
  """The DUMA layer on the same 40 real positions, padded to 256 or cut to 64: ``released``'s
  fused vector changes by more than 10% (its mean runs over every position), ``paper``'s not at
  all (float32)."""
  from poi_jax.layers import duma
  layer = duma.Duma(32, 4, variant=variant, num_layers=1, rngs=nnx.Rngs(0))
  rng = np.random.default_rng(0)
  h = np.zeros((2, 256, 32), np.float32)
  h[:, :40] = 100 * rng.normal(size=(2, 40, 32))  # large: peaked attention, as once trained
  p_end, q_start, q_end = np.array([20, 25]), np.array([22, 27]), np.array([38, 39])
  full = np.asarray(layer(h, p_end, q_start, q_end))
  cut = np.asarray(layer(h[:, :64], p_end, q_start, q_end))
  change = np.abs(cut - full).max() / np.abs(full).max()
  if moves:
    assert change > 0.1, change
  else:
    assert change < 1e-5, change
