"""Writing shards: a block of records featurized and appended record by record (`ShardWriter`),
cut by size, each shard checked against its info (sha256) before use.

Part of `poi_jax.data.shards` (the package docstring: the layout and the whole story)."""
from __future__ import annotations


import json
import os
import tempfile
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from poi_jax.data import buckets
from poi_jax.data.features.base import Features
from poi_jax.data.shards.codec import (
    _TMP_PREFIX, _TMP_SUFFIX, WRITER_OPTIONS, ShardError, _atomic, _write_array_record,
    encode_rows, log, row_layout, shard_name, write_meta)
from poi_jax.data.shards.keys import DEFAULT_SHARD_BYTES, FORMAT_VERSION, file_sha256
from poi_jax.io import write_json_atomic


def build_shard(records: Sequence, *, index: int, start: int, directory: str, key: str,
                build: Callable, merge: Callable, options: Mapping[str, Any], tokenizer,
                check: Callable | None = None, validate: Callable | None = None,
                process_index: int = 0) -> dict:
  """The unit of work, a pure function: ``records`` (records ``start ..`` of the split) -> one
  finished shard ``index`` in ``directory`` (its ``.array_record``, ``.meta.npz`` and, last, its
  ``.json`` info). Returns the info. Deterministic: the same records give the same bytes."""
  if check is not None:
    check(records)
  features = build(records, tokenizer, **options)
  features = merge([features], [start])  # record indices made global
  if validate is not None:
    validate(features)
  name = shard_name(index)
  os.makedirs(directory, exist_ok=True)
  rows_path = os.path.join(directory, name + ".array_record")
  meta_path = os.path.join(directory, name + ".meta.npz")
  arrays = {k: np.asarray(v) for k, v in features.arrays.items()}
  counts = {len(v) for v in arrays.values()}
  if len(counts) > 1:
    raise ShardError(f"shard {name}: arrays of different lengths {sorted(counts)}")
  windows = counts.pop() if counts else 0
  _atomic(directory, rows_path, lambda p: _write_array_record(p, encode_rows(arrays)))
  _atomic(directory, meta_path, lambda p: write_meta(p, features.meta))
  info = {"format": FORMAT_VERSION, "key": key, "index": index,
          "records": [start, start + len(records)], "windows": windows,
          # real tokens per window: the training batch plan of length buckets reads these
          # instead of the rows (poi_jax/data/buckets.py)
          "lengths": buckets.window_lengths(arrays).tolist() if "attention_mask" in arrays
                     else None,
          "layout": row_layout(arrays), "built_by": process_index,
          "files": {os.path.basename(p): {"bytes": os.path.getsize(p), "sha256": file_sha256(p)}
                    for p in (rows_path, meta_path)}}
  write_json_atomic(os.path.join(directory, name + ".json"), info, sort_keys=True)
  return info


def _meta_nbytes(meta: Mapping[str, Any]) -> int:
  """About what ``meta`` takes in the meta file: its arrays' bytes plus its other values' JSON
  (deterministic, so the cuts that depend on it are)."""
  return sum(v.nbytes if isinstance(v, np.ndarray) else len(json.dumps(v, sort_keys=True, default=str))
             for v in meta.values())


class ShardWriter:
  """The shards of one block, written as its records' features come (`prepare`, `build_block`).

  ``add(features, record)`` takes the features of one record (record indices local to it) and
  appends its rows to the open shard's ArrayRecord file at once; its meta is kept (as the
  record's features without rows) until the shard closes, after the first record that brings
  the shard's rows and meta to ``shard_bytes``; ``finish()`` closes the last one. Each shard
  is written atomically (temporary name, ``fsync``, ``os.replace``), its info last, as
  `build_shard` writes one. What the open shard holds in memory is its meta:
  ``buffered_bytes`` (and its maximum, ``peak_buffered_bytes``: under ``shard_bytes`` plus one
  record's, a test checks it).

  Args:
    directory, key: the split's directory and cache key.
    index: the block.
    start, part: the first record (global index) and the part of the first shard written
      (a block resumed after its whole shards starts after them).
    merge: the task's merge (a shard's meta from its records' meta).
    shard_bytes: the size a shard is cut at.
  """

  def __init__(self, *, directory: str, key: str, index: int, start: int, merge: Callable,
               shard_bytes: int, part: int = 0, process_index: int = 0):
    self.directory, self.key, self.index, self.merge = directory, key, index, merge
    self.shard_bytes = max(int(shard_bytes), 1)
    self.process_index = process_index
    self.part, self.next_record = part, start
    self.infos: list[dict] = []
    self.buffered_bytes = self.peak_buffered_bytes = 0
    self._writer = None

  def _open(self) -> None:
    from array_record.python import array_record_module
    os.makedirs(self.directory, exist_ok=True)
    fd, self._tmp = tempfile.mkstemp(dir=self.directory, prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX)
    os.close(fd)
    self._writer = array_record_module.ArrayRecordWriter(self._tmp, WRITER_OPTIONS)
    self._first, self._layout = self.next_record, None
    self._windows, self._row_bytes, self._metas, self._starts = 0, 0, [], []
    self._lengths: list[int] | None = []
    self.buffered_bytes = 0

  def add(self, features: Features, record: int) -> None:
    """Appends the features of record ``record`` (the block's next record, global index)."""
    if record != self.next_record:
      raise ShardError(f"shard {shard_name(self.index, self.part)}: record {record} given "
                       f"where record {self.next_record} comes next")
    if self._writer is None:
      self._open()
    features = self.merge([features], [record])  # record indices made global
    arrays = {k: np.asarray(v) for k, v in features.arrays.items()}
    counts = {len(v) for v in arrays.values()}
    if len(counts) > 1:
      raise ShardError(f"record {record}: arrays of different lengths {sorted(counts)}")
    windows = counts.pop() if counts else 0
    layout = row_layout(arrays)
    if self._layout is None or (windows and not self._windows):
      self._layout = layout  # (a record without windows may have other row shapes)
    elif windows and layout != self._layout:
      raise ShardError(f"record {record} has arrays {layout}, the first record of shard "
                       f"{shard_name(self.index, self.part)} {self._layout}")
    for row in encode_rows(arrays):
      self._writer.write(row)
      self._row_bytes += len(row)
    self._windows += windows
    if self._lengths is not None and windows:
      # real tokens per window: the training batch plan of length buckets reads these instead of
      # the rows (poi_jax/data/buckets.py); 4 bytes a window
      if "attention_mask" in arrays:
        self._lengths.extend(buckets.window_lengths(arrays).tolist())
      else:
        self._lengths = None
    # What stays until the shard closes: the record's meta (its rows are on disk; the merge
    # that joins the metas gets empty arrays of the same names).
    self._metas.append(Features({k: np.zeros(0, np.int32) for k in arrays}, features.meta))
    self._starts.append(0)  # (its record indices are global already)
    self.buffered_bytes += _meta_nbytes(features.meta)
    self.peak_buffered_bytes = max(self.peak_buffered_bytes, self.buffered_bytes)
    self.next_record = record + 1
    if self._row_bytes + self.buffered_bytes >= self.shard_bytes:
      self._close()

  def _close(self) -> None:
    writer, self._writer = self._writer, None
    name = shard_name(self.index, self.part)
    rows_path = os.path.join(self.directory, name + ".array_record")
    meta_path = os.path.join(self.directory, name + ".meta.npz")
    try:
      ok = writer.ok()  # a full disk or an I/O error shows up here
      writer.close()
      if not ok:
        raise OSError(f"writing {rows_path} failed (ArrayRecord writer not ok)")
      with open(self._tmp, "rb+") as f:
        os.fsync(f.fileno())
      os.replace(self._tmp, rows_path)
    except BaseException:
      if os.path.exists(self._tmp):
        os.remove(self._tmp)
      raise
    meta = self.merge(self._metas, self._starts).meta
    self._metas = []
    _atomic(self.directory, meta_path, lambda p: write_meta(p, meta))
    info = {"format": FORMAT_VERSION, "key": self.key, "index": self.index, "part": self.part,
            "records": [self._first, self.next_record], "windows": self._windows,
            "lengths": self._lengths if self._windows else None,
            "layout": self._layout, "built_by": self.process_index,
            "files": {os.path.basename(p): {"bytes": os.path.getsize(p),
                                            "sha256": file_sha256(p)}
                      for p in (rows_path, meta_path)}}
    write_json_atomic(os.path.join(self.directory, name + ".json"), info, sort_keys=True)
    self.infos.append(info)
    self.part += 1
    self.buffered_bytes = 0

  def finish(self) -> list[dict]:
    """Closes the open shard (if a record went in since the last one closed); returns the info
    of every shard this writer closed."""
    if self._writer is not None:
      self._close()
    return self.infos

  def abort(self) -> None:
    """Drops the open shard's temporary file (on an error)."""
    if self._writer is not None:
      writer, self._writer = self._writer, None
      try:
        writer.close()
      finally:
        if os.path.exists(self._tmp):
          os.remove(self._tmp)


def featurize_record(record, tokenizer, *, build: Callable, options: Mapping[str, Any],
                     validate: Callable | None = None) -> Features:
  """One record's features (record indices local: 0), validated."""
  features = build([record], tokenizer, **options)
  if validate is not None:
    validate(features)
  return features


def build_block(records: Sequence, *, index: int, start: int, directory: str, key: str,
                build: Callable, merge: Callable, options: Mapping[str, Any], tokenizer,
                shard_bytes: int | None = None, check: Callable | None = None,
                validate: Callable | None = None, process_index: int = 0) -> list[dict]:
  """The unit of work of the Beam pipeline, a pure function: the records of block ``index``
  (records ``start ..`` of the split) -> its finished shards (one or more, cut by size as
  `prepare` cuts them: the same bytes). Returns their infos in order."""
  writer = ShardWriter(directory=directory, key=key, index=index, start=start, merge=merge,
                       shard_bytes=DEFAULT_SHARD_BYTES if shard_bytes is None else shard_bytes,
                       process_index=process_index)
  try:
    for i, record in enumerate(records):
      if check is not None:
        check([records[0], record])
      writer.add(featurize_record(record, tokenizer, build=build, options=options,
                                  validate=validate), start + i)
    return writer.finish()
  except BaseException:
    writer.abort()
    raise


def block_parts(directory: str, index: int, key: str, start: int, *,
                hash_files: bool = True) -> tuple[list[dict], int]:
  """The whole shards of block ``index`` (its first record ``start``), in order, as far as they
  follow each other without a gap, and the record after the last one: where the block resumes."""
  infos, nxt = [], start
  while True:
    info = check_shard(directory, index, key, hash_files=hash_files, part=len(infos))
    if info is None or info.get("records", [None])[0] != nxt:
      return infos, nxt
    infos.append(info)
    nxt = info["records"][1]


def check_shard(directory: str, index: int, key: str, *, hash_files: bool = True,
                part: int = 0) -> dict | None:
  """The info of shard ``part`` of block ``index`` when it is whole (info present, same key,
  files of the recorded size and sha256); else None, after logging one line that names the shard
  and says why (a missing shard is not logged: it was never built)."""
  name = shard_name(index, part)
  info_path = os.path.join(directory, name + ".json")
  if not os.path.exists(info_path):
    return None
  why = None
  try:
    with open(info_path) as f:
      info = json.load(f)
    if info.get("format") != FORMAT_VERSION or info.get("key") != key:
      why = "written for another key or format"
    else:
      for fname, want in info["files"].items():
        path = os.path.join(directory, fname)
        if not os.path.exists(path):
          why = f"{fname} is missing"
        elif os.path.getsize(path) != want["bytes"]:
          why = f"{fname} has {os.path.getsize(path)} bytes, its info says {want['bytes']}"
        elif hash_files and file_sha256(path) != want["sha256"]:
          why = f"{fname} does not match its sha256 (corrupt)"
        if why:
          break
  except (OSError, ValueError, KeyError, TypeError) as e:
    why = f"unreadable info ({type(e).__name__}: {e})"
  if why:
    log.warning("feature shard %s is not usable (%s): rebuilding it", os.path.join(directory,
                                                                                   name), why)
    return None
  return info
