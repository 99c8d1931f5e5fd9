"""Feature shards on disk: a split's features as ArrayRecord files plus one JSON manifest.

Layout of one prepared split (``<data.cache_dir>/<task>-<split>-<key[:16]>/``)::

  shard-00000.array_record   one record per window (row): every array's row, raw bytes
  shard-00000.meta.npz       the shard's decoding metadata (offsets, ids, ...), deterministic zip
  shard-00000.json           the shard's info: record range, windows, sizes and sha256 of both
  shard-00000-0001.*         block 0's next shard, when block 0 outgrew ``data.shard_bytes``
  ...
  manifest.json              the cache key, counts, every array's shape/dtype, every shard

Block ``k`` is records ``[k * S, (k + 1) * S)`` (``S`` = ``data.records_per_shard``): the unit of
the split between processes (with N processes, process i builds blocks i, i+N, ...), known before
anything is featurized. A block's records are featurized one at a time (in this process, or in
worker processes whose results come back in record order) and each record's windows are appended
to the open shard file at once (`ShardWriter`); the shard is closed after the first record that
brings its rows and meta to ``data.shard_bytes`` (default `DEFAULT_SHARD_BYTES`), or at the
block's end, and the block's next shard (``shard-0000k-0001``, ...) starts. So memory holds the
open shard's meta (at most about ``shard_bytes``) and a bounded number of records in flight,
never a shard's rows and never a number of records whose size depends on their length; the cuts
depend only on the records and the options, never on the number of workers or processes. A task
whose features are not built record by record, NarrativeQA, has one shard (`build_shard`).

Every file is written under a temporary name and moved into place with ``os.replace``, the info
file last, so a killed run leaves only whole shards and a rerun builds only what is missing (a
block resumes after its last whole shard). Every process checks its shards' sha256 against their
info before use; a truncated or corrupt shard is named in one line and rebuilt. Process 0 writes
the manifest once every block is there; everybody waits for it (a barrier over
`jax.distributed`).

The cache key hashes the source file's bytes (``identity.json`` in the cache directory memoises
the hash by path, size and mtime), the reader's options, the caps, the tokenizer, every feature
option and version, ``S``, ``shard_bytes`` and `FORMAT_VERSION`: another value of any of them is
another directory, never a stale read.

Rows keep today's order, and indices inside the arrays (``example_index``) are global, so the
concatenated shards are bit for bit the arrays the in-memory featurizer builds.

The module reads top-down: the cache keys, the files (one shard's, then a prepared split's: the
manifest and grain's random access to rows), and the building (`ShardSpec`, `ShardWriter`,
`prepare`).
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import io
import json
import logging
import os
import pickle
import tempfile
import time
import zipfile
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from poi_jax.data import buckets, parallel
from poi_jax.data.features.base import Features
from poi_jax.io import write_json_atomic


# ------------------------------------------------------------------------------------------------
# Cache keys: hashes of the data source's bytes, the tokenizer and every option, so another
# value of any of them is another directory
# ------------------------------------------------------------------------------------------------
# Bump when the shard files' layout or the manifest's meaning changes (2: shards cut by size
# inside blocks of records).
FORMAT_VERSION = 2
# The size a shard's rows + meta, uncompressed, are cut at (``data.shard_bytes``): what `prepare`
# holds of an open shard (its meta) stays under it, and evaluation loads one shard at a time.
DEFAULT_SHARD_BYTES = 64 << 20


def _sha(data: str | bytes) -> str:
  return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def file_sha256(path: str, chunk: int = 1 << 20) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(chunk), b""):
      h.update(block)
  return h.hexdigest()


def tokenizer_fingerprint(tokenizer) -> str | None:
  """Hash of everything in a fast tokenizer that changes its output (None: no tokenizer).

  ``backend_tokenizer.to_str()`` is the whole ``tokenizer.json`` but also the truncation/padding
  of the *last* call, which is call state, not identity: those two entries are dropped.
  """
  if tokenizer is None:
    return None
  backend = getattr(tokenizer, "backend_tokenizer", None)
  if backend is None:
    raise ValueError(f"{type(tokenizer).__name__} is not a fast tokenizer (no "
                     f"backend_tokenizer); the features need offsets from a fast tokenizer")
  spec = json.loads(backend.to_str())
  spec.pop("truncation", None)
  spec.pop("padding", None)
  ident = {"class": type(tokenizer).__name__, "tokenizer_json": spec,
           "padding_side": getattr(tokenizer, "padding_side", None),
           "truncation_side": getattr(tokenizer, "truncation_side", None)}
  return _sha(json.dumps(ident, sort_keys=True))


def source_identity(source: str, memo_dir: str | None = None) -> str:
  """A hash of the data ``source``'s bytes (a file, or every file under a directory, by relative
  path); a non-local source (``tfds:...``) is identified by its name. ``memo_dir``: keeps the
  hashes by (path, size, mtime) in ``identity.json`` there, so a 40 GB corpus is hashed once."""
  if not source or not os.path.exists(source):
    return _sha(f"name:{source}")
  files = ([source] if os.path.isfile(source) else
           sorted(os.path.join(r, f) for r, _, fs in os.walk(source) for f in fs))
  memo_path = os.path.join(memo_dir, "identity.json") if memo_dir else None
  memo: dict = {}
  if memo_path and os.path.exists(memo_path):
    try:
      with open(memo_path) as f:
        memo = json.load(f)
    except (OSError, ValueError):
      memo = {}
  h, changed = hashlib.sha256(), False
  for path in files:
    st = os.stat(path)
    tag = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}"
    if tag not in memo:
      memo[tag], changed = file_sha256(path), True
    rel = os.path.relpath(path, source) if path != source else ""
    h.update(f"{rel}\0{memo[tag]}\n".encode())
  if changed and memo_path:
    try:
      write_json_atomic(memo_path, memo, sort_keys=True)
    except OSError:  # a read-only cache directory only costs the next run a re-hash
      pass
  return h.hexdigest()


def make_key(spec, *, task: str, split: str, source_id: str, tokenizer_id,
             skip: int, limit: int | None, records_per_shard: int,
             shard_bytes: int | None = None) -> tuple[str, dict]:
  """The cache key of a split (sha256) and what it hashes (stored in the manifest);
  ``shard_bytes`` None: `DEFAULT_SHARD_BYTES`."""
  shard_bytes = DEFAULT_SHARD_BYTES if shard_bytes is None else int(shard_bytes)
  parts = {"format": FORMAT_VERSION, "task": task, "split": split, "kind": spec.kind,
           "options": dict(spec.options), "key_options": dict(spec.key_options),
           "read_options": dict(spec.read_options), "source": source_id,
           "tokenizer": tokenizer_id, "skip": int(skip),
           "limit": None if limit is None or limit < 0 else int(limit),
           "records_per_shard": int(records_per_shard) if spec.per_record else None,
           "shard_bytes": shard_bytes if spec.per_record else None}
  return _sha(json.dumps(parts, sort_keys=True, default=str)), parts


# ------------------------------------------------------------------------------------------------
# The files: one shard's ArrayRecord rows, meta and info, written atomically and checked by
# sha256; the manifest; grain's random access to rows
# ------------------------------------------------------------------------------------------------
MANIFEST = "manifest.json"
# ArrayRecord: group_size 1 is what grain's random access needs (the writer's default is 65536).
WRITER_OPTIONS = "group_size:1"
_JSON_META = "__json__"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so a rebuilt meta file is byte-identical

log = logging.getLogger("poi_jax.data.shards")


class ShardError(ValueError):
  """A prepared split that cannot be used (the message names the file and says why)."""


# ---- one shard ----------------------------------------------------------------------------------

def shard_name(index: int, part: int = 0) -> str:
  """Shard ``part`` of block ``index``: ``shard-00003``, then ``shard-00003-0001``, ..."""
  return f"shard-{index:05d}" + (f"-{part:04d}" if part else "")


def _name_index(name: str) -> tuple[int, int]:
  """``shard-00003-0001`` -> (3, 1): the block and the part."""
  fields = name.split("-")
  return int(fields[1]), int(fields[2]) if len(fields) > 2 else 0


def row_layout(arrays: Mapping[str, np.ndarray]) -> dict[str, list]:
  """``{name: [row shape, dtype str]}`` in the order rows are encoded (sorted names)."""
  return {k: [list(np.shape(arrays[k])[1:]), np.asarray(arrays[k]).dtype.str]
          for k in sorted(arrays)}


def encode_rows(arrays: Mapping[str, np.ndarray]) -> Iterable[bytes]:
  """One record per row: every array's row (C order, in `row_layout` order), concatenated."""
  names = sorted(arrays)
  cols = [np.ascontiguousarray(arrays[k]) for k in names]
  n = len(cols[0]) if cols else 0
  for i in range(n):
    yield b"".join(c[i].tobytes() for c in cols)


def decode_rows(records: Sequence[bytes], layout: Mapping[str, list],
                keys: Iterable[str] | None = None) -> dict[str, np.ndarray]:
  """The inverse of `encode_rows` for a list of records: ``{name: (len(records), *row shape)}``."""
  specs, offset = [], 0
  for name, (shape, dtype) in layout.items():
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    specs.append((name, shape, np.dtype(dtype), offset, nbytes))
    offset += nbytes
  wanted = set(layout if keys is None else keys)
  buf = np.frombuffer(b"".join(records), np.uint8).reshape(len(records), offset)
  return {name: np.ascontiguousarray(buf[:, o:o + nb]).view(dt).reshape((len(records), *shape))
          for name, shape, dt, o, nb in specs if name in wanted}


def _npy_bytes(value: np.ndarray) -> bytes:
  out = io.BytesIO()
  np.lib.format.write_array(out, np.asarray(value), allow_pickle=False)
  return out.getvalue()


def write_meta(path: str, meta: Mapping[str, Any]) -> None:
  """``meta``'s numpy arrays as ``.npy`` members, the rest as one JSON member, in a zip with
  fixed timestamps (np.load reads it; a rebuild is byte-identical)."""
  json_meta = {k: v for k, v in meta.items() if not isinstance(v, np.ndarray)}
  try:
    blob = json.dumps(json_meta, sort_keys=True).encode()
  except TypeError as e:
    raise TypeError(f"features meta must be numpy arrays or JSON values: {e}") from None
  with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
    for name in sorted(k for k, v in meta.items() if isinstance(v, np.ndarray)):
      zf.writestr(zipfile.ZipInfo(name + ".npy", _ZIP_TIME), _npy_bytes(meta[name]))
    zf.writestr(zipfile.ZipInfo(_JSON_META + ".npy", _ZIP_TIME),
                _npy_bytes(np.frombuffer(blob, np.uint8)))


def read_meta(path: str) -> dict:
  with np.load(path, allow_pickle=False) as z:
    meta = json.loads(bytes(z[_JSON_META]).decode())
    meta.update({k: z[k] for k in z.files if k != _JSON_META})
  return meta


_TMP_PREFIX, _TMP_SUFFIX = ".", ".tmp"  # `_atomic`'s temporaries: hidden, never a shard's name


def remove_stale_temporaries(directory: str) -> int:
  """Deletes the temporaries of `_atomic` writes that a killed process left in ``directory``
  (SIGKILL runs no cleanup); returns how many. Call it only when no process is writing there
  (after every process's shards are built)."""
  removed = 0
  for name in os.listdir(directory):
    if name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX):
      try:
        os.remove(os.path.join(directory, name))
        removed += 1
      except FileNotFoundError:
        pass
  if removed:
    log.warning("removed %d half-written temporary file(s) left in %s by an interrupted run",
                removed, directory)
  return removed


def _atomic(directory: str, final: str, write: Callable[[str], None]) -> None:
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX)
  os.close(fd)
  try:
    write(tmp)
    with open(tmp, "rb+") as f:
      os.fsync(f.fileno())
    os.replace(tmp, final)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def _write_array_record(path: str, records: Iterable[bytes]) -> int:
  from array_record.python import array_record_module
  writer = array_record_module.ArrayRecordWriter(path, WRITER_OPTIONS)
  n = 0
  try:
    for rec in records:
      writer.write(rec)
      n += 1
    if not writer.ok():  # a full disk or an I/O error shows up here
      raise OSError(f"writing {path} failed (ArrayRecord writer not ok)")
  finally:
    writer.close()
  return n


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


# ---- a prepared split ---------------------------------------------------------------------------

class ShardRows:
  """Random access to rows of a prepared split through grain's ``ArrayRecordDataSource``.

  ``len(rows)`` windows; ``rows.get(indices)`` -> ``{name: (len(indices), ...)}`` for ``keys``.
  """

  def __init__(self, paths: Sequence[str], layout: Mapping[str, list], num_rows: int,
               keys: Iterable[str] | None = None):
    import grain
    self.paths = list(paths)
    self.layout = dict(layout)
    self.keys = list(self.layout if keys is None else [k for k in keys if k in self.layout])
    self._num = int(num_rows)
    self._source = grain.sources.ArrayRecordDataSource(self.paths) if num_rows else None

  def __len__(self) -> int:
    return self._num

  def get(self, indices) -> dict[str, np.ndarray]:
    idx = [int(i) for i in np.asarray(indices).reshape(-1)]
    return decode_rows(self._source.__getitems__(idx), self.layout, self.keys)

  def shapes(self) -> dict[str, tuple]:
    return {k: (self._num, *self.layout[k][0]) for k in self.keys}


@dataclasses.dataclass
class ShardedSplit:
  """A prepared split: its directory and manifest (and the task's ``merge``: evaluation makes a
  shard's record indices local with it)."""
  directory: str
  manifest: dict
  merge: Callable | None = None

  @property
  def num_windows(self) -> int:
    return int(self.manifest["num_windows"])

  @property
  def num_examples(self) -> int:
    return int(self.manifest["num_examples"])

  def shard_paths(self) -> list[str]:
    return [os.path.join(self.directory, s["name"] + ".array_record")
            for s in self.manifest["shards"] if s["windows"]]

  def rows(self, keys: Iterable[str] | None = None) -> ShardRows:
    return ShardRows(self.shard_paths(), self.manifest["layout"], self.num_windows, keys)

  def array_shapes(self) -> dict[str, tuple]:
    return {k: tuple(v["shape"]) for k, v in self.manifest["arrays"].items()}

  def window_lengths(self) -> np.ndarray:
    """Real tokens of every window ``(num_windows,)``, from the shards' info files (no row is
    read); shards written before they kept lengths: from their ``attention_mask`` rows."""
    parts = []
    for s in self.manifest["shards"]:
      with open(os.path.join(self.directory, s["name"] + ".json")) as f:
        lengths = json.load(f).get("lengths")
      if lengths is None or len(lengths) != s["windows"]:
        w0 = int(s.get("first_window", sum(len(p) for p in parts)))
        rows = self.rows(["attention_mask"])
        lengths = buckets.window_lengths(rows.get(np.arange(w0, w0 + int(s["windows"])))) \
            if s["windows"] else []
      parts.append(np.asarray(lengths, np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)

  def shard_features(self, index: int) -> Features:
    """The arrays and meta of shard ``index`` (its position in the manifest): the windows of
    records ``manifest["shards"][index]["records"]``, record indices global. Evaluation decodes
    a split one shard at a time with it (`poi_jax.train.eval_stream`); training never calls it."""
    from array_record.python import array_record_module
    s = self.manifest["shards"][index]
    path = os.path.join(self.directory, s["name"] + ".array_record")
    records = []
    if s["windows"]:
      reader = array_record_module.ArrayRecordReader(path)
      try:
        records = reader.read_all()
      finally:
        reader.close()
    layout = s["layout"]
    arrays = (decode_rows(records, layout) if records else
              {k: np.zeros((0, *shape), dtype) for k, (shape, dtype) in layout.items()})
    return Features(arrays, read_meta(os.path.join(self.directory, s["name"] + ".meta.npz")))


def read_manifest(directory: str, key: str) -> dict | None:
  path = os.path.join(directory, MANIFEST)
  try:
    with open(path) as f:
      manifest = json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as e:
    log.warning("feature manifest %s is unreadable (%s): rebuilding it", path, e)
    return None
  if manifest.get("format") != FORMAT_VERSION or manifest.get("key") != key:
    log.warning("feature manifest %s was written for another key: rebuilding it", path)
    return None
  return manifest


def assemble_manifest(directory: str, key: str, description: dict, infos: list[dict],
                      num_examples: int) -> dict:
  """The manifest of a split from its shards' infos (in order)."""
  layout = next((i["layout"] for i in infos if i["windows"]), infos[0]["layout"] if infos else {})
  for info in infos:
    if info["windows"] and info["layout"] != layout:
      raise ShardError(f"shard {shard_name(info['index'], info.get('part', 0))} in {directory} "
                       f"has arrays "
                       f"{info['layout']}, the first shard {layout}")
  windows = int(sum(i["windows"] for i in infos))
  shards, w0 = [], 0
  for info in infos:
    name = shard_name(info["index"], info.get("part", 0))
    shards.append({"name": name, "records": info["records"], "windows": info["windows"],
                   "first_window": w0, "layout": info["layout"], "files": info["files"]})
    w0 += info["windows"]
  return {"format": FORMAT_VERSION, "key": key, "description": description,
          "num_examples": num_examples, "num_windows": windows, "num_shards": len(infos),
          "layout": layout,
          "arrays": {k: {"shape": [windows, *shape], "dtype": dtype}
                     for k, (shape, dtype) in layout.items()},
          "shards": shards,
          # Evaluation maps window i back to its record through the ``example_index`` array (a
          # global record index) and the meta files (offsets, ids) of each shard.
          "window_to_example": "array example_index" if "example_index" in layout else
                               "one window per record"}


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


def prepare(spec: ShardSpec, records: Iterable, tokenizer, *, directory: str, key: str,
            description: dict, records_per_shard: int, shard_bytes: int | None = None,
            num_workers: int = 0, process_index: int = 0, process_count: int = 1,
            progress: bool = True, desc: str = "preparing") -> ShardedSplit:
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
  if workers > 1 and spec.per_record:
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=parallel._context(), initializer=parallel._init_worker,
        initargs=(tokenizer,))
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

  def submit(i: int, rec) -> None:
    nonlocal group_bytes
    if pool is None:
      consume(i, featurize_record(rec, tokenizer, **featurize))
      return
    blob = pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)
    group.append((i, blob))
    group_bytes += len(blob)
    if (not feature_bytes or len(group) >= GROUP_RECORDS
        or group_bytes + len(group) * feature_bytes >= GROUP_BYTES):
      flush()

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
