"""A prepared split: its manifest, and grain's random access to its rows (`ShardedSplit`,
`ShardRows`).

Part of `poi_jax.data.shards` (the package docstring: the layout and the whole story)."""
from __future__ import annotations


import dataclasses
import json
import os
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from poi_jax.data import buckets
from poi_jax.data.features.base import Features
from poi_jax.data.shards.codec import MANIFEST, ShardError, decode_rows, log, read_meta, shard_name
from poi_jax.data.shards.keys import FORMAT_VERSION


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
