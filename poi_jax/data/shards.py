"""Feature shards on disk: a split's features as ArrayRecord files plus one JSON manifest.

Layout of one prepared split (``<data.cache_dir>/<task>-<split>-<key[:16]>/``)::

  shard-00000.array_record   one record per window (row): every array's row, raw bytes
  shard-00000.meta.npz       the shard's decoding metadata (offsets, ids, ...), deterministic zip
  shard-00000.json           the shard's info: record range, windows, sizes and sha256 of both
  ...
  manifest.json              the cache key, counts, every array's shape/dtype, every shard

Shard ``k`` holds the features of records ``[k * S, (k + 1) * S)`` (``S`` =
``data.records_per_shard``; a task whose features are not built record by record, NarrativeQA,
has one shard), built by the pure function `build_shard` (records -> one finished shard) in
worker processes. Shards are written under a temporary name and moved into place with
``os.replace``, the info file last, so a killed run leaves only whole shards and a rerun builds
only the missing ones. Every process checks its shards' sha256 against their info before use; a
truncated or corrupt shard is named in one line and rebuilt. With N processes, process i builds
shards i, i+N, ...; process 0 writes the manifest once every shard is there; everybody waits for
it (a barrier over `jax.distributed`).

The cache key hashes the source file's bytes (``identity.json`` in the cache directory memoises
the hash by path, size and mtime), the reader's options, the caps, the tokenizer, every feature
option and version, ``S`` and `FORMAT_VERSION`: another value of any of them is another
directory, never a stale read.

Rows keep today's order, and indices inside the arrays (``example_index``) are global, so the
concatenated shards are bit for bit the arrays the in-memory featurizer builds.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from poi_jax.data.features.base import Features
from poi_jax.data.shard_files import (MANIFEST, ShardedSplit, ShardError, ShardRows,  # noqa: F401
                                      assemble_manifest, build_shard, check_shard,
                                      decode_rows, encode_rows, read_manifest, read_meta,
                                      remove_stale_temporaries, row_layout, shard_name,
                                      write_meta, _write_array_record)
from poi_jax.data.shard_keys import (FORMAT_VERSION, file_sha256, make_key,  # noqa: F401
                                     source_identity, tokenizer_fingerprint)


@dataclasses.dataclass(frozen=True)
class ShardSpec:
  """How a task featurizes one split into shards.

  Attributes:
    kind: the featurizer's name (``extractive``, ``choice``, ``nq``, ...).
    build: module-level ``(records, tokenizer, **options) -> Features`` (runs in workers).
    merge: ``(parts, starts) -> Features``: concatenates consecutive parts, shifting record
      indices by ``starts`` (also applied to one shard with its start, so indices are global).
    options: keyword options of ``build``.
    key_options: what else changes the features (feature version, tagger data...); JSON values.
    read_options: what changes the records the task's ``read`` yields (RACE level, story set).
    per_record: False where ``build`` needs the whole split at once (array widths from the
      longest record): the split is then one shard.
    check: module-level ``(records) -> None`` run on each shard's records before featurizing.
    validate: module-level ``(Features) -> None`` run on each shard's features (batch checks).
  """
  kind: str
  build: Callable[..., Features]
  merge: Callable[[list, list], Features]
  options: Mapping[str, Any]
  key_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  read_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  per_record: bool = True
  check: Callable[[Sequence], None] | None = None
  validate: Callable[[Features], None] | None = None


# ---- keys ---------------------------------------------------------------------------------------
def barrier(name: str, process_count: int) -> None:
  """Every process waits here (nothing to wait for with one process)."""
  if process_count > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)

def prepare(spec: ShardSpec, records: Iterable, tokenizer, *, directory: str, key: str,
            description: dict, records_per_shard: int, num_workers: int = 0,
            process_index: int = 0, process_count: int = 1, progress: bool = True,
            desc: str = "preparing") -> ShardedSplit:
  """Builds the missing shards of a split and returns it with its manifest.

  Args:
    spec: the task's `ShardSpec`.
    records: the split's records, streamed (an iterable; read once, never held whole unless
      ``spec.per_record`` is False).
    tokenizer: passed to ``spec.build``.
    directory, key, description: where the split lives, its cache key and what the key hashes.
    records_per_shard: records per shard (``spec.per_record``); > 0.
    num_workers: featurizing processes (0 or 1: this process).
    process_index, process_count: this process builds shards ``process_index``,
      ``process_index + process_count``, ...; process 0 writes the manifest.
    progress: a tqdm bar of records (records/s) with windows/s.
  """
  from tqdm.auto import tqdm
  os.makedirs(directory, exist_ok=True)
  manifest = read_manifest(directory, key)
  per = max(int(records_per_shard), 1) if spec.per_record else None

  def owned(k: int) -> bool:
    return k % process_count == process_index

  ready: dict[int, dict] = {}
  if manifest is not None:
    for s in manifest["shards"]:
      k = int(s["name"].split("-")[1])
      info = check_shard(directory, k, key) if owned(k) else {"ok": True}
      if info is None:
        break
      ready[k] = info
    else:  # every shard this process owns is whole
      barrier(f"shards-built-{key[:12]}", process_count)
      barrier(f"manifest-{key[:12]}", process_count)
      return ShardedSplit(directory, manifest)
    ready = {}
    manifest = None

  # Build what is missing, streaming the records once.
  infos: dict[int, dict] = {}
  n_records = 0
  workers = max(int(num_workers), 0)
  common = dict(directory=directory, key=key, build=spec.build, merge=spec.merge,
                options=dict(spec.options), check=spec.check, validate=spec.validate,
                process_index=process_index)
  bar = tqdm(desc=desc, unit="rec", leave=False, **({} if progress else {"disable": True}))
  t0, windows_done = time.time(), 0

  def done(info: dict) -> None:
    nonlocal windows_done
    infos[info["index"]] = info
    windows_done += info["windows"]
    bar.set_postfix(windows_s=f"{windows_done / max(time.time() - t0, 1e-9):.1f}",
                    shards=len(infos))

  pool = None
  if workers > 1 and spec.per_record:
    from poi_jax.data import parallel
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=parallel._context(), initializer=parallel._init_worker,
        initargs=(tokenizer,))
  pending: list = []

  def submit(index: int, start: int, chunk: list) -> None:
    existing = check_shard(directory, index, key)
    if existing is not None:
      done(existing)
      return
    if pool is None:
      done(build_shard(chunk, index=index, start=start, tokenizer=tokenizer, **common))
      return
    pending.append(pool.submit(_build_in_worker, chunk, index, start, common))
    while len(pending) > 2 * workers:  # bounded memory: at most 2 shards per worker in flight
      done(pending.pop(0).result())

  try:
    if per is None:  # the whole split is one unit
      chunk = list(records)
      n_records = len(chunk)
      bar.update(n_records)
      if owned(0):
        submit(0, 0, chunk)
      chunk = []
    else:
      chunk, index = [], 0
      for rec in records:
        if owned(index):
          chunk.append(rec)
        n_records += 1
        bar.update(1)
        if n_records % per == 0:
          if owned(index):
            submit(index, index * per, chunk)
          chunk, index = [], index + 1
      if n_records % per and owned(index):
        submit(index, index * per, chunk)
      if n_records == 0 and owned(0):  # an empty split: one empty shard
        submit(0, 0, [])
      chunk = []
    for fut in pending:
      done(fut.result())
  except BaseException:
    if pool is not None:
      for fut in pending:
        fut.cancel()
    raise
  finally:
    bar.close()
    if pool is not None:
      pool.shutdown(wait=True, cancel_futures=True)

  num_shards = 1 if per is None else max(-(-n_records // per), 1)
  barrier(f"shards-built-{key[:12]}", process_count)
  if process_index == 0:
    # Every process is done writing shards: what a killed earlier run left half-written goes.
    remove_stale_temporaries(directory)
    all_infos = []
    for k in range(num_shards):
      info = infos.get(k) or check_shard(directory, k, key, hash_files=False)
      if info is None:
        raise ShardError(f"feature shard {os.path.join(directory, shard_name(k))} is missing "
                         f"after every process prepared its shards")
      all_infos.append(info)
    manifest = assemble_manifest(directory, key, description, all_infos, n_records)
    from poi_jax.io import write_json_atomic
    write_json_atomic(os.path.join(directory, MANIFEST), manifest, sort_keys=True)
  barrier(f"manifest-{key[:12]}", process_count)
  manifest = read_manifest(directory, key)
  if manifest is None:
    raise ShardError(f"no manifest in {directory} after preparing")
  return ShardedSplit(directory, manifest)


def _build_in_worker(records, index, start, common):
  from poi_jax.data import parallel
  return build_shard(records, index=index, start=start, tokenizer=parallel._worker_tokenizer,
                     **common)
