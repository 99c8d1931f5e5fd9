"""The engine's data step: a config's splits as feature shards (`poi_jax.data.shards`).

``prepare_split`` streams the task's records (``task.read``, caps applied while streaming), and
builds the split's missing shards with the task's `ShardSpec` in ``data.num_workers`` worker
processes; with N processes (``jax.process_count()``) each builds its own shards and all wait
for the manifest. ``--mode=prepare`` runs it alone for every split the config names; ``train``,
``eval``, ``train_and_eval`` and ``predict`` run it first, so ``prepare`` is optional.
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
  (`poi_jax.train.prepare_beam`) share, so both write the same directory, key and bytes."""
  spec: shards.ShardSpec
  key: str
  description: dict
  directory: str
  records_per_shard: int


def split_plan(task, config, split: str, tokenizer) -> SplitPlan:
  """The split's `ShardSpec`, cache key and directory in ``data.cache_dir`` (resolved:
  `poi_jax.train.setup.with_cache_dir`). Reads nothing but the source file's identity."""
  if task.shard_spec is None:
    raise ValueError(f"task {task.name!r} has no shard_spec: it cannot be featurized into "
                     f"feature shards")
  cache_dir = config.data.cache_dir
  if not cache_dir:
    raise ValueError("data.cache_dir is empty: the engine resolves it to <workdir>/cache "
                     "(poi_jax.train.setup.with_cache_dir) before preparing")
  spec = task.shard_spec(config, tokenizer, split)
  skip, limit = split_caps(config, split)
  os.makedirs(cache_dir, exist_ok=True)
  per_shard = int(config.data.get("records_per_shard", 1024))
  if per_shard <= 0:
    raise ValueError(f"data.records_per_shard={per_shard} must be positive")
  key, description = shards.make_key(
      spec, task=config.task, split=split,
      source_id=shards.source_identity(split_source(config, split), memo_dir=cache_dir),
      tokenizer_id=shards.tokenizer_fingerprint(tokenizer), skip=skip, limit=limit,
      records_per_shard=per_shard)
  description["source_file"] = split_source(config, split)
  directory = os.path.join(cache_dir, f"{config.task}-{split}-{key[:16]}")
  return SplitPlan(spec, key, description, directory, per_shard)


def prepare_split(task, config, split: str, tokenizer, *, records: Iterable | None = None,
                  progress: bool = True) -> shards.ShardedSplit:
  """The split's feature shards in ``data.cache_dir`` (resolved: `poi_jax.train.setup.
  with_cache_dir`), building the missing ones. ``records``: the split's (capped) records when the
  caller already holds them, else they are streamed."""
  plan = split_plan(task, config, split, tokenizer)
  split_records = records if records is not None else stream_records(task, config, split)
  prepared = shards.prepare(
      plan.spec, split_records, tokenizer, directory=plan.directory, key=plan.key,
      description=plan.description, records_per_shard=plan.records_per_shard,
      num_workers=config.data.num_workers,
      process_index=jax.process_index(), process_count=jax.process_count(),
      progress=progress and jax.process_index() == 0, desc=f"{config.task} {split} shards")
  prepared.merge = plan.spec.merge
  return prepared


def prepared_splits(config) -> list[str]:
  """The splits ``--mode=prepare`` builds: those whose file the config names."""
  return [s for s in ("train", "eval") if getattr(config.data, SPLIT_FILES[s])] + (
      ["predict"] if config.data.get("predict_file", "") else [])


def prepare(config, workdir: str, *, beam_options: str = "") -> dict[str, shards.ShardedSplit]:
  """``--mode=prepare``: every split of the config as feature shards; prints one line each.
  ``beam_options`` (``--beam_pipeline_options``): build them with an Apache Beam pipeline
  instead (`poi_jax.train.prepare_beam`), same shards."""
  from poi_jax.train import setup  # (setup imports this module)
  task = tasks.get_task(config.task)
  config = setup.with_cache_dir(config, workdir)
  if tasks.uses_pos(config):
    from poi_jax.data import pos
    pos.ensure_nltk_resources()
  tokenizer = setup.load_tokenizer(config) if task.tokenizer_needed(config) else None
  splits = prepared_splits(config)
  if not splits:
    raise ValueError("--mode=prepare: the config names no data file (data.train_file, "
                     "data.eval_file, data.predict_file)")
  if beam_options:
    from poi_jax.train import prepare_beam
    out = prepare_beam.prepare_splits(task, config, splits, tokenizer, beam_options)
  else:
    out = {split: prepare_split(task, config, split, tokenizer) for split in splits}
  for split, prepared in out.items():
    if jax.process_index() == 0:
      size = sum(f["bytes"] for s in prepared.manifest["shards"] for f in s["files"].values())
      print(f"{split}: {prepared.num_examples} records -> {prepared.num_windows} windows in "
            f"{prepared.manifest['num_shards']} shard(s), {size / 1e6:.1f} MB: "
            f"{prepared.directory}")
  return out
