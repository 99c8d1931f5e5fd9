"""Evaluation's data, one feature shard at a time: the model's outputs on the shard's windows,
the shard's arrays and meta, and its records re-streamed from the reader, so memory holds one
shard (and one batch), never the split.

The windows are predicted in the global batches of `poi_jax.data.loader.eval_batches` over the
whole split (every process its rows of each batch, outputs gathered on every process, the last
batch padded and masked), exactly the batches a whole-split prediction runs: a batch that spans
two shards is predicted once and its rows go to both. A shard holds every window of its records
(the manifest's ``records`` range; shards are cut after a whole record), so a shard is a chunk of
whole examples (`poi_jax.tasks.base.Evaluator`).
"""
from __future__ import annotations

import itertools
from typing import Iterator

import jax
import numpy as np
from tqdm import tqdm

from poi_jax.data.features.base import Features
from poi_jax.data.loader import eval_batches
from poi_jax.data.shards import ShardError
from poi_jax.train import placement, watchdog
from poi_jax.train import splits as splits_lib


def predict_by_shard(run, split, batch_size: int, *,
                     desc: str = "predict") -> Iterator[tuple[int, dict[str, np.ndarray]]]:
  """``(shard position, {name: (windows of the shard, ...)})`` for every shard of ``split``, in
  order: the model's outputs on that shard's windows (numpy)."""
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


def chunks(run, split, batch_size: int, *,
           desc: str = "predict") -> Iterator[tuple[list, Features, dict[str, np.ndarray]]]:
  """``(records, features, outputs)`` of each shard of ``split``, in order: the shard's records
  (streamed again from the task's reader, capped as when the shards were built), its arrays and
  meta with record indices counted from its first record, and the model's outputs on its
  windows. Raises `ShardError` when the source no longer yields the records the shards were
  built from (their count)."""
  task, config = run.task, run.config
  records = iter(splits_lib.stream_records(task, config, split.role))
  manifest = split.shards.manifest
  for index, outputs in predict_by_shard(run, split, batch_size, desc=desc):
    lo, hi = manifest["shards"][index]["records"]
    chunk = list(itertools.islice(records, hi - lo))
    if len(chunk) != hi - lo:
      raise ShardError(f"data.{splits_lib.SPLIT_FILES[split.role]} yields {lo + len(chunk)} "
                       f"records, the feature shards in {split.shards.directory} were built "
                       f"from {manifest['num_examples']}")
    features = split.shards.shard_features(index)
    yield chunk, split.shards.merge([features], [-lo]), outputs
