"""`decode_squad`'s candidates, computed as one grid per window, are the nested loop's: same
candidates, same order (ties included), same float scores."""
import numpy as np

from poi_jax.data.features.base import Features
from poi_jax.data.records import SquadExample
from poi_jax.eval import spans


def _loop_candidates(s, e, off, n_best_size, max_answer_length):
  """The decoder's former nested loop (the reference)."""
  out = []
  for i in np.argsort(s)[::-1][:n_best_size]:
    for j in np.argsort(e)[::-1][:n_best_size]:
      if off[i, 0] < 0 or off[j, 0] < 0 or j < i or j - i + 1 > max_answer_length:
        continue
      out.append((float(s[i] + e[j]), int(off[i, 0]), int(off[j, 1]), float(s[i]), float(e[j])))
  return out


def test_grid_candidates_equal_the_nested_loop_ties_and_dtypes_included():
  rng = np.random.default_rng(0)
  length = 48
  off = np.full((length, 2), -1, np.int32)
  off[10:40, 0] = np.arange(30) * 4
  off[10:40, 1] = np.arange(30) * 4 + 3
  for trial in range(30):
    dtype = np.float32 if trial % 2 else np.float64
    s = rng.normal(size=length).astype(dtype)
    e = rng.normal(size=length).astype(dtype)
    if trial % 3 == 0:  # ties: rounded logits, many equal values
      s, e = np.round(s, 0), np.round(e, 0)
    for n_best, max_len in ((20, 30), (5, 3), (48, 48)):
      got = spans._window_candidates(s, e, off, n_best, max_len)
      want = _loop_candidates(s, e, off, n_best, max_len)
      assert got == want
      assert all(type(x) is float for c in got for x in (c[0], c[3], c[4]))
      assert all(type(x) is int for c in got for x in (c[1], c[2]))


def test_decode_answers_from_the_grid():
  context = "The Normans were in Normandy in the 10th century."
  ex = SquadExample("q", "Where?", context, [], False, [], "", "<test>")
  off = np.full((1, 8, 2), -1, np.int32)
  words = [(0, 3), (4, 11), (12, 16), (17, 19), (20, 28)]
  off[0, 3:8] = words
  s = np.full((1, 8), -5.0, np.float32)
  e = np.full((1, 8), -5.0, np.float32)
  s[0, 7], e[0, 7], s[0, 0], e[0, 0] = 4.0, 3.0, 1.0, 1.0
  f = Features({"example_index": np.zeros(1, np.int32)}, {"offsets": off})
  preds, nbest, odds = spans.decode_squad([ex], f, s, e, n_best_size=3, with_offsets=True)
  assert preds == {"q": "Normandy"}
  assert nbest["q"][0]["start"] == 20 and nbest["q"][0]["end"] == 28
  assert odds["q"] == 2.0 - 7.0
