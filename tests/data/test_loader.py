"""The grain-based loader: reshuffles each epoch by seed, full fixed-shape training batches,
processes split each global batch, saved state resumes on the same batches, eval pads and
masks the last batch."""
import numpy as np
import pytest

from poi_jax.data.loader import TrainLoader, eval_batches


def _arrays(n=10):
  return {"x": np.arange(n), "y": np.arange(n) * 10}


def test_every_example_once_per_epoch_in_a_seeded_new_order():
  loader = TrainLoader(_arrays(), 5, seed=3)
  epoch1 = np.concatenate([next(loader)["x"] for _ in range(2)])
  epoch2 = np.concatenate([next(loader)["x"] for _ in range(2)])
  assert sorted(epoch1) == sorted(epoch2) == list(range(10))
  assert list(epoch1) != list(epoch2)
  again = TrainLoader(_arrays(), 5, seed=3)
  assert list(np.concatenate([next(again)["x"] for _ in range(2)])) == list(epoch1)
  other = TrainLoader(_arrays(), 5, seed=4)
  assert list(np.concatenate([next(other)["x"] for _ in range(2)])) != list(epoch1)


def test_batches_are_full_and_rows_stay_together():
  loader = TrainLoader(_arrays(10), 4, seed=0)  # 10 examples, batch 4: batches span epochs
  for _ in range(7):
    b = next(loader)
    assert b["x"].shape == (4,) and np.all(b["example_mask"] == 1.0)
    np.testing.assert_array_equal(b["y"], b["x"] * 10)


def test_processes_split_each_global_batch():
  one = TrainLoader(_arrays(), 4, seed=1)
  p0 = TrainLoader(_arrays(), 4, seed=1, process_index=0, process_count=2)
  p1 = TrainLoader(_arrays(), 4, seed=1, process_index=1, process_count=2)
  for _ in range(5):
    np.testing.assert_array_equal(np.concatenate([next(p0)["x"], next(p1)["x"]]),
                                  next(one)["x"])
  with pytest.raises(ValueError, match="not divisible by the 3 processes"):
    TrainLoader(_arrays(), 4, seed=1, process_index=0, process_count=3)


def test_saved_state_resumes_on_the_same_batches():
  loader = TrainLoader(_arrays(), 3, seed=7)
  for _ in range(4):
    next(loader)
  state = loader.get_state()
  want = [next(loader)["x"] for _ in range(5)]
  resumed = TrainLoader(_arrays(), 3, seed=7)
  resumed.set_state(state)
  for w in want:
    np.testing.assert_array_equal(next(resumed)["x"], w)
  assert loader.epoch(4) == pytest.approx(1.2)


def test_eval_batches_in_order_with_masked_padding():
  batches = list(eval_batches(_arrays(10), 4))
  assert [list(b["x"]) for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 8, 8]]
  assert list(batches[-1]["example_mask"]) == [1, 1, 0, 0]
  halves = [list(eval_batches(_arrays(10), 4, process_index=i, process_count=2))
            for i in range(2)]
  assert [list(b["x"]) for b in halves[1]] == [[2, 3], [6, 7], [8, 8]]
  assert list(halves[1][-1]["example_mask"]) == [0, 0]
