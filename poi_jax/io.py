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


def write_json_atomic(path: str, obj, *, sort_keys: bool = False) -> None:
  """Writes ``obj`` as JSON to a temporary file beside ``path`` and renames it over ``path``, so
  a reader (or a run killed mid-write) never sees a half-written file."""
  d = os.path.dirname(os.path.abspath(path))
  os.makedirs(d, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
  try:
    with os.fdopen(fd, "w") as f:
      json.dump(obj, f, indent=2, sort_keys=sort_keys)
    os.chmod(tmp, default_mode())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
