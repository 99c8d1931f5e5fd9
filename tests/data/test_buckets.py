"""Length buckets (`poi_jax.data.buckets`, `poi_jax.data.loader.BucketedTrainLoader`): the
bucket sets, window lengths, the evaluation's order and its inverse, and the training plan:
a shuffled stream whose batches hold windows of similar length, the same bucket on every
process at every step, resumable from ``{"next_index": k}``. That the model's outputs do not
change: tests/test_reader.py (extractive), tests/tasks (per task)."""
from __future__ import annotations

import numpy as np
import pytest

from poi_jax.data import buckets
from poi_jax.data.loader import BucketedTrainLoader, TrainLoader


def test_bucket_sets():
  assert buckets.resolve("auto", 256) == (64, 128, 192, 256)
  assert buckets.resolve("auto", 192) == (48, 96, 144, 192)
  # Above 256 tokens the eighths: the quarters and the lengths between them.
  assert buckets.resolve("auto", 384) == (48, 96, 144, 192, 240, 288, 336, 384)
  assert buckets.resolve("auto", 512) == tuple(range(64, 513, 64))
  assert set(buckets.resolve("auto", 300)) >= {80, 152, 232, 300}  # 300's quarters, 8-rounded
  assert buckets.resolve("auto", 100) == (32, 56, 80, 100)  # multiples of 8, then the max
  assert buckets.resolve("off", 384) == (384,)
  assert buckets.resolve("200, 100,999", 384) == (100, 200, 384)  # sorted, max added, > max out
  assert not buckets.enabled(buckets.resolve("off", 384))
  for bad in ("fast", "0,128", "12a"):
    with pytest.raises(ValueError, match="data.length_buckets"):
      buckets.resolve(bad, 384)


def test_window_lengths_are_one_past_the_last_real_token():
  mask = np.zeros((4, 10), np.int32)
  mask[0, :3] = 1
  mask[1, :10] = 1
  mask[2, [0, 1, 5]] = 1  # a hole: still one past the last real position
  assert buckets.window_lengths({"attention_mask": mask}).tolist() == [3, 10, 6, 0]
  choice = np.stack([mask, mask[::-1]], axis=1)  # (N, C, L): the longest option's
  assert buckets.window_lengths({"attention_mask": choice}).tolist() == [3, 10, 10, 3]
  assert buckets.window_lengths({"input_ids": mask}).tolist() == [0, 0, 0, 0]


def test_trim_and_pad_back():
  batch = {"input_ids": np.arange(12).reshape(2, 6), "con_start": np.array([1, 2])}
  cut = buckets.trim(batch, 4, ("input_ids",))
  assert cut["input_ids"].shape == (2, 4) and cut["con_start"].tolist() == [1, 2]
  out = buckets.pad_outputs({"start_logits": np.ones((2, 4), np.float32),
                             "logits": np.ones((2, 3))}, 6, {"start_logits": -np.inf})
  assert out["start_logits"].shape == (2, 6) and np.isneginf(out["start_logits"][:, 4:]).all()
  assert out["logits"].shape == (2, 3)


def test_evaluation_batches_are_ordered_by_length_and_cover_every_window_once():
  rng = np.random.default_rng(0)
  lengths = rng.integers(5, 257, 100)
  plan = list(buckets.sorted_batches(lengths, 16, (64, 128, 192, 256)))
  order = np.concatenate([idx for idx, _ in plan])
  assert sorted(order.tolist()) == list(range(100))
  assert all(len(idx) == 16 for idx, _ in plan[:-1])
  for idx, length in plan:
    assert lengths[idx].max() <= length
    assert length == min(b for b in (64, 128, 192, 256) if b >= lengths[idx].max())
  share = buckets.padding_share(lengths, plan)
  assert share < buckets.padding_share(lengths, [(np.arange(100), 256)])


def _rows(n, width=32, seed=0):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(3, width + 1, n)
  mask = (np.arange(width)[None] < lengths[:, None]).astype(np.int32)
  return {"input_ids": mask * (np.arange(n)[:, None] + 1), "attention_mask": mask,
          "row": np.arange(n)}, lengths


def _loader(arrays, lengths, **kw):
  return BucketedTrainLoader(arrays, kw.pop("batch_size", 8), seed=kw.pop("seed", 3),
                             lengths=lengths, buckets=(8, 16, 24, 32),
                             length_keys=("input_ids", "attention_mask"),
                             window_batches=kw.pop("window_batches", 4), **kw)


def test_training_batches_are_full_cut_to_their_bucket_and_shuffled():
  arrays, lengths = _rows(96)
  loader = _loader(arrays, lengths)
  batches = [next(loader) for _ in range(24)]  # two epochs
  for b in batches:
    assert len(b["row"]) == 8 and b["example_mask"].sum() == 8
    width = b["input_ids"].shape[1]
    assert width in (8, 16, 24, 32) and lengths[b["row"]].max() <= width
    assert width == 32 or lengths[b["row"]].max() > width - 8  # the smallest that holds them
  for epoch in (batches[:12], batches[12:]):  # each epoch: every window once
    assert sorted(np.concatenate([b["row"] for b in epoch]).tolist()) == list(range(96))
  assert len({b["input_ids"].shape[1] for b in batches}) >= 3
  # Shuffled: another seed gives other batches, and the buckets do not come in sorted order.
  other = _loader(arrays, lengths, seed=4)
  assert any(not np.array_equal(next(other)["row"], b["row"]) for b in batches[:4])
  widths = [b["input_ids"].shape[1] for b in batches]
  assert widths != sorted(widths)


def test_every_process_gets_the_same_bucket_and_its_rows():
  arrays, lengths = _rows(100)
  one = _loader(arrays, lengths)
  two = [_loader(arrays, lengths, process_index=i, process_count=2) for i in range(2)]
  for _ in range(30):
    whole, parts = next(one), [next(p) for p in two]
    assert parts[0]["input_ids"].shape == parts[1]["input_ids"].shape == \
        (4, whole["input_ids"].shape[1])
    np.testing.assert_array_equal(np.concatenate([p["row"] for p in parts]), whole["row"])


def test_resuming_from_the_state_gives_the_uninterrupted_batches():
  arrays, lengths = _rows(50)
  straight = _loader(arrays, lengths)
  want = [next(straight)["row"] for _ in range(20)]
  first = _loader(arrays, lengths)
  for _ in range(7):
    next(first)
  state = first.get_state()
  assert state == {"next_index": 7}
  resumed = _loader(arrays, lengths)
  resumed.set_state(state)
  for k in range(7, 20):
    np.testing.assert_array_equal(next(resumed)["row"], want[k])


def test_off_is_one_bucket_and_the_loader_of_today():
  """``data.length_buckets=off``: the task has one bucket, so the engine keeps `TrainLoader`
  (grain's shuffle, every batch at max_seq_length) and evaluation its in-order batches."""
  from configs import squad2
  from poi_jax.tasks import get_task
  config = squad2.get_config("tiny")
  task = get_task("squad2")
  assert task.buckets(config) == (32, 64, 96, 128)
  with config.unlocked():
    config.data.length_buckets = "off"
  assert task.buckets(config) == (128,) and not buckets.enabled(task.buckets(config))
  arrays, _ = _rows(40)
  batch = next(TrainLoader(arrays, 8, seed=0))
  assert batch["input_ids"].shape == (8, 32)  # untouched width
