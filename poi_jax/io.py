"""Small file helpers shared by the engine, the tasks and the entry point."""
from __future__ import annotations

import json
import os
import tempfile


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def default_mode(directory: bool = False) -> int:
  """The permissions ``open`` / ``mkdir`` would give (0666 / 0777 less the umask): temporary
  files and directories are created 0600 / 0700, which other users of a shared cluster could not
  read once renamed into place."""
  return (0o777 if directory else 0o666) & ~_umask()


def write_json_atomic(path: str, obj, *, sort_keys: bool = False, indent: int = 2,
                      end: str = "") -> None:
  """Writes ``obj`` as JSON (then ``end``, e.g. a newline for a file kept in git) to a temporary
  file beside ``path`` and renames it over ``path``, so a reader (or a run killed mid-write)
  never sees a half-written file."""
  d = os.path.dirname(os.path.abspath(path))
  os.makedirs(d, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
  try:
    with os.fdopen(fd, "w") as f:
      json.dump(obj, f, indent=indent, sort_keys=sort_keys)
      f.write(end)
    os.chmod(tmp, default_mode())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


class JsonStreamWriter:
  """One JSON file written item by item, byte for byte what `write_json_atomic` writes for the
  whole value (``indent=2``): an object (``add(key, value)``) or, with ``list_key``, an object
  ``{**head, list_key: [...]}`` whose list grows by ``append(value)``. Memory holds one item,
  never the file's value. The file is written in place: write it into a staging directory that is moved
  into place whole (`poi_jax.train.evaluate`). ``close()`` ends the JSON; a key given twice is
  an error (a dict would keep one value, a stream cannot take the first one back)."""

  _INDENT = 2

  def __init__(self, path: str, *, list_key: str | None = None, head: dict | None = None):
    self.path = path
    self._f = open(path, "w")
    os.chmod(path, default_mode())
    self._list_key = list_key
    self._depth = 1 if list_key is None else 2  # the items' nesting level
    self._count = 0
    self._keys: set[str] = set()
    if list_key is not None:
      pad = " " * self._INDENT
      self._f.write("{\n" + "".join(
          pad + json.dumps(k) + ": " + json.dumps(v, indent=self._INDENT).replace("\n", "\n" + pad)
          + ",\n" for k, v in (head or {}).items()) + pad + json.dumps(list_key) + ": ")

  def _item(self, text: str) -> None:
    pad = " " * (self._INDENT * self._depth)
    self._f.write(("[" if self._list_key is not None else "{") if not self._count else ",")
    self._f.write("\n" + pad + text.replace("\n", "\n" + pad))
    self._count += 1

  def add(self, key: str, value) -> None:
    if self._list_key is not None:
      raise TypeError(f"{self.path} is a list under {self._list_key!r}: use append")
    if not isinstance(key, str):
      raise TypeError(f"{self.path}: JSON keys are strings, got {key!r}")
    if key in self._keys:
      raise ValueError(f"{self.path}: the key {key!r} comes twice (duplicate question ids in "
                       f"the data)")
    self._keys.add(key)
    self._item(json.dumps(key) + ": " + json.dumps(value, indent=self._INDENT))

  def append(self, value) -> None:
    if self._list_key is None:
      raise TypeError(f"{self.path} is an object: use add")
    self._item(json.dumps(value, indent=self._INDENT))

  def close(self) -> None:
    """Ends the JSON value and closes the file (only the first call writes)."""
    if self._f.closed:
      return
    outer = " " * (self._INDENT * (self._depth - 1))
    empty = "[]" if self._list_key is not None else "{}"
    self._f.write(("\n" + outer + ("]" if self._list_key is not None else "}"))
                  if self._count else empty)
    if self._list_key is not None:
      self._f.write("\n}")
    self._f.close()

  def abort(self) -> None:
    """Closes the file without ending the JSON (the caller removes the staging directory)."""
    self._f.close()
