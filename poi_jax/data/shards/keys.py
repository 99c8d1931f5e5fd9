"""The cache key of a prepared split: hashes of the data source's bytes, the tokenizer and every
option, so that another value of any of them is another directory, never a stale read.

Part of `poi_jax.data.shards` (the package docstring: the layout and the whole story)."""
from __future__ import annotations


import hashlib
import json
import os

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
