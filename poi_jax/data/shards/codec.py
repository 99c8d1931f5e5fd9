"""One shard's files: rows as ArrayRecord records (`encode_rows` / `decode_rows`), the decoding
metadata as a deterministic ``.npz``, names, and the atomic writes every file goes through.

Part of `poi_jax.data.shards` (the package docstring: the layout and the whole story)."""
from __future__ import annotations


import io
import json
import logging
import os
import tempfile
import zipfile
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np


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
