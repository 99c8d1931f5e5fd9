r"""``--mode=prepare`` on Apache Beam: for a corpus that outgrows the hosts of one run.

  pip install "poi-jax[beam]"
  python -m poi_jax.main --config=configs/nq.py --workdir=/mnt/shared/nq --mode=prepare \
      --beam_pipeline_options=runner=DataflowRunner,project=P,region=R,temp_location=gs://B/tmp

``--beam_pipeline_options`` takes Beam's own options, comma-separated without their dashes (as
TFDS's ``--beam_pipeline_options`` does): ``runner=DirectRunner,direct_num_workers=4``,
``runner=FlinkRunner,flink_master=host:8081``, ``runner=SparkRunner``, ... The pipeline runs the
same pure unit of work as ``--mode=prepare`` (`poi_jax.data.shards.build_block`: records ``k*S ..
(k+1)*S-1`` of the split -> the shards of block ``k``, cut at ``data.shard_bytes``) on Beam's
workers, so the directory, the cache key, every
shard's bytes and the manifest are those ``--mode=prepare`` writes (tested with the
DirectRunner), and a later ``--mode=train`` reads them without building anything. What stays the
same as the local path: shards already whole are kept (a rerun builds only the missing ones),
every file is written atomically, a bad record is a `DataError` naming the file, record and field.

The pipeline, per split: one step streams the split's records (the reader, caps applied) and cuts
them into shard-sized chunks, skipping the shards that are already whole; a reshuffle spreads the
chunks over the workers; each worker builds its shards (tokenizer and NLTK loaded once per worker
in ``setup``); the last step assembles the manifest from every shard's info. ``data.cache_dir``
must be a path every worker can write (a shared file system, or a bucket mounted with FUSE):
the shards are files, as grain reads them. Memory per worker: one block's records
(``data.records_per_shard`` records, a Beam element) and one shard's meta (its rows are written
as they are featurized, as `--mode=prepare` does), the per-shard bound that
huggingface/datasets#4525 lacked when it built Natural Questions on Dataflow.

Beam is an optional extra (``[beam]``): importing this module does not import it, and a missing
``apache_beam`` is one clear error naming the extra.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

from poi_jax import tasks
from poi_jax.data import pos, shards
from poi_jax.io import write_json_atomic
from poi_jax.models import build
from poi_jax.prepare import splits as splits_lib


def pipeline_options(text: str) -> list[str]:
  """``"runner=DirectRunner,direct_num_workers=2"`` -> ``["--runner=DirectRunner",
  "--direct_num_workers=2"]`` (Beam's `PipelineOptions` parses the list)."""
  out = []
  for item in (t.strip() for t in text.split(",")):
    if not item:
      continue
    if item.startswith("-"):
      raise ValueError(f"--beam_pipeline_options: give {item.lstrip('-')!r} without dashes "
                       f"(comma-separated name=value pairs)")
    out.append(f"--{item}")
  return out


def _import_beam():
  try:
    import apache_beam as beam
  except ModuleNotFoundError as e:
    raise ValueError(f"--beam_pipeline_options needs Apache Beam ({e}): pip install "
                     f"'poi-jax[beam]', or drop the flag to prepare with this run's processes"
                     ) from None
  return beam


def _chunks(_, *, config, split: str, directory: str, key: str,
            per_shard: int | None) -> Iterator[tuple[str, int, int, list]]:
  """The split's records as ``("build", k, start, records)`` per block with a shard missing,
  or ``("have", k, start, [])`` per whole one; the whole split is one chunk when ``per_shard``
  is None."""
  task = tasks.get_task(config.task)
  records = splits_lib.stream_records(task, config, split)

  def chunk(k, start, recs):
    parts, end = shards.block_parts(directory, k, key, start)
    if parts and end == start + len(recs):
      return ("have", k, start, [])
    return ("build", k, start, recs)

  if per_shard is None:
    yield chunk(0, 0, list(records))
    return
  recs, k, n = [], 0, 0
  for rec in records:
    recs.append(rec)
    n += 1
    if len(recs) == per_shard:
      yield chunk(k, k * per_shard, recs)
      recs, k = [], k + 1
  if recs or n == 0:  # the tail, or one empty shard for an empty split
    yield chunk(k, k * per_shard, recs)


def _beam_classes(beam):
  class BuildShard(beam.DoFn):
    """Builds one chunk's shard; the tokenizer and NLTK's tagger load once per worker."""

    def __init__(self, config, split: str, directory: str, key: str, shard_bytes: int):
      self.config, self.split, self.directory, self.key = config, split, directory, key
      self.shard_bytes = shard_bytes

    def setup(self):
      task = tasks.get_task(self.config.task)
      if tasks.uses_pos(self.config):
        pos.ensure_nltk_resources()
      self.tokenizer = (build.load_tokenizer(self.config) if task.tokenizer_needed(self.config)
                        else None)
      self.spec = task.shard_spec(self.config, self.tokenizer, self.split)

    def process(self, item):
      what, k, start, records = item
      if what == "have":
        infos, _ = shards.block_parts(self.directory, k, self.key, start, hash_files=False)
        if infos:
          yield from infos
          return
        # Gone since the chunking step looked: rebuild it from the source.
        raise shards.ShardError(f"feature shard {shards.shard_name(k)} in {self.directory} "
                                f"disappeared during the pipeline; run it again")
      common = dict(index=k, start=start, directory=self.directory, key=self.key,
                    build=self.spec.build, merge=self.spec.merge,
                    options=dict(self.spec.options), tokenizer=self.tokenizer,
                    check=self.spec.check, validate=self.spec.validate)
      if not self.spec.per_record or not records:  # (the whole split; an empty split)
        yield shards.build_shard(records, **common)
        return
      yield from shards.build_block(records, shard_bytes=self.shard_bytes, **common)

  return BuildShard


def _write_manifest(infos: list[dict], *, directory: str, key: str, description: dict) -> str:
  infos = sorted(infos, key=lambda i: (i["index"], i.get("part", 0)))
  blocks = sorted({i["index"] for i in infos})
  if blocks != list(range(len(blocks))) or any(
      a["records"][1] != b["records"][0] for a, b in zip(infos, infos[1:])):
    raise shards.ShardError(f"the pipeline built the shards of blocks {blocks} of "
                            f"{directory}: some are missing")
  num_records = infos[-1]["records"][1] if infos else 0
  manifest = shards.assemble_manifest(directory, key, description, infos, num_records)
  write_json_atomic(os.path.join(directory, shards.MANIFEST), manifest, sort_keys=True)
  return directory


def prepare_splits(task, config, splits: list[str], tokenizer,
                   options: str) -> dict[str, shards.ShardedSplit]:
  """Every split of ``splits`` as feature shards, built by one Beam pipeline run with
  ``options`` (``--beam_pipeline_options``); returns them as `prepare_split` does."""
  beam = _import_beam()
  from apache_beam.options.pipeline_options import PipelineOptions
  BuildShard = _beam_classes(beam)
  plans = {s: splits_lib.split_plan(task, config, s, tokenizer) for s in splits}
  with beam.Pipeline(options=PipelineOptions(pipeline_options(options))) as p:
    for split, plan in plans.items():
      os.makedirs(plan.directory, exist_ok=True)
      per = plan.records_per_shard if plan.spec.per_record else None
      where: dict[str, Any] = dict(directory=plan.directory, key=plan.key)
      _ = (p
           | f"{split}: start" >> beam.Create([None])
           | f"{split}: read and chunk" >> beam.FlatMap(_chunks, config=config, split=split,
                                                        per_shard=per, **where)
           | f"{split}: spread" >> beam.Reshuffle()
           | f"{split}: build shards" >> beam.ParDo(BuildShard(config, split,
                                                              shard_bytes=plan.shard_bytes,
                                                              **where))
           | f"{split}: gather infos" >> beam.combiners.ToList()
           | f"{split}: manifest" >> beam.Map(_write_manifest, description=plan.description,
                                              **where))
  out = {}
  for split, plan in plans.items():
    manifest = shards.read_manifest(plan.directory, plan.key)
    if manifest is None:
      raise shards.ShardError(f"the Beam pipeline ended without a manifest in {plan.directory}")
    out[split] = shards.ShardedSplit(plan.directory, manifest)
    out[split].merge = plan.spec.merge
  return out
