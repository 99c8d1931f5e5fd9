"""Building a split's shards (`prepare`): blocks of records over processes, records in worker
processes, the manifest once every block is there.

Part of `poi_jax.data.shards` (the package docstring: the layout and the whole story)."""
from __future__ import annotations


import collections
import concurrent.futures
import dataclasses
import os
import pickle
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from poi_jax.data import parallel
from poi_jax.data.features.base import Features
from poi_jax.data.shards.codec import (
    MANIFEST, ShardError, _name_index, remove_stale_temporaries, shard_name)
from poi_jax.data.shards.keys import DEFAULT_SHARD_BYTES
from poi_jax.data.shards.split import ShardedSplit, assemble_manifest, read_manifest
from poi_jax.data.shards.writer import (
    ShardWriter, block_parts, build_shard, check_shard, featurize_record)
from poi_jax.io import write_json_atomic


# ------------------------------------------------------------------------------------------------
# Building: a split's records -> its shards, in worker processes and over processes
# ------------------------------------------------------------------------------------------------
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


# ---- preparing a split --------------------------------------------------------------------------
def barrier(name: str, process_count: int) -> None:
  """Every process waits here (nothing to wait for with one process)."""
  if process_count > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


# Worker processes get consecutive records in tasks of at most GROUP_RECORDS records and about
# GROUP_BYTES of pickled records plus their features (estimated from the largest record's
# features so far; one record a task until the first results are back); at most 2 tasks per
# worker are in flight, so what this process holds of them is bounded whatever their length.
GROUP_RECORDS = 64
GROUP_BYTES = 4 << 20
# Workers cost seconds to start (a forkserver importing transformers and NLTK, the tokenizer
# sent to each, the tagger loaded in each): as `parallel.featurize` does, a split gets them only
# from two workers' worth of records (2 x ``min_per_worker``) on, else it is featurized in this
# process (a 64-record split: 14 s for the whole tiny run in this process against 23 s with two
# workers, 2026-12-07). The records stream, so the first ones are held, pickled, until that many
# (or HOLD_BYTES of them) have come; a split that ends before never starts the pool.
HOLD_BYTES = 32 << 20


def prepare(spec: ShardSpec, records: Iterable, tokenizer, *, directory: str, key: str,
            description: dict, records_per_shard: int, shard_bytes: int | None = None,
            num_workers: int = 0, min_per_worker: int = parallel.MIN_PER_WORKER,
            process_index: int = 0, process_count: int = 1, progress: bool = True,
            desc: str = "preparing") -> ShardedSplit:
  """Builds the missing shards of a split and returns it with its manifest.

  Args:
    spec: the task's `ShardSpec`.
    records: the split's records, streamed (an iterable; read once, never held whole unless
      ``spec.per_record`` is False).
    tokenizer: passed to ``spec.build``.
    directory, key, description: where the split lives, its cache key and what the key hashes.
    records_per_shard: records per block (``spec.per_record``), the most a shard holds; > 0.
    shard_bytes: the size shards are cut at (rows + meta; None: `DEFAULT_SHARD_BYTES`).
    num_workers: featurizing processes (0 or 1: this process). Their results come back in
      record order and this process writes them, so the shards do not depend on it.
    min_per_worker: the pool starts once this process has 2 x ``min_per_worker`` records to
      build (or `HOLD_BYTES` of them); fewer are built here (`HOLD_BYTES`' comment says why).
    process_index, process_count: this process builds blocks ``process_index``,
      ``process_index + process_count``, ...; process 0 writes the manifest.
    progress: a tqdm bar of records (records/s) with windows/s and shards.
  """
  from tqdm.auto import tqdm
  os.makedirs(directory, exist_ok=True)
  manifest = read_manifest(directory, key)
  per = max(int(records_per_shard), 1) if spec.per_record else None
  budget = DEFAULT_SHARD_BYTES if shard_bytes is None else max(int(shard_bytes), 1)

  def owned(k: int) -> bool:
    return k % process_count == process_index

  if manifest is not None:
    for s in manifest["shards"]:
      k, part = _name_index(s["name"])
      if owned(k) and check_shard(directory, k, key, part=part) is None:
        break
    else:  # every shard this process owns is whole
      barrier(f"shards-built-{key[:12]}", process_count)
      barrier(f"manifest-{key[:12]}", process_count)
      return ShardedSplit(directory, manifest)
    manifest = None

  # Build what is missing, streaming the records once.
  infos: dict[int, list[dict]] = {}  # block -> its whole shards' infos (this process's blocks)
  n_records = 0
  workers = max(int(num_workers), 0)
  bar = tqdm(desc=desc, unit="rec", leave=False, **({} if progress else {"disable": True}))
  t0, windows_done, shards_done = time.time(), 0, 0
  writer: ShardWriter | None = None  # the open block's

  def finish_block() -> None:
    nonlocal writer, windows_done, shards_done
    if writer is not None:
      new = writer.finish()
      infos[writer.index].extend(new)
      windows_done += sum(i["windows"] for i in new)
      shards_done += len(new)
      bar.set_postfix(windows_s=f"{windows_done / max(time.time() - t0, 1e-9):.1f}",
                      shards=shards_done)
      writer = None

  def consume(i: int, features: Features) -> None:  # in record order
    nonlocal writer
    k = i // per
    if writer is None or writer.index != k:
      finish_block()
      writer = ShardWriter(directory=directory, key=key, index=k, start=i, merge=spec.merge,
                           shard_bytes=budget, part=len(infos[k]), process_index=process_index)
    writer.add(features, i)

  pool = None
  use_pool = workers > 1 and spec.per_record
  hold_records = 2 * max(int(min_per_worker), 1)
  held: list = []  # (record index, pickled record) until the pool starts (or the split ends)
  held_bytes = 0
  featurize = dict(build=spec.build, options=dict(spec.options), validate=spec.validate)
  pending: collections.deque = collections.deque()  # (record indices, future), in order
  group: list = []  # (record index, pickled record) of the next task
  group_bytes = 0
  feature_bytes = 0  # the most one record's features took so far (0: no result yet)

  def drain(keep: int) -> None:
    nonlocal feature_bytes
    while len(pending) > keep:
      indices, fut = pending.popleft()
      for i, features in zip(indices, fut.result()):
        feature_bytes = max(feature_bytes, 1, _features_nbytes(features))
        consume(i, features)

  def flush() -> None:
    nonlocal group, group_bytes
    if group:
      pending.append(([i for i, _ in group],
                      pool.submit(_featurize_in_worker, [b for _, b in group], featurize)))
      group, group_bytes = [], 0
    drain(2 * workers)  # bounded: at most 2 tasks per worker in flight

  def to_pool(i: int, blob: bytes) -> None:
    nonlocal group_bytes
    group.append((i, blob))
    group_bytes += len(blob)
    if (not feature_bytes or len(group) >= GROUP_RECORDS
        or group_bytes + len(group) * feature_bytes >= GROUP_BYTES):
      flush()

  def submit(i: int, rec) -> None:
    nonlocal pool, held_bytes
    if not use_pool:
      consume(i, featurize_record(rec, tokenizer, **featurize))
      return
    blob = pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)
    if pool is not None:
      to_pool(i, blob)
      return
    held.append((i, blob))
    held_bytes += len(blob)
    if len(held) >= hold_records or held_bytes >= HOLD_BYTES:  # enough to pay for workers
      pool = concurrent.futures.ProcessPoolExecutor(
          max_workers=workers, mp_context=parallel._context(),
          initializer=parallel._init_worker, initargs=(tokenizer,))
      for j, b in held:
        to_pool(j, b)
      held.clear()

  try:
    if per is None:  # the whole split is one unit
      chunk = list(records)
      n_records = len(chunk)
      bar.update(n_records)
      if owned(0):
        infos[0] = [check_shard(directory, 0, key) or build_shard(
            chunk, index=0, start=0, directory=directory, key=key, build=spec.build,
            merge=spec.merge, options=dict(spec.options), tokenizer=tokenizer,
            check=spec.check, validate=spec.validate, process_index=process_index)]
      chunk = []
    else:
      resume, first = 0, None  # the owned block's first record still to build
      for i, rec in enumerate(records):
        n_records = i + 1
        bar.update(1)
        k = i // per
        if not owned(k):
          continue
        if i == k * per:  # a block starts: its whole shards are kept, it resumes after them
          infos[k], resume = block_parts(directory, k, key, i)
          windows_done += sum(info["windows"] for info in infos[k])
          shards_done += len(infos[k])
        if i < resume:
          continue
        if spec.check is not None:  # (e.g. as many options as the first record)
          first = rec if first is None else first
          spec.check([first, rec])
        submit(i, rec)
      for i, blob in held:  # too few records to start workers for
        consume(i, featurize_record(pickle.loads(blob), tokenizer, **featurize))
      held.clear()
      if pool is not None:
        flush()
        drain(0)
      finish_block()
      if n_records == 0 and owned(0):  # an empty split: one empty shard
        infos[0] = [check_shard(directory, 0, key) or build_shard(
            [], index=0, start=0, directory=directory, key=key, build=spec.build,
            merge=spec.merge, options=dict(spec.options), tokenizer=tokenizer,
            check=spec.check, validate=spec.validate, process_index=process_index)]
  except BaseException:
    if writer is not None:
      writer.abort()
    for _, fut in pending:
      fut.cancel()
    raise
  finally:
    bar.close()
    if pool is not None:
      pool.shutdown(wait=True, cancel_futures=True)

  num_blocks = 1 if per is None else max(-(-n_records // per), 1)
  barrier(f"shards-built-{key[:12]}", process_count)
  if process_index == 0:
    # Every process is done writing shards: what a killed earlier run left half-written goes.
    remove_stale_temporaries(directory)
    all_infos = []
    for k in range(num_blocks):
      start = 0 if per is None else k * per
      end = n_records if per is None else min(start + per, n_records)
      got = infos.get(k)
      if got is None:
        got, _ = block_parts(directory, k, key, start, hash_files=False)
      if not got or got[-1]["records"][1] != end:
        raise ShardError(f"feature shards of records {start}..{end - 1} "
                         f"({os.path.join(directory, shard_name(k))}, ...) are missing after "
                         f"every process prepared its shards")
      all_infos.extend(got)
    manifest = assemble_manifest(directory, key, description, all_infos, n_records)
    write_json_atomic(os.path.join(directory, MANIFEST), manifest, sort_keys=True)
  barrier(f"manifest-{key[:12]}", process_count)
  manifest = read_manifest(directory, key)
  if manifest is None:
    raise ShardError(f"no manifest in {directory} after preparing")
  return ShardedSplit(directory, manifest)


def _features_nbytes(features: Features) -> int:
  """Bytes of ``features``' arrays (rows and meta; the meta's other values are left out)."""
  return (sum(np.asarray(v).nbytes for v in features.arrays.values())
          + sum(v.nbytes for v in features.meta.values() if isinstance(v, np.ndarray)))


def _featurize_in_worker(blobs: list[bytes], featurize: dict) -> list[Features]:
  return [featurize_record(pickle.loads(b), parallel._worker_tokenizer, **featurize)
          for b in blobs]
