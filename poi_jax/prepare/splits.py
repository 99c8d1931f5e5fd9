"""The engine's data step: a config's splits as feature shards (`poi_jax.data.shards`), and what
building them needs from the config (`with_cache_dir`; the tokenizer: `poi_jax.models.build.load_tokenizer`).

``prepare_split`` streams the task's records (``task.read``, caps applied while streaming), and
builds the split's missing shards with the task's `ShardSpec` in ``data.num_workers`` worker
processes; with N processes (``jax.process_count()``) each builds its own shards and all wait
for the manifest. ``--mode=prepare`` (`poi_jax.prepare`) runs it alone for every split the
config names, here or on Apache Beam (`poi_jax.prepare.beam`, which shares `split_plan`);
``train``, ``eval``, ``train_and_eval`` and ``predict`` run it first, so ``prepare`` is optional.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Iterable

import jax

from poi_jax import tasks
from poi_jax.data import shards

SPLIT_FILES = {"train": "train_file", "eval": "eval_file", "predict": "predict_file"}


def split_source(config, split: str) -> str:
  """``data.<split>_file`` (predict falls back to ``eval_file``, as `tasks.local_path` does)."""
  path = getattr(config.data, SPLIT_FILES[split])
  if split == "predict" and not path:
    path = config.data.eval_file
  return path


def split_caps(config, split: str) -> tuple[int, int | None]:
  """(records skipped, records kept or None for all) of ``split``, as today's ``tasks.cap``."""
  d = config.data
  if split == "train":
    skip, limit = 0, d.max_train_examples
  else:
    skip, limit = max(int(d.get("skip_eval_examples", 0)), 0), d.max_eval_examples
  return skip, (None if limit is None or limit < 0 else int(limit))


def stream_records(task, config, split: str) -> Iterable:
  """The split's records one at a time, capped (`split_caps`); nothing is read until the first
  record is asked for (a split whose shards are complete is not read at all)."""
  skip, limit = split_caps(config, split)
  yield from itertools.islice(task.read(config, split), skip,
                              None if limit is None else skip + limit)


@dataclasses.dataclass(frozen=True)
class SplitPlan:
  """Where and how a split's shards are built: what `prepare_split` and the Beam pipeline
  (`poi_jax.prepare.beam`) share, so both write the same directory, key and bytes."""
  spec: shards.ShardSpec
  key: str
  description: dict
  directory: str
  records_per_shard: int
  shard_bytes: int


def split_plan(task, config, split: str, tokenizer) -> SplitPlan:
  """The split's `ShardSpec`, cache key and directory in ``data.cache_dir`` (resolved:
  `with_cache_dir`). Reads nothing but the source file's identity."""
  if task.shard_spec is None:
    raise ValueError(f"task {task.name!r} has no shard_spec: it cannot be featurized into "
                     f"feature shards")
  cache_dir = config.data.cache_dir
  if not cache_dir:
    raise ValueError("data.cache_dir is empty: the engine resolves it to <workdir>/cache "
                     "(poi_jax.prepare.splits.with_cache_dir) before preparing")
  spec = task.shard_spec(config, tokenizer, split)
  skip, limit = split_caps(config, split)
  os.makedirs(cache_dir, exist_ok=True)
  per_shard = int(config.data.get("records_per_shard", 1024))
  if per_shard <= 0:
    raise ValueError(f"data.records_per_shard={per_shard} must be positive")
  shard_bytes = int(config.data.get("shard_bytes", shards.DEFAULT_SHARD_BYTES))
  if shard_bytes <= 0:
    raise ValueError(f"data.shard_bytes={shard_bytes} must be positive")
  key, description = shards.make_key(
      spec, task=config.task, split=split,
      source_id=shards.source_identity(split_source(config, split), memo_dir=cache_dir),
      tokenizer_id=shards.tokenizer_fingerprint(tokenizer), skip=skip, limit=limit,
      records_per_shard=per_shard, shard_bytes=shard_bytes)
  description["source_file"] = split_source(config, split)
  directory = os.path.join(cache_dir, f"{config.task}-{split}-{key[:16]}")
  return SplitPlan(spec, key, description, directory, per_shard, shard_bytes)


def prepare_split(task, config, split: str, tokenizer, *, records: Iterable | None = None,
                  progress: bool = True) -> shards.ShardedSplit:
  """The split's feature shards in ``data.cache_dir`` (resolved: `with_cache_dir`), building the
  missing ones. ``records``: the split's (capped) records when the caller already holds them,
  else they are streamed."""
  plan = split_plan(task, config, split, tokenizer)
  split_records = records if records is not None else stream_records(task, config, split)
  prepared = shards.prepare(
      plan.spec, split_records, tokenizer, directory=plan.directory, key=plan.key,
      description=plan.description, records_per_shard=plan.records_per_shard,
      shard_bytes=plan.shard_bytes, num_workers=config.data.num_workers,
      process_index=jax.process_index(), process_count=jax.process_count(),
      progress=progress and jax.process_index() == 0, desc=f"{config.task} {split} shards")
  prepared.merge = plan.spec.merge
  return prepared


def with_cache_dir(config, workdir: str):
  """``data.cache_dir`` resolved: empty (or the old "none") -> ``<workdir>/cache``, where the
  feature shards go."""
  cache_dir = config.data.get("cache_dir", None)
  if cache_dir and cache_dir != "none":
    return config
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.data.cache_dir = os.path.join(workdir, "cache")
  return config
