"""Batches of features for training and evaluation, with grain.

Rows come from a *row source*: feature shards on disk (`poi_jax.data.shards.ShardRows`, grain's
``ArrayRecordDataSource``: a batch reads only its rows, so memory holds batches, not the corpus)
or in-memory arrays (`ArrayRows`). Either way the batches are the same.

* Training: ``grain.MapDataset`` over example indices, shuffled by ``seed`` (a new permutation
  each epoch), repeated without end and cut into global batches of ``batch_size``; batches may span
  an epoch boundary, so every training batch is full (fixed shapes, no masking). Each process
  keeps its own rows of every global batch (``process_index``-th slice of ``batch_size /
  process_count``), so N processes see exactly the batches one process would. The iterator's state
  (``{"next_index": k}``: k global batches consumed) is JSON and goes into every checkpoint, so a
  resumed run sees the same batches as an uninterrupted one.
* Training with length buckets (`BucketedTrainLoader`): the same full global batches, drawn
  from windows of similar length (a group of batches sorted by length, the batches' order
  shuffled) and cut to their bucket; the plan is a pure function of (seed, batch index, window
  lengths), so every process runs the same bucket at the same step.
* Evaluation: in order, the last batch padded by repeating its first row, ``example_mask`` 0 on
  the padding.
"""
from __future__ import annotations

from typing import Iterator, Mapping

import grain
import numpy as np

from poi_jax.data import buckets as buckets_lib


def local_rows(batch_size: int, process_index: int, process_count: int) -> slice:
  if batch_size % process_count:
    raise ValueError(f"global batch size {batch_size} is not divisible by the {process_count} "
                     f"processes")
  per = batch_size // process_count
  return slice(process_index * per, (process_index + 1) * per)


class ArrayRows:
  """In-memory arrays ``(N, ...)`` as a row source: ``len``, ``get(indices)``."""

  def __init__(self, arrays: Mapping[str, np.ndarray]):
    self.arrays = dict(arrays)
    self._num = len(next(iter(self.arrays.values()))) if self.arrays else 0

  def __len__(self) -> int:
    return self._num

  def get(self, indices) -> dict[str, np.ndarray]:
    return {k: v[indices] for k, v in self.arrays.items()}


def as_rows(source):
  """A row source: ``source`` itself when it has ``get``, else `ArrayRows` of a mapping."""
  return source if hasattr(source, "get") and not isinstance(source, Mapping) \
      else ArrayRows(source)


def _gather(rows, idx: np.ndarray, mask: np.ndarray) -> dict:
  batch = dict(rows.get(idx))
  batch["example_mask"] = mask
  return batch


class TrainLoader:
  """Endless shuffled training batches (this process's rows) with saveable state.

  Args:
    arrays: feature arrays, each ``(N, ...)``, or a row source (`as_rows`: feature shards).
    batch_size: the global batch size.
    seed: shuffling seed.
    process_index, process_count: this process and the number of processes (multi-host).
  """

  def __init__(self, arrays, batch_size: int, *, seed: int,
               process_index: int = 0, process_count: int = 1):
    self.rows = as_rows(arrays)
    self.num_examples = len(self.rows)
    if self.num_examples == 0:
      raise ValueError("no training features")
    self.batch_size = batch_size
    rows = local_rows(batch_size, process_index, process_count)
    ones = np.ones(rows.stop - rows.start, np.float32)
    self._dataset = (grain.MapDataset.range(self.num_examples)
                     .shuffle(seed=seed)
                     .repeat(None)
                     .batch(batch_size, drop_remainder=True)
                     .map(lambda idx: _gather(self.rows, np.asarray(idx)[rows], ones)))
    self._iter = iter(self._dataset.to_iter_dataset())

  def __iter__(self) -> Iterator[dict]:
    return self

  def __next__(self) -> dict:
    return next(self._iter)

  def get_state(self) -> dict:
    return dict(self._iter.get_state())

  def set_state(self, state: Mapping) -> None:
    self._iter.set_state(dict(state))

  def epoch(self, batches_consumed: int) -> float:
    return batches_consumed * self.batch_size / self.num_examples


class BucketedTrainLoader:
  """`TrainLoader` with length buckets: the batches of `poi_jax.data.buckets.train_group` (the
  shuffled windows, a group of ``window_batches`` global batches sorted by length, cut, the
  batches' order shuffled), each cut to the bucket of its longest window. The plan is a pure
  function of (seed, batch index, ``lengths``): every process computes it and keeps its rows,
  so all processes run the same bucket at the same step. State: ``{"next_index": k}``.

  Args:
    arrays: feature arrays or a row source (as `TrainLoader`).
    lengths: real tokens of every window ``(N,)`` (`ShardedSplit.window_lengths`).
    buckets: the bucket lengths, ascending (`poi_jax.data.buckets.resolve`).
    length_keys: the arrays whose last axis is cut to the bucket.
  """

  def __init__(self, arrays, batch_size: int, *, seed: int, lengths, buckets, length_keys,
               window_batches: int = 8, process_index: int = 0, process_count: int = 1):
    self.rows = as_rows(arrays)
    self.num_examples = len(self.rows)
    if self.num_examples == 0:
      raise ValueError("no training features")
    self.lengths = np.asarray(lengths, np.int32)
    if len(self.lengths) != self.num_examples:
      raise ValueError(f"{len(self.lengths)} window lengths for {self.num_examples} windows")
    self.batch_size, self.seed = batch_size, int(seed)
    self.buckets, self.length_keys = tuple(buckets), tuple(length_keys)
    self.window_batches = max(int(window_batches), 1)
    rows = local_rows(batch_size, process_index, process_count)
    self._rows, self._ones = rows, np.ones(rows.stop - rows.start, np.float32)
    self._next = 0
    self._group: tuple[int, np.ndarray] | None = None

  def __iter__(self) -> Iterator[dict]:
    return self

  def plan(self, index: int) -> tuple[np.ndarray, int]:
    """Global batch ``index``: its window indices (all processes') and its bucket length."""
    g, j = divmod(int(index), self.window_batches)
    if self._group is None or self._group[0] != g:
      self._group = (g, buckets_lib.train_group(self.lengths, self.batch_size, seed=self.seed,
                                                group=g, window_batches=self.window_batches))
    idx = self._group[1][j]
    return idx, buckets_lib.bucket_of(int(self.lengths[idx].max()), self.buckets)

  def __next__(self) -> dict:
    idx, length = self.plan(self._next)
    self._next += 1
    batch = _gather(self.rows, idx[self._rows], self._ones)
    return buckets_lib.trim(batch, length, self.length_keys) if length < self.buckets[-1] \
        else batch

  def get_state(self) -> dict:
    return {"next_index": self._next}

  def set_state(self, state: Mapping) -> None:
    self._next = int(state["next_index"])

  def epoch(self, batches_consumed: int) -> float:
    return batches_consumed * self.batch_size / self.num_examples


def eval_batches(arrays, batch_size: int, *, process_index: int = 0,
                 process_count: int = 1) -> Iterator[dict]:
  """In-order batches of this process's rows (``arrays``: a mapping or a row source); the last
  global batch is padded, its padding rows have ``example_mask`` 0. Every process gets the same
  number of batches."""
  arrays = as_rows(arrays)
  n = len(arrays)
  rows = local_rows(batch_size, process_index, process_count)
  for start in range(0, n, batch_size):
    idx = np.arange(start, min(start + batch_size, n))
    mask = np.ones(batch_size, np.float32)
    mask[len(idx):] = 0.0
    idx = np.concatenate([idx, np.full(batch_size - len(idx), idx[0])])
    yield _gather(arrays, idx[rows], mask[rows])
