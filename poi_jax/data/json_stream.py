"""Streaming one-document JSON corpora (SQuAD, DREAM, NewsQA): the items of the document's main
array one at a time with `ijson` (yajl's C parser), so memory holds one record, never the file.

Errors are the same `DataError`s as `records.load_json` gives for a whole document (missing,
empty, not UTF-8 with the byte offset, truncated or not JSON with the line and column), raised
when the stream reaches the bad byte. The fast parser's messages carry no position, so on an
error the file is scanned again (still streaming) to find it: an incremental UTF-8 decode for
the byte offset, then ijson's pure-Python backend, which reports the character position.
"""
from __future__ import annotations

import codecs
import gzip
import lzma
import os
from typing import Any, Iterator

import ijson
from ijson.backends import python as ijson_python

from poi_jax.data.records import DataError

_BOM = codecs.BOM_UTF8
_CHUNK = 1 << 16
_PARSE_BUFFER = 1 << 14


def _open_bytes(path: str):
  """The file's bytes, decompressed on the fly when its name ends in ``.xz`` or ``.gz`` (the
  shipped SQuAD sample is xz); both decompressors stream, so memory still holds one buffer."""
  opener = {".xz": lzma.open, ".gz": gzip.open}.get(os.path.splitext(path)[1], open)
  return opener(path, "rb")


def check_readable(path: str) -> None:
  """Raises the file-level `DataError` of a missing, unreadable or empty (blank) file now, so a
  reader fails at the call, not at the first record."""
  try:
    with _open_bytes(path) as f:
      while True:
        chunk = f.read(_CHUNK)
        if not chunk:
          raise DataError(path, None, None, "the file is empty")
        if chunk.lstrip(_BOM).strip():
          return
  except OSError as e:  # gzip's BadGzipFile is an OSError
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None
  except (lzma.LZMAError, EOFError) as e:
    raise DataError(path, None, None, f"cannot decompress it ({e})") from None


def _open(path: str):
  f = _open_bytes(path)
  if f.read(len(_BOM)) != _BOM:
    f.seek(0)
  return f


def _line_column(path: str, char_pos: int | None) -> tuple[int, int]:
  """1-based line and column of character ``char_pos`` of the decoded file (None: its end)."""
  line, col, seen = 1, 1, 0
  with _open(path) as f:
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    while True:
      chunk = f.read(_CHUNK)
      text = decoder.decode(chunk, final=not chunk)
      if char_pos is not None and seen + len(text) > char_pos:
        text = text[:char_pos - seen]
        chunk = b""
      newlines = text.count("\n")
      if newlines:
        line += newlines
        col = len(text) - text.rfind("\n")
      else:
        col += len(text)
      seen += len(text)
      if not chunk:
        return line, col


def _utf8_error(path: str) -> str | None:
  with _open(path) as f:
    offset = f.tell()  # a skipped BOM counts
    decoder = codecs.getincrementaldecoder("utf-8")()
    while True:
      chunk = f.read(_CHUNK)
      pending = len(decoder.getstate()[0])
      try:
        decoder.decode(chunk, final=not chunk)
      except UnicodeDecodeError as e:
        return (f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                f"{offset - pending + e.start}); re-encode it as UTF-8")
      if not chunk:
        return None
      offset += len(chunk)


def diagnose(path: str, fallback: str) -> str:
  """Why ``path`` is not valid JSON, with its position (a second, streaming pass)."""
  why = _utf8_error(path)
  if why:
    return why
  try:
    with _open(path) as f:
      for _ in ijson_python.basic_parse(f):
        pass
  except ijson_python.UnexpectedSymbol as e:
    # The message is "Unexpected symbol '<s>' at <character position>".
    head, _, pos = str(e).rpartition(" at ")
    line, col = _line_column(path, int(pos) if pos.isdigit() else None)
    what = head.replace("Unexpected", "unexpected")
    return f"not valid JSON ({what}) at line {line}, column {col}"
  except ijson.IncompleteJSONError:
    line, col = _line_column(path, None)
    return f"not valid JSON: truncated (it ends early) at line {line}, column {col}"
  except ijson.JSONError as e:
    return f"not valid JSON ({str(e).strip().splitlines()[0][:120]})"
  except (ValueError, RecursionError) as e:
    return f"not valid JSON ({type(e).__name__}: {str(e)[:120]})"
  first = (fallback.strip().splitlines() or ["unknown error"])[0]
  return f"not valid JSON ({first[:120]})"


def _expect_container(events, path: str, key: str | None, what: str):
  """Passes the parse events through, checking that the document is ``what``: a top-level array
  (``key`` None) or an object whose ``key`` is an array."""
  events = iter(events)
  first = next(events, None)
  top = "start_array" if key is None else "start_map"
  if first is None or first[1] != top:
    raise DataError(path, None, key, f"expected {what}")
  yield first
  if key is None:
    yield from events
    return
  found = False
  for prefix, event, value in events:
    if prefix == "" and event == "map_key" and value == key:
      nxt = next(events, None)
      if nxt is None:
        break
      if nxt[1] != "start_array":
        raise DataError(path, None, key, f"expected {what}")
      found = True
      yield prefix, event, value
      yield nxt
      continue
    if prefix == "" and event == "end_map" and not found:
      raise DataError(path, None, key, f"expected {what}")
    yield prefix, event, value


def iter_array(path: str, *, key: str | None = None, what: str = "a JSON list"
               ) -> Iterator[tuple[int, Any]]:
  """``(index, item)`` of the top-level array (``key`` None) or of the array under the
  top-level ``key``, one at a time. Non-integer numbers are floats (as `json.load` gives).

  Raises:
    DataError: the file is missing, empty, not UTF-8 or not JSON (with the position; the
      index of the item being read is the record), or is not ``what``.
  """
  path = os.fspath(path)
  check_readable(path)
  n = 0
  prefix = "item" if key is None else f"{key}.item"
  try:
    with _open(path) as f:
      # yajl hands over the events of one read buffer at a time (about 150 per kB as Python
      # tuples), so the buffer size bounds the memory the parser holds.
      events = _expect_container(ijson.parse(f, use_float=True, buf_size=_PARSE_BUFFER), path,
                                 key, what)
      for item in ijson.items(events, prefix):
        yield n, item
        n += 1  # an error from here on is in the next item (or after the last)
  except DataError as e:
    if e.record is None and e.field == key:  # wrong shape: a broken file says that first
      why = _json_error(path)
      if why:
        raise DataError(path, None, None, why) from None
    raise
  except ijson.JSONError as e:
    raise DataError(path, f"#{n}", None, diagnose(path, str(e))) from None
  except (UnicodeDecodeError, ValueError, OverflowError, RecursionError) as e:
    raise DataError(path, f"#{n}", None, diagnose(path, f"{type(e).__name__}: {e}")) from None
  except OSError as e:
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None
  except (lzma.LZMAError, EOFError) as e:
    raise DataError(path, f"#{n}", None, f"cannot decompress it ({e})") from None


def _json_error(path: str) -> str | None:
  """Why the file is not JSON, or None when it is (a streaming pass over the parse events)."""
  try:
    with _open(path) as f:
      for _ in ijson.basic_parse(f):
        pass
  except (ijson.JSONError, ValueError, OverflowError, RecursionError) as e:
    return diagnose(path, str(e))
  except (OSError, lzma.LZMAError, EOFError) as e:
    return f"cannot decompress it ({e})"
  return None


def has_key(path: str, prefix: str, key: str) -> bool:
  """Whether any object at ``prefix`` (e.g. ``data.item``) has ``key``; streams only the parse
  events (no object is built) and stops at the first. A broken file answers False here and
  raises in `iter_array`."""
  try:
    with _open(path) as f:
      for p, event, value in ijson.parse(f):
        if p == prefix and event == "map_key" and value == key:
          return True
  except (ijson.JSONError, ValueError, OSError, OverflowError, RecursionError, lzma.LZMAError,
          EOFError):
    return False
  return False
