"""On-disk cache of featurised data, so that a second run starts training at once.

One cache entry is one ``.npz`` file holding every array of a `Features` (``arrays`` under
``a/<name>``, array-valued ``meta`` under ``m/<name>``) and a JSON manifest (``__manifest__``, the
UTF-8 bytes as a uint8 array: no pickle anywhere, the file loads with ``allow_pickle=False``).

Keys. An entry's file name is its *slot*: a hash of what identifies the job (the featurizer kind,
every feature option, the tokenizer, the records' source files and their number). Its *key*,
stored in the manifest, adds what may change under the same slot: the records themselves (every field of every
record, so an edited data file or RACE level is a different key) and the cache format version. A
changed data file therefore replaces its entry (stale) instead of piling up new ones. The record
count is in the slot: another ``max_*_examples`` cap is another entry, not a stale one.

Checks on load, each logged and followed by a rebuild: an unreadable or truncated file (zip
central directory or CRC error), a manifest of another format version, a key mismatch (stale), an
array missing or of another shape/dtype than the manifest says. Writes go to a temporary file in
the cache directory and are moved into place with ``os.replace``, so a reader never sees half an
entry and a crash mid-write leaves the old entry (or none).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import tempfile
import zipfile
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from poi_jax.data.features.extractive import Features

# Bump when the file layout or the meaning of the manifest changes.
CACHE_FORMAT_VERSION = 1
_MANIFEST = "__manifest__"
_ARRAY, _META = "a/", "m/"

log = logging.getLogger(__name__)


class CacheError(ValueError):
  """A cache entry that cannot be used (the message says why); the caller rebuilds it."""


def _sha(data: str | bytes) -> str:
  return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
  """Hash of everything in a fast tokenizer that changes its output.

  ``backend_tokenizer.to_str()`` is the whole ``tokenizer.json`` (model, vocabulary, normaliser,
  pre-tokeniser, post-processor, added tokens) but also the truncation/padding of the *last*
  call, which is call state, not identity: those two entries are dropped before hashing.
  """
  backend = getattr(tokenizer, "backend_tokenizer", None)
  if backend is None:
    raise CacheError(f"{type(tokenizer).__name__} is not a fast tokenizer (no "
                     f"backend_tokenizer); the features need offsets from a fast tokenizer")
  spec = json.loads(backend.to_str())
  spec.pop("truncation", None)
  spec.pop("padding", None)
  ident = {"class": type(tokenizer).__name__, "tokenizer_json": spec,
           "padding_side": getattr(tokenizer, "padding_side", None),
           "truncation_side": getattr(tokenizer, "truncation_side", None)}
  return _sha(json.dumps(ident, sort_keys=True))


def records_fingerprint(records: Sequence[Any]) -> str:
  """Hash of every field of every record, in order (dataclass ``repr`` is deterministic).

  Hashing the parsed records rather than the file covers caps, RACE levels and TFDS sources
  alike; SQuAD's 130k training questions hash in well under a second.
  """
  h = hashlib.sha256()
  for r in records:
    h.update(repr(r).encode())
    h.update(b"\0")
  return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class CacheKey:
  """``slot``: the entry's name (job identity); ``key``: slot + data + format version."""
  slot: str
  key: str
  description: dict


def make_key(kind: str, records: Sequence[Any], tokenizer, options: Mapping[str, Any]) -> CacheKey:
  """The cache key of featurising ``records`` with ``tokenizer`` and feature ``options``.

  Args:
    kind: the featurizer (e.g. ``"extractive"``), part of the file name.
    records: the example records (each may carry a ``source`` path).
    tokenizer: a transformers fast tokenizer.
    options: every option that changes the features (JSON-able values).
  """
  sources = sorted({str(getattr(r, "source", "")) for r in records})
  # The record count is part of the slot: another ``max_*_examples`` cap is another entry (no
  # "stale" rebuild when switching between caps), while an edited data file under the same
  # cap replaces its entry.
  slot_parts = {"kind": kind, "options": dict(options),
                "tokenizer": tokenizer_fingerprint(tokenizer),
                "sources": _sha("\n".join(sources)), "n_records": len(records)}
  slot = _sha(json.dumps(slot_parts, sort_keys=True, default=str))
  key_parts = {"slot": slot, "records": records_fingerprint(records),
               "format": CACHE_FORMAT_VERSION}
  key = _sha(json.dumps(key_parts, sort_keys=True))
  description = dict(slot_parts, sources=sources[:3] + (["..."] if len(sources) > 3 else []))
  return CacheKey(slot=slot, key=key, description=description)


def entry_path(cache_dir: str, kind: str, key: CacheKey) -> str:
  return os.path.join(cache_dir, f"{kind}-{key.slot[:24]}.npz")


def save(path: str, key: CacheKey, features: Features) -> None:
  """Writes ``features`` atomically (temporary file in the same directory + ``os.replace``)."""
  payload: dict[str, np.ndarray] = {}
  for name, value in features.arrays.items():
    payload[_ARRAY + name] = np.asarray(value)
  meta_json = {}
  for name, value in features.meta.items():
    if isinstance(value, np.ndarray):
      payload[_META + name] = value
    else:
      meta_json[name] = value
  manifest = {
      "format": CACHE_FORMAT_VERSION, "key": key.key, "slot": key.slot,
      "description": key.description, "meta": meta_json,
      "arrays": {k: [list(v.shape), v.dtype.str] for k, v in payload.items()},
  }
  try:
    blob = json.dumps(manifest, sort_keys=True).encode()
  except TypeError as e:
    raise TypeError(f"features meta must be numpy arrays or JSON values to be cached: "
                    f"{e}") from None
  payload[_MANIFEST] = np.frombuffer(blob, np.uint8)
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".npz.tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      np.savez(f, **payload)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def load(path: str, key: CacheKey) -> Features:
  """Reads an entry; raises `CacheError` (saying why) when it is corrupt or stale."""
  try:
    with np.load(path, allow_pickle=False) as z:
      if _MANIFEST not in z.files:
        raise CacheError("no manifest")
      manifest = json.loads(bytes(z[_MANIFEST]).decode())
      if manifest.get("format") != CACHE_FORMAT_VERSION:
        raise CacheError(f"cache format {manifest.get('format')}, expected "
                         f"{CACHE_FORMAT_VERSION}")
      if manifest.get("key") != key.key:
        raise CacheError("stale: the data, tokenizer or options changed since it was written")
      loaded = {}
      for name, (shape, dtype) in manifest["arrays"].items():
        if name not in z.files:
          raise CacheError(f"array {name!r} is missing")
        value = z[name]  # reads the whole member: zipfile checks its CRC
        if list(value.shape) != shape or value.dtype.str != dtype:
          raise CacheError(f"array {name!r} is {value.dtype.str}{list(value.shape)}, the "
                           f"manifest says {dtype}{shape}")
        loaded[name] = value
  except CacheError:
    raise
  except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as e:
    raise CacheError(f"unreadable ({type(e).__name__}: {e})") from None
  arrays = {k[len(_ARRAY):]: v for k, v in loaded.items() if k.startswith(_ARRAY)}
  meta = dict(manifest["meta"])
  meta.update({k[len(_META):]: v for k, v in loaded.items() if k.startswith(_META)})
  return Features(arrays, meta)


def cached_features(cache_dir: str | None, kind: str, records: Sequence[Any], tokenizer,
                    options: Mapping[str, Any], build: Callable[[], Features]) -> Features:
  """``build()``'s features, read from ``cache_dir`` when a valid entry exists.

  ``cache_dir`` empty or None: no cache, ``build()`` every time. Otherwise a missing, corrupt or
  stale entry is logged, rebuilt and written back atomically.
  """
  if not cache_dir:
    return build()
  key = make_key(kind, records, tokenizer, options)
  path = entry_path(cache_dir, kind, key)
  if os.path.exists(path):
    try:
      features = load(path, key)
      log.info("features: loaded %s (%d records) from the cache %s", kind, len(records), path)
      return features
    except CacheError as e:
      log.warning("features cache %s is not usable (%s); rebuilding it", path, e)
  else:
    log.info("features: no cache entry %s yet; building it", path)
  features = build()
  save(path, key, features)
  return features


def describe(path: str) -> dict:
  """The manifest of a cache entry (for inspection), without loading its arrays."""
  with zipfile.ZipFile(path) as zf:
    raw = zf.read(_MANIFEST + ".npy")
  return json.loads(bytes(np.load(io.BytesIO(raw), allow_pickle=False)).decode())
