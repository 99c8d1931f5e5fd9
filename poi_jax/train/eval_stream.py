"""Evaluation's data, one feature shard at a time: the model's outputs on the shard's windows,
the shard's arrays and meta, and its records re-streamed from the reader, so memory holds one
shard (and one batch), never the split.

The windows are predicted in the global batches of `poi_jax.data.loader.eval_batches` over the
whole split (every process its rows of each batch, outputs gathered on every process, the last
batch padded and masked), exactly the batches a whole-split prediction runs: a batch that spans
two shards is predicted once and its rows go to both. A shard holds every window of its records
(the manifest's ``records`` range; shards are cut after a whole record), so a shard is a chunk of
whole examples (`poi_jax.tasks.base.Evaluator`).

A training run's evaluation can be stopped between two batches (``stop``: the preemption
watcher's poll, which every process calls at the same batch): `EvaluationStopped`.
"""
from __future__ import annotations

import itertools
from typing import Callable, Iterator

import jax
import numpy as np
from tqdm import tqdm

from poi_jax.data import buckets
from poi_jax.data.features.base import Features
from poi_jax.data.loader import local_rows, eval_batches
from poi_jax.data.shards import ShardError
from poi_jax.faults import watchdog
from poi_jax.prepare import splits as splits_lib
from poi_jax.train import placement


class EvaluationStopped(Exception):
  """Raised between two evaluation batches when ``stop()`` says so (SIGTERM or Ctrl-C during a
  training run's evaluation): the training loop saves the step's checkpoint and exits, and the
  resumed run evaluates that step again."""


def _check(stop: Callable[[], bool] | None) -> None:
  if stop is not None and stop():
    raise EvaluationStopped("evaluation stopped between two batches")


def predict_by_shard(run, split, batch_size: int, *, desc: str = "predict",
                     stop: Callable[[], bool] | None = None
                     ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
  """``(shard position, {name: (windows of the shard, ...)})`` for every shard of ``split``, in
  order: the model's outputs on that shard's windows (numpy). With length buckets
  (`poi_jax.data.buckets`): `_predict_bucketed`. ``stop`` is polled after each batch
  (`EvaluationStopped`)."""
  if buckets.enabled(run.task.buckets(run.config)):
    yield from _predict_bucketed(run, split, batch_size, desc=desc, stop=stop)
    return
  sharded = run.sharded
  rows = split.shards.rows(run.task.model_keys)
  n = len(rows)
  batches = iter(eval_batches(rows, batch_size, process_index=jax.process_index(),
                              process_count=jax.process_count()))
  bar = tqdm(total=-(-n // batch_size), desc=desc, unit="batch", leave=False,
             dynamic_ncols=True, disable=not run.is_chief)
  pending: list[dict] = []  # outputs of rows predicted but not yet handed out, in order
  held, predicted = 0, 0

  def predict_next() -> bool:
    nonlocal held, predicted
    local = next(batches, None)
    if local is None:
      return False
    out = sharded.predict_step(sharded.state, placement.global_batch(local, sharded.mesh))
    watchdog.progress(phase="evaluating")  # (before the gather; see the training loop)
    out = placement.to_host(out)
    real = min(batch_size, n - predicted)  # the last batch's padding rows are dropped
    pending.append({k: np.asarray(v)[:real] for k, v in out.items()})
    held += real
    predicted += real
    bar.update(1)
    _check(stop)
    return True

  try:
    for index, shard in enumerate(split.shards.manifest["shards"]):
      need = int(shard["windows"])
      while held < need or (not pending and need == 0 and predicted < n):
        if not predict_next():  # (an empty shard takes its arrays' shapes from a batch)
          raise ShardError(f"the feature shards in {split.shards.directory} hold fewer windows "
                           f"than their manifest says ({predicted} read)")
      if not pending:  # no window in the whole split
        yield index, {}
        continue
      joined = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
      yield index, {k: v[:need] for k, v in joined.items()}
      rest = {k: v[need:] for k, v in joined.items()}
      held -= need
      pending[:] = [rest]
  finally:
    bar.close()


def _predict_bucketed(run, split, batch_size: int, *, desc: str,
                      stop: Callable[[], bool] | None = None
                      ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
  """`predict_by_shard` with length buckets: each shard's windows ordered by length (stable),
  cut into global batches of ``batch_size`` (the last one padded, ``example_mask`` 0), each cut
  to the bucket of its longest window; the outputs are padded back to ``max_seq_length`` and put
  back in the shard's order. Every process reads the whole shard's model rows, computes the same
  plan (so the same bucket per batch) and predicts its rows of each batch."""
  sharded, task = run.sharded, run.task
  bk = task.buckets(run.config)
  full = bk[-1]
  rows = split.shards.rows(task.model_keys)
  local = local_rows(batch_size, jax.process_index(), jax.process_count())
  shards = split.shards.manifest["shards"]
  bar = tqdm(total=sum(-(-int(s["windows"]) // batch_size) for s in shards), desc=desc,
             unit="batch", leave=False, dynamic_ncols=True, disable=not run.is_chief)
  template = None  # the outputs' shapes, for a shard without windows
  try:
    for index, shard in enumerate(shards):
      need, first = int(shard["windows"]), int(shard.get("first_window", 0))
      if need == 0:
        if template is None:
          template = _output_shapes(run, split, batch_size)
        yield index, {k: np.zeros((0, *v.shape[1:]), v.dtype) for k, v in template.items()}
        continue
      arrays = rows.get(np.arange(first, first + need))
      outs, order = [], []
      for idx, length in buckets.sorted_batches(buckets.window_lengths(arrays), batch_size, bk):
        mask = np.zeros(batch_size, np.float32)
        mask[:len(idx)] = 1.0
        padded = np.concatenate([idx, np.full(batch_size - len(idx), idx[0])])
        batch = buckets.trim({k: v[padded[local]] for k, v in arrays.items()}, length,
                             task.length_keys)
        batch["example_mask"] = mask[local]
        out = sharded.predict_step(sharded.state, placement.global_batch(batch, sharded.mesh))
        watchdog.progress(phase="evaluating")
        out = placement.to_host(out)
        outs.append(buckets.pad_outputs({k: np.asarray(v)[:len(idx)] for k, v in out.items()},
                                        full, task.length_outputs))
        order.append(idx)
        bar.update(1)
        _check(stop)
      back = np.empty(need, np.int64)
      back[np.concatenate(order)] = np.arange(need)
      joined = {k: np.concatenate([o[k] for o in outs])[back] for k in outs[0]}
      template = joined
      yield index, joined
  finally:
    bar.close()


def _output_shapes(run, split, batch_size: int) -> dict:
  """The model's outputs' shapes and dtypes at ``max_seq_length`` (without computing them)."""
  shapes = run.task.model_arrays(split.shards.array_shapes())
  dtypes = {k: v["dtype"] for k, v in split.shards.manifest["arrays"].items()}
  batch = {k: jax.ShapeDtypeStruct((batch_size, *shapes[k][1:]), np.dtype(dtypes[k]))
           for k in shapes}
  batch["example_mask"] = jax.ShapeDtypeStruct((batch_size,), np.float32)
  out = jax.eval_shape(run.sharded.predict_step, run.sharded.state, batch)
  return {k: np.zeros(v.shape, v.dtype) for k, v in out.items()}


def chunks(run, split, batch_size: int, *, desc: str = "predict",
           stop: Callable[[], bool] | None = None
           ) -> Iterator[tuple[list, Features, dict[str, np.ndarray]]]:
  """``(records, features, outputs)`` of each shard of ``split``, in order: the shard's records
  (streamed again from the task's reader, capped as when the shards were built), its arrays and
  meta with record indices counted from its first record, and the model's outputs on its
  windows. Raises `ShardError` when the source no longer yields the records the shards were
  built from (their count), `EvaluationStopped` when ``stop()`` is true after a batch."""
  task, config = run.task, run.config
  records = iter(splits_lib.stream_records(task, config, split.role))
  manifest = split.shards.manifest
  for index, outputs in predict_by_shard(run, split, batch_size, desc=desc, stop=stop):
    lo, hi = manifest["shards"][index]["records"]
    chunk = list(itertools.islice(records, hi - lo))
    if len(chunk) != hi - lo:
      raise ShardError(f"data.{splits_lib.SPLIT_FILES[split.role]} yields {lo + len(chunk)} "
                       f"records, the feature shards in {split.shards.directory} were built "
                       f"from {manifest['num_examples']}")
    features = split.shards.shard_features(index)
    yield chunk, split.shards.merge([features], [-lo]), outputs
