"""``--mode=prepare``: every split the config names as feature shards, built by this run's
processes (`poi_jax.prepare.splits.prepare_split`) or by an Apache Beam pipeline
(`poi_jax.prepare.beam`), the same shards either way; then the run stops. The engine's other
modes build the missing shards first (`poi_jax.train.run`), so it is optional.
"""
from __future__ import annotations

import jax

from poi_jax import tasks
from poi_jax.data import pos, shards
from poi_jax.models import build
from poi_jax.prepare import beam as prepare_beam
from poi_jax.prepare import splits as splits_lib


def prepared_splits(config) -> list[str]:
  """The splits ``--mode=prepare`` builds: those whose file the config names."""
  return [s for s in ("train", "eval") if getattr(config.data, splits_lib.SPLIT_FILES[s])] + (
      ["predict"] if config.data.get("predict_file", "") else [])


def prepare(config, workdir: str, *, beam_options: str = "") -> dict[str, shards.ShardedSplit]:
  """``--mode=prepare``: every split of the config as feature shards; prints one line each.
  ``beam_options`` (``--beam_pipeline_options``): build them with an Apache Beam pipeline
  instead (`poi_jax.prepare.beam`), same shards."""
  task = tasks.get_task(config.task)
  config = splits_lib.with_cache_dir(config, workdir)
  if tasks.uses_pos(config):
    pos.ensure_nltk_resources()
  tokenizer = build.load_tokenizer(config) if task.tokenizer_needed(config) else None
  splits = prepared_splits(config)
  if not splits:
    raise ValueError("--mode=prepare: the config names no data file (data.train_file, "
                     "data.eval_file, data.predict_file)")
  if beam_options:
    out = prepare_beam.prepare_splits(task, config, splits, tokenizer, beam_options)
  else:
    out = {split: splits_lib.prepare_split(task, config, split, tokenizer) for split in splits}
  for split, prepared in out.items():
    if jax.process_index() == 0:
      size = sum(f["bytes"] for s in prepared.manifest["shards"] for f in s["files"].values())
      print(f"{split}: {prepared.num_examples} records -> {prepared.num_windows} windows in "
            f"{prepared.manifest['num_shards']} shard(s), {size / 1e6:.1f} MB: "
            f"{prepared.directory}")
  return out
