"""The files of feature shards (`poi_jax.data.shards`): one shard's ArrayRecord rows, meta and
info, written atomically and checked by sha256; the manifest; grain's random access to rows."""
from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import tempfile
import zipfile
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from poi_jax.data.features.base import Features
from poi_jax.data.shard_keys import FORMAT_VERSION, file_sha256

MANIFEST = "manifest.json"
# ArrayRecord: group_size 1 is what grain's random access needs (the writer's default is 65536).
WRITER_OPTIONS = "group_size:1"
_JSON_META = "__json__"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed, so a rebuilt meta file is byte-identical

log = logging.getLogger("poi_jax.data.shards")


class ShardError(ValueError):
  """A prepared split that cannot be used (the message names the file and says why)."""


# ---- one shard ----------------------------------------------------------------------------------

def shard_name(index: int) -> str:
  return f"shard-{index:05d}"


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
          "layout": row_layout(arrays), "built_by": process_index,
          "files": {os.path.basename(p): {"bytes": os.path.getsize(p), "sha256": file_sha256(p)}
                    for p in (rows_path, meta_path)}}
  from poi_jax.io import write_json_atomic
  write_json_atomic(os.path.join(directory, name + ".json"), info, sort_keys=True)
  return info


def check_shard(directory: str, index: int, key: str, *, hash_files: bool = True) -> dict | None:
  """The shard's info when it is whole (info present, same key, files of the recorded size and
  sha256); else None, after logging one line that names the shard and says why (a missing shard
  is not logged: it was never built)."""
  name = shard_name(index)
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
      raise ShardError(f"shard {shard_name(info['index'])} in {directory} has arrays "
                       f"{info['layout']}, the first shard {layout}")
  windows = int(sum(i["windows"] for i in infos))
  shards, w0 = [], 0
  for info in infos:
    name = shard_name(info["index"])
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
