"""Length buckets: each batch padded to the smallest bucket that holds its longest window.

Every window is featurized to ``data.max_seq_length``; most hold fewer real tokens (the SQuAD
sample at 256 tokens: 40% of the computed positions are padding). A batch whose longest window
has ``n`` real tokens is cut to the smallest bucket ``>= n`` before the model sees it, so the
model computes fewer positions while the step keeps a few static shapes (one compilation per
bucket, kept by the compilation cache).

Trimming is exact where nothing the model computes on a real position depends on the positions
past the window's length: attention masks them, position ids count from 0, POI-Net's domains are
inside the real tokens. A task opts in by naming its arrays with a length axis (the last axis;
``Task.length_keys``) and the outputs with one (``Task.length_outputs``); its tests check that
outputs on real positions and the decoded predictions are the same with and without buckets.
Outputs are padded back to ``max_seq_length`` with their fill value (-inf for span logits), and
the span decoder never takes a position past a window's length (`window_lengths`), so a
prediction never depends on how much its window was padded.

* Evaluation and prediction (`sorted_batches`): windows ordered by length (stably), cut into
  batches, each padded to the bucket of its longest window; the outputs are put back in the
  windows' order before decoding.
* Training (`train_plan`): the shuffled stream of windows, cut into groups of ``window_batches``
  global batches; each group sorted by length, cut into batches, and the batches' order shuffled
  (tf.data's ``bucket_by_sequence_length`` with a shuffle buffer of k batches). A pure function
  of (seed, batch index, lengths): every process computes the same plan, hence the same bucket
  at the same step, and reads only its rows.

``data.length_buckets``: ``auto`` (`AUTO_FRACTIONS` of ``max_seq_length``, the eighths above 256
tokens), ``off`` (one bucket, ``max_seq_length``: today's shapes, untouched batches) or a list
such as ``128,256,384`` (``max_seq_length`` is always the last bucket).
"""
from __future__ import annotations

from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

# The default buckets: a quarter, a half, three quarters and all of max_seq_length (rounded up to
# a multiple of 8), and above 256 tokens the eighths (48, 96, ..., 384 at 384: the quarters and
# the lengths between, so never more padding than the quarters). Chosen from the padding share
# and the speed they give on the SQuAD sample (bench/buckets.py, bench/reader_peers.py;
# docs/performance.md "Length buckets"): at 384 the quarters leave a quarter of the computed
# positions padding (the eighths: a tenth), and the Reader runs 1.25x HuggingFace's pipeline
# with the quarters, 1.48x with the eighths (1.94x since its forward compiles without XLA's
# YNNPACK fusions: poi_jax/runtime.py).
AUTO_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
AUTO_FINE_FRACTIONS = tuple(k / 8 for k in range(1, 9))
AUTO_FINE_ABOVE = 256
OFF = "off"
AUTO = "auto"


def resolve(spec, max_seq_length: int) -> tuple[int, ...]:
  """The bucket lengths (ascending, the last ``max_seq_length``) of ``data.length_buckets``."""
  max_seq_length = int(max_seq_length)
  if spec is None or (isinstance(spec, str) and spec.strip().lower() == OFF):
    return (max_seq_length,)
  if isinstance(spec, str) and spec.strip().lower() == AUTO:
    fractions = AUTO_FINE_FRACTIONS if max_seq_length > AUTO_FINE_ABOVE else AUTO_FRACTIONS
    lengths = [-(-int(np.ceil(f * max_seq_length)) // 8) * 8 for f in fractions]
  else:
    items = spec.replace(" ", "").split(",") if isinstance(spec, str) else list(spec)
    try:
      lengths = [int(x) for x in items if str(x) != ""]
    except ValueError:
      raise ValueError(f"data.length_buckets={spec!r}: expected 'auto', 'off' or lengths such as "
                       f"'128,256'") from None
    bad = [x for x in lengths if x <= 0]
    if bad:
      raise ValueError(f"data.length_buckets={spec!r}: bucket lengths must be positive, got "
                       f"{bad}")
  return tuple(sorted({x for x in lengths if x < max_seq_length} | {max_seq_length}))


def enabled(buckets: Sequence[int]) -> bool:
  return len(buckets) > 1


def window_lengths(arrays: Mapping[str, np.ndarray], key: str = "attention_mask") -> np.ndarray:
  """Real tokens of each window ``(N,)`` int32: one past its last nonzero ``key`` position (the
  longest option's for ``(N, C, L)`` arrays); ``(N,)`` zeros where there is no ``key``."""
  mask = arrays.get(key)
  if mask is None:
    n = len(next(iter(arrays.values()))) if arrays else 0
    return np.zeros(n, np.int32)
  mask = np.asarray(mask) != 0
  last = mask.shape[-1] - np.argmax(mask[..., ::-1], axis=-1)
  last = np.where(mask.any(axis=-1), last, 0)
  while last.ndim > 1:
    last = last.max(axis=-1)
  return last.astype(np.int32)


def bucket_of(length: int, buckets: Sequence[int]) -> int:
  """The smallest bucket holding ``length`` tokens (the last one for anything longer)."""
  i = int(np.searchsorted(np.asarray(buckets), length, side="left"))
  return int(buckets[min(i, len(buckets) - 1)])


def trim(batch: Mapping[str, np.ndarray], length: int, keys: Iterable[str]) -> dict:
  """``batch`` with the arrays named in ``keys`` cut to ``length`` positions (last axis)."""
  keys = set(keys)
  return {k: (v[..., :length] if k in keys else v) for k, v in batch.items()}


def pad_outputs(outputs: Mapping[str, np.ndarray], full: int,
                fills: Mapping[str, float]) -> dict:
  """The model's outputs with a length axis (last; named in ``fills``) padded back to ``full``
  positions with their fill value."""
  out = {}
  for k, v in outputs.items():
    v = np.asarray(v)
    if k in fills and v.shape[-1] < full:
      pad = np.full(v.shape[:-1] + (full - v.shape[-1],), fills[k], v.dtype)
      v = np.concatenate([v, pad], axis=-1)
    out[k] = v
  return out


def sorted_batches(lengths: np.ndarray, batch_size: int,
                   buckets: Sequence[int]) -> Iterator[tuple[np.ndarray, int]]:
  """``(window indices, bucket length)`` of each batch of an evaluation: windows ordered by
  length (stable), cut into batches of at most ``batch_size``; the last one may be short."""
  order = np.argsort(np.asarray(lengths), kind="stable")
  for start in range(0, len(order), batch_size):
    idx = order[start:start + batch_size]
    yield idx, bucket_of(int(np.asarray(lengths)[idx].max()), buckets)


# ---- training ------------------------------------------------------------------------------------
def _epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
  return np.random.default_rng([int(seed), int(epoch), 0x6275636b]).permutation(n)


def train_group(lengths: np.ndarray, batch_size: int, *, seed: int, group: int,
                window_batches: int) -> np.ndarray:
  """The global batches ``[group * k, (group + 1) * k)`` (``k = window_batches``) of the training
  plan: ``(k, batch_size)`` window indices. The stream is the concatenation of per-epoch
  permutations of the windows (batches span an epoch boundary, so every batch is full, as
  without buckets); a group of ``k * batch_size`` consecutive windows is sorted by length, cut
  into ``k`` batches, and the batches' order shuffled."""
  n = len(lengths)
  k = int(window_batches)
  first = group * k * batch_size
  positions = np.arange(first, first + k * batch_size, dtype=np.int64)
  epochs = positions // n
  idx = np.empty(len(positions), np.int64)
  for epoch in np.unique(epochs):
    sel = epochs == epoch
    idx[sel] = _epoch_permutation(seed, int(epoch), n)[positions[sel] % n]
  idx = idx[np.argsort(np.asarray(lengths)[idx], kind="stable")]
  batches = idx.reshape(k, batch_size)
  order = np.random.default_rng([int(seed), int(group), 0x6f72646572]).permutation(k)
  return batches[order]


def train_bucket_counts(lengths: np.ndarray, batch_size: int, buckets: Sequence[int], *,
                        seed: int, window_batches: int, num_batches: int) -> dict[int, int]:
  """How many of the first ``num_batches`` training batches fall in each bucket."""
  counts: dict[int, int] = {}
  for g in range(-(-num_batches // window_batches)):
    for j, b in enumerate(train_group(lengths, batch_size, seed=seed, group=g,
                                      window_batches=window_batches)):
      if g * window_batches + j >= num_batches:
        break
      L = bucket_of(int(lengths[b].max()), buckets)
      counts[L] = counts.get(L, 0) + 1
  return dict(sorted(counts.items()))


def padding_share(lengths: np.ndarray, batches: Iterable[tuple[np.ndarray, int]]) -> float:
  """Share of computed positions that are padding, over ``(indices, length)`` batches."""
  real = computed = 0
  for idx, length in batches:
    real += int(np.asarray(lengths)[idx].sum())
    computed += len(idx) * int(length)
  return 1.0 - real / max(computed, 1)
