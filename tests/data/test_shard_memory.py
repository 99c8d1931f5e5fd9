"""`prepare` holds a bounded number of bytes of a shard, not a number of records (issue 39):
each record's windows are written as they are featurized and shards are cut at
``data.shard_bytes``, so building shards of big records keeps memory under the budget plus a
record's worth, with and without worker processes, and the shards do not depend on the number
of workers. (Before, a shard's records and windows were all held until it was written: these
tests' shard held 15x the budget.)"""
from __future__ import annotations

import json
import pathlib
import threading
import tracemalloc

import numpy as np
import pytest

from poi_jax.data import shards
from poi_jax.data.shards import build as shard_build
from poi_jax.data.features.base import Features

pytestmark = pytest.mark.required

WIDTH = 1024  # int32 columns: a window's row is 4 KiB
ROWS = 256  # windows per record: a record's rows are 1 MiB, its meta 256 KiB
RECORDS = 48  # 60 MiB of features in all
BUDGET = 4 << 20  # data.shard_bytes of these tests: 15x less than the features
RECORD_BYTES = ROWS * WIDTH * 4 + ROWS * 256 * 4 + 64


def build_big(records, tokenizer, *, seed):
  """Each record (an int) -> ROWS windows of WIDTH int32 and meta of 256 int32 per window."""
  del tokenizer
  n = len(records) * ROWS
  base = np.repeat(np.asarray(records, np.int32), ROWS)[:, None]
  arrays = {"input_ids": (base * 7 + np.arange(WIDTH, dtype=np.int32) + seed).astype(np.int32),
            "example_index": np.repeat(np.arange(len(records), dtype=np.int32), ROWS)}
  meta = {"offsets": np.broadcast_to(base, (n, 256)).astype(np.int32) + 1,
          "ids": [f"r{r}" for r in records]}
  return Features(arrays, meta)


def merge_big(parts, starts):
  arrays = {k: np.concatenate([p.arrays[k] + (s if k == "example_index" else 0)
                               for p, s in zip(parts, starts)]).astype(np.int32)
            for k in parts[0].arrays}
  return Features(arrays, {"offsets": np.concatenate([p.meta["offsets"] for p in parts]),
                           "ids": [i for p in parts for i in p.meta["ids"]]})


SPEC = shards.ShardSpec(kind="big", build=build_big, merge=merge_big, options={"seed": 3})


def _prepare(directory, workers=0, **kwargs):
  return shards.prepare(SPEC, iter(range(RECORDS)), None, directory=str(directory), key="k" * 64,
                        description={}, num_workers=workers, progress=False, **kwargs)


def _files(directory) -> dict[str, bytes]:
  return {p.name: p.read_bytes() for p in sorted(pathlib.Path(directory).iterdir())
          if p.name.startswith("shard-") or p.name == shards.MANIFEST}


def test_prepare_holds_one_shard_budget_not_the_shards_records(tmp_path, monkeypatch):
  """The default settings (here a 4 MiB shard budget, records_per_shard 1024) keep the peak of
  what `prepare` allocates under the budget plus a few records' features, where holding the
  shard's windows took all 48 records' (60 MiB)."""
  monkeypatch.setattr(shard_build, "DEFAULT_SHARD_BYTES", BUDGET)
  import tqdm.auto  # noqa: F401  (imports are not what is measured)
  from array_record.python import array_record_module  # noqa: F401
  tracemalloc.start()
  try:
    tracemalloc.reset_peak()
    prepared = _prepare(tmp_path / "s", records_per_shard=1024)
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  # One record's features, its rows made global by the merge (a copy), the open shard's meta
  # and the meta merged when it closes: a few records' worth, never the 48.
  assert peak < BUDGET + 4 * RECORD_BYTES, f"prepare held {peak / 2**20:.1f} MiB"
  m = prepared.manifest
  assert m["num_windows"] == RECORDS * ROWS and m["num_examples"] == RECORDS
  assert m["num_shards"] > 1  # cut by size
  # Each shard is whole records (evaluation hands a shard's records to the decoder).
  ranges = [s["records"] for s in m["shards"]]
  assert ranges[0][0] == 0 and ranges[-1][1] == RECORDS
  assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
  for i, s in enumerate(m["shards"]):
    f = prepared.shard_features(i)
    lo, hi = s["records"]
    assert f.meta["ids"] == [f"r{r}" for r in range(lo, hi)]
    assert np.array_equal(np.unique(f.arrays["example_index"]), np.arange(lo, hi))
    on_disk = sum(v["bytes"] for v in s["files"].values())
    assert on_disk < BUDGET + RECORD_BYTES + 4096, (s["name"], on_disk)
  rows = prepared.rows().get(np.arange(len(prepared.rows())))
  want = build_big(list(range(RECORDS)), None, seed=3)
  assert all(np.array_equal(rows[k], want.arrays[k]) for k in want.arrays)


def test_the_writer_buffers_at_most_the_budget_plus_one_record(tmp_path):
  """`ShardWriter`'s own count: the bytes it holds of the open shard (its meta; the rows go to
  disk as they come) stay under the budget plus one record's."""
  writer = shards.ShardWriter(directory=str(tmp_path), key="k", index=0, start=0,
                              merge=merge_big, shard_bytes=BUDGET)
  for r in range(RECORDS):
    writer.add(build_big([r], None, seed=0), r)
    assert writer.buffered_bytes <= BUDGET
  infos = writer.finish()
  one_meta = ROWS * 256 * 4 + len(json.dumps(["r0"]))
  assert 0 < writer.peak_buffered_bytes <= BUDGET + one_meta
  assert len(infos) > 1 and infos[-1]["records"][1] == RECORDS
  assert [i["part"] for i in infos] == list(range(len(infos)))


def test_workers_and_blocks_do_not_change_the_shards(tmp_path, monkeypatch):
  """2 worker processes (results in record order, a bounded number in flight) and 2 processes'
  blocks build byte for byte the shards of one process; the parent holds a bounded number of
  results."""
  monkeypatch.setattr(shard_build, "GROUP_BYTES", 2 * RECORD_BYTES)
  one = _prepare(tmp_path / "one", records_per_shard=16, shard_bytes=BUDGET)
  pools = _count_pools(monkeypatch)
  tracemalloc.start()
  try:
    tracemalloc.reset_peak()
    # min_per_worker=20: the first 40 records are held, then go to the pool with the rest.
    _prepare(tmp_path / "two", workers=2, min_per_worker=20, records_per_shard=16,
             shard_bytes=BUDGET)
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert pools == [2]
  assert _files(tmp_path / "one") == _files(tmp_path / "two")
  # In flight: at most 2 tasks per worker + the one being filled, of ~2 records each.
  assert peak < BUDGET + 16 * RECORD_BYTES, f"prepare held {peak / 2**20:.1f} MiB"
  # Blocks of 16 records: shards never span two blocks.
  assert all(s["records"][0] // 16 == (s["records"][1] - 1) // 16
             for s in one.manifest["shards"])
  # Two processes (threads here, meeting at the barriers): process i builds blocks i, i+2.
  both, meet = tmp_path / "hosts", threading.Barrier(2, timeout=120)
  monkeypatch.setattr(shard_build, "barrier", lambda name, count: meet.wait())
  errors = []

  def host(i):
    try:
      shards.prepare(SPEC, iter(range(RECORDS)), None, directory=str(both), key="k" * 64,
                     description={}, records_per_shard=16, shard_bytes=BUDGET,
                     process_index=i, process_count=2, progress=False)
    except BaseException as e:  # noqa: BLE001 (reported below)
      errors.append(e)
      meet.abort()

  threads = [threading.Thread(target=host, args=(i,)) for i in (0, 1)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors, errors
  built_by = {n: json.loads((both / n).read_text())["built_by"]
              for n in _files(both) if n.endswith(".json") and n != shards.MANIFEST}
  assert built_by == {s["name"] + ".json": (s["records"][0] // 16) % 2
                      for s in one.manifest["shards"]}
  same = lambda files: {n: b for n, b in files.items() if not n.endswith(".json")}
  assert same(_files(both)) == same(_files(tmp_path / "one"))
  assert (both / shards.MANIFEST).read_bytes() == (tmp_path / "one" / shards.MANIFEST).read_bytes()


def _count_pools(monkeypatch) -> list[int]:
  """The ``max_workers`` of each worker pool `prepare` starts, appended as it starts."""
  started, real = [], shard_build.concurrent.futures.ProcessPoolExecutor

  def pool(*args, max_workers, **kwargs):
    started.append(max_workers)
    return real(*args, max_workers=max_workers, **kwargs)

  monkeypatch.setattr(shard_build.concurrent.futures, "ProcessPoolExecutor", pool)
  return started


def test_a_split_under_two_workers_worth_is_built_without_starting_them(tmp_path, monkeypatch):
  """`data.num_workers=2` on 48 records (fewer than 2 x `MIN_PER_WORKER`): no worker process
  starts (each costs seconds of imports), and the shards are those of `num_workers=0`."""
  assert RECORDS < 2 * shard_build.parallel.MIN_PER_WORKER
  one = _prepare(tmp_path / "one", records_per_shard=16, shard_bytes=BUDGET)
  pools = _count_pools(monkeypatch)
  two = _prepare(tmp_path / "two", workers=2, records_per_shard=16, shard_bytes=BUDGET)
  assert pools == []
  assert _files(tmp_path / "one") == _files(tmp_path / "two")
  assert two.manifest["num_examples"] == one.manifest["num_examples"] == RECORDS


def test_a_killed_block_resumes_after_its_last_whole_shard(tmp_path):
  d = tmp_path / "s"
  first = _prepare(d, records_per_shard=1024, shard_bytes=BUDGET)
  before = _files(d)
  names = [s["name"] for s in first.manifest["shards"]]
  assert len(names) >= 4 and names[1] == "shard-00000-0001"
  for suffix in (".array_record", ".meta.npz", ".json"):  # killed while writing part 2
    (d / f"{names[2]}{suffix}").unlink(missing_ok=True)
  for name in names[3:]:
    (d / f"{name}.json").unlink()
  (d / shards.MANIFEST).unlink()
  kept = {n: (d / f"{n}.json").stat().st_mtime_ns for n in names[:2]}
  _prepare(d, records_per_shard=1024, shard_bytes=BUDGET)
  assert {n: (d / f"{n}.json").stat().st_mtime_ns for n in names[:2]} == kept
  assert _files(d) == before
