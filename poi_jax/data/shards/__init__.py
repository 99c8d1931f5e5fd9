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

The package by concept: `keys` (the cache key), `codec` (one shard's files), `writer` (writing
and checking shards), `split` (a prepared split: manifest, random access to rows), `build`
(`ShardSpec`, `prepare`). Its public names are importable from here.
"""
from __future__ import annotations

from poi_jax.data.shards.keys import (  # noqa: F401
    DEFAULT_SHARD_BYTES, FORMAT_VERSION, file_sha256, make_key, source_identity,
    tokenizer_fingerprint)
from poi_jax.data.shards.codec import (  # noqa: F401
    MANIFEST, ShardError, WRITER_OPTIONS, decode_rows, encode_rows, read_meta,
    remove_stale_temporaries, row_layout, shard_name, write_meta)
from poi_jax.data.shards.writer import (  # noqa: F401
    ShardWriter, block_parts, build_block, build_shard, check_shard, featurize_record)
from poi_jax.data.shards.split import (  # noqa: F401
    ShardRows, ShardedSplit, assemble_manifest, read_manifest)
from poi_jax.data.shards.build import (  # noqa: F401
    GROUP_BYTES, GROUP_RECORDS, ShardSpec, barrier, prepare)

__all__ = [
    "DEFAULT_SHARD_BYTES",
    "FORMAT_VERSION",
    "file_sha256",
    "make_key",
    "source_identity",
    "tokenizer_fingerprint",
    "MANIFEST",
    "ShardError",
    "WRITER_OPTIONS",
    "decode_rows",
    "encode_rows",
    "read_meta",
    "remove_stale_temporaries",
    "row_layout",
    "shard_name",
    "write_meta",
    "ShardWriter",
    "block_parts",
    "build_block",
    "build_shard",
    "check_shard",
    "featurize_record",
    "ShardRows",
    "ShardedSplit",
    "assemble_manifest",
    "read_manifest",
    "GROUP_BYTES",
    "GROUP_RECORDS",
    "ShardSpec",
    "barrier",
    "prepare",
]
