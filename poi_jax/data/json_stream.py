"""Reading JSON data files safely: streaming one-document corpora (SQuAD, DREAM, NewsQA, NLQuAD)
one item of the main array at a time with `ijson` (yajl's C parser), JSON lines (NQ, NarrativeQA)
and small whole documents (RACE) with the standard library, behind one guard for all three.

Any bytes in, a correct read or one `DataError` out (naming the file, the record or line, the
field where known, and the position). What the parsers would not survive, or would pay for
dearly, is checked on the bytes before a parser sees them (`_Scanner`, at C speed: regular
expressions and numpy over each read buffer):

* nesting deeper than `MAX_DEPTH`: ijson's prefixes made memory quadratic in the depth (80 kB of
  ``[`` took 3 GB), ``json.loads`` raises RecursionError, and later code (``repr`` in a message)
  would recurse again;
* a number longer than `MAX_NUMBER_LENGTH` characters, an integer outside the signed 64-bit range
  or a float that overflows a double: yajl crashed (a segfault without ``use_float``) or re-read
  a long number once per buffer (quadratic), and Python's ``int()`` refuses 4,300+ digits;
* a lone UTF-16 surrogate escape (``"\\ud800"``): valid JSON, but not a character (yajl silently
  made it ``?``; Python keeps a string that cannot be encoded as UTF-8 nor tokenised);
* a NUL byte (binary data, not text).

The limits are far above any real data file: SQuAD nests 9 levels deep, NQ 5; its numbers are
offsets and ids, at most 20 characters. A streamed file is cut just before the problem, so
every earlier item is read and the error names the item that holds it.

Files (`open_data`, `check_readable`, `iter_lines`), the same rule in every format: gzip and xz
(by their magic bytes, else by the name) are decompressed on the fly; a UTF-8 byte order mark is
skipped; a file that is empty or blank (or only a BOM) is an error, as is a directory given for a
file, a corrupt or truncated compressed stream (naming the record or line it reached), and bytes
that are not UTF-8 (with the offset).

The fast parser's syntax-error messages carry no position, so on such an error the file is
scanned again (still streaming) to find it: an incremental UTF-8 decode for the byte offset, then
ijson's pure-Python backend, which reports the character position.
"""
from __future__ import annotations

import codecs
import gzip
import json
import lzma
import math
import os
import re
import zlib
from typing import Any, Iterator

import ijson
import numpy as np
from ijson.backends import python as ijson_python

from poi_jax.data.records import DataError, clip

MAX_DEPTH = 128  # nested arrays and objects (serde_json's default; SQuAD needs 9)
MAX_NUMBER_LENGTH = 1000  # characters of one number (Jackson's default; below int()'s 4,300)
_INT64 = (-(1 << 63), (1 << 63) - 1)

_BOM = codecs.BOM_UTF8
_CHUNK = 1 << 16
_PARSE_BUFFER = 1 << 14
# A string still open at the end of a read is read in larger buffers (up to this): yajl re-reads
# an unfinished token from its start on every buffer, quadratic in a long string's length.
_MAX_GROWN_READ = 1 << 24
DECOMPRESSION_ERRORS = (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)

_NUMBER_CHARS = b"-+.0123456789eE"
# The rest of a string from inside it, up to (not including) its closing quote; possessive, so it
# never backtracks (linear in the bytes).
_STRING_REST = re.compile(rb'[^"\\]*+(?:\\[\s\S][^"\\]*+)*+')
_INTEGER = re.compile(rb"-?[0-9]+")
# A \u escape of a UTF-16 surrogate, after an even run of backslashes (an odd one escapes the
# backslash itself): a high one with its low partner, a high one alone, or a low one alone.
_SURROGATE = re.compile(rb"(?<!\\)(?:\\\\)*+\\u(?:([dD][89abAB][0-9a-fA-F]{2})"
                        rb"(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|([dD][c-fC-F][0-9a-fA-F]{2}))")
# What a piece can end with after a high surrogate escape when its low partner is cut off.
_LOW_PREFIX = re.compile(rb"(?:\\(?:u(?:[dD](?:[c-fC-F][0-9a-fA-F]?)?)?)?)?")
_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_TOKEN = re.compile(rb'"|[\[{]|[\]}]|:|[-+.0-9eE]+')
_ANY_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_STEP = np.zeros(256, np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1
_IS_NUMBER = np.zeros(256, bool)
_IS_NUMBER[list(_NUMBER_CHARS)] = True
# Digits, signs and points -> 1, e and E -> 2, everything else -> 0: runs found with bytes.find.
_RUN_MAP = bytes(1 if c in b"0123456789+-." else 2 if c in b"eE" else 0 for c in range(256))
_RUN19 = b"\x01" * 19
_CONTINUATION = bytes(range(0x80, 0xC0))
_KINDS = {"start_map": 1, "start_array": 1, "end_map": 2, "end_array": 2, "map_key": 3}


def _chars(data: bytes) -> int:
  """Characters in UTF-8 ``data`` (its bytes less the continuation bytes)."""
  return len(data.translate(None, _CONTINUATION))


def _backslashes_before(data: bytes, i: int) -> int:
  """How many backslashes immediately precede index ``i`` (odd: ``data[i]`` is escaped)."""
  return i - len(data[:i].rstrip(b"\\"))


def _number_problem(token: bytes, complete: bool = True) -> str | None:
  """Why a number-like run outside strings is refused, or None (``complete`` False: the run
  goes on past ``token``, which is already too long)."""
  if len(token) > MAX_NUMBER_LENGTH:
    size = f"{len(token):,}" if complete else f"more than {MAX_NUMBER_LENGTH:,}"
    return (f"a number of {size} characters (the limit is {MAX_NUMBER_LENGTH:,}; a data file's "
            f"numbers are offsets, counts and ids)")
  if _INTEGER.fullmatch(token):
    if not _INT64[0] <= int(token) <= _INT64[1]:
      return f"an integer outside the signed 64-bit range ({len(token)} digits)"
  else:
    try:
      if math.isinf(float(token)):
        return f"a number too large for a 64-bit float ({clip(token.decode('ascii'), 40)})"
    except ValueError:
      pass  # not a number at all: the parser says so
  return None


class _Scanner:
  """The checks of the module docstring over a byte stream fed in pieces (each byte once; the
  state between pieces is exact: inside a string or not, a pending escape, the depth, a number
  run cut by the piece's end, the last bytes for a surrogate pair cut in two). The work is
  numpy and regular expressions over each piece: about 65 MB/s on a 2-core CPU (0.6 s of a
  40 MB SQuAD file's 2.8 s read)."""

  def __init__(self):
    self.in_string = False
    self.escape = False  # inside a string, the previous piece ended with an unpaired backslash
    self.depth = 0
    self.number = b""  # a number run at the end of the previous piece (outside strings)
    self.carry = b""  # the previous piece's last bytes, aligned on an escape boundary
    self.string_len = 0  # bytes of a string still open at the end of the previous piece

  def feed(self, block: bytes, final: bool) -> tuple[int, str] | None:
    """Checks ``block`` (the bytes after the previous piece; ``final``: the stream ends after
    it). Returns the first problem, ``(index in block, message)`` (the index is negative when
    the problem began in an earlier piece), or None."""
    found = []
    nul = block.find(b"\0")
    if nul >= 0:
      found.append((nul, "a NUL byte (binary data, not JSON text)"))
    for problem in (self._surrogate(block, final), self._structure(block, final)):
      if problem is not None:
        found.append(problem)
    return min(found) if found else None

  def _surrogate(self, block: bytes, final: bool) -> tuple[int, str] | None:
    scan = self.carry + block
    base = len(self.carry)
    if _ANY_SURROGATE.search(scan):  # rare: most text has none (the full pattern is slower)
      for m in _SURROGATE.finditer(scan):
        high, low, lone_low = m.group(1, 2, 3)
        if high and low:
          continue
        if high and not final and _LOW_PREFIX.fullmatch(scan, m.end()):
          break  # its partner may start the next piece: decided then (the carry keeps it)
        at = m.start(1 if high else 3) - 2 - base
        code = (high or lone_low).decode("ascii")
        return at, (f"a lone UTF-16 surrogate escape \\u{code} (valid JSON, but not a "
                    f"character: it cannot be encoded as UTF-8 nor tokenised)")
    # The carry: the last 12 bytes (a surrogate pair), moved back to the start of an escape
    # that reaches into them, and of a high surrogate escape that they start with the pair of.
    s = max(0, len(scan) - 12)
    k = scan.find(b"\\", max(0, s - 6), s)
    if k >= 0:
      s = k
    if _backslashes_before(scan, s) % 2:
      s -= 1  # scan[s] is the backslash of an escaped backslash: start at that escape
    elif s >= 6 and _HIGH.fullmatch(scan, s - 6, s) and not _backslashes_before(scan, s - 6) % 2:
      s -= 6
    self.carry = scan[s:]
    return None

  def _structure(self, block: bytes, final: bool) -> tuple[int, str] | None:
    """Advances the string state, the depth and the number run over ``block``; returns its
    first depth or number problem."""
    skip = 1 if self.in_string and self.escape and block else 0  # that byte is escaped
    self.escape = self.escape and not skip
    data = block[skip:]
    if not data:
      return self._end_number(final)
    if b"\\" in data:
      # Escaped backslashes, then escaped quotes, become two placeholders (the same length, so
      # the indices hold): every quote left opens or closes a string.
      data = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")
    arr = np.frombuffer(data, np.uint8)
    quotes = np.flatnonzero(arr == 0x22)
    start_in = self.in_string
    found = []
    # [ ] { } and, cheaper to find with them than alone, _ Y y DEL (bits 0101 1xx1 or 0111 1xx1).
    brackets = np.flatnonzero((arr & 0xD9) == 0x59)
    steps = _STEP[arr[brackets]]
    brackets, steps = brackets[steps != 0], steps[steps != 0]
    if brackets.size:
      # Outside a string: an even number of quotes before it (odd when the piece starts inside).
      outside = (np.searchsorted(quotes, brackets) & 1) == start_in
      brackets, steps = brackets[outside], steps[outside]
      depths = np.cumsum(steps, dtype=np.int64) + self.depth
      if depths.size:
        over = np.flatnonzero(depths > MAX_DEPTH)
        if over.size:
          found.append((skip + int(brackets[over[0]]),
                        f"nested more than {MAX_DEPTH} levels deep (arrays and objects; a data "
                        f"file needs a few)"))
        self.depth = int(depths[-1])
    self.in_string = start_in ^ bool(quotes.size & 1)
    if self.in_string:
      self.string_len = (len(data) - int(quotes[-1]) if quotes.size
                         else self.string_len + len(data))
      self.escape = data.endswith(b"\\")  # a lone backslash: its escaped byte comes next
    else:
      self.string_len = 0
    number = self._numbers(data, arr, quotes, start_in, final)
    if number is not None:
      found.append((number[0] + skip, number[1]))
    return min(found) if found else None

  def _numbers(self, data: bytes, arr, quotes, start_in: bool, final: bool
               ) -> tuple[int, str] | None:
    """The first number problem of ``data``: runs of number characters outside strings; a run
    cut by the piece's end is carried into the next piece."""
    n = len(data)
    lo, hi = 0, n  # the runs that start and end in this piece
    if self.number:  # the previous piece ended in a run (outside strings): it goes on here
      lo = n - len(data.lstrip(_NUMBER_CHARS))
      if lo == n and not final:
        self.number += data
        if len(self.number) <= MAX_NUMBER_LENGTH:
          return None
        at, why = n - len(self.number), _number_problem(self.number, complete=False)
        self.number = b""
        return at, why
      at, why, self.number = -len(self.number), _number_problem(self.number + data[:lo]), b""
      if why is not None:
        return at, why
    if not final and not self.in_string:
      trail = n - len(data.rstrip(_NUMBER_CHARS))
      if trail and n - trail >= lo:
        hi, self.number = n - trail, data[n - trail:]
        if len(self.number) > MAX_NUMBER_LENGTH:
          return hi, _number_problem(self.number, complete=False)
    # Cheap tests first. A number over a limit has a run of 19 digits (length, 64-bit range:
    # looked for with strings included, rare in text) or an exponent of 3 digits (1e400): an
    # "e" outside strings (e also ends true and false) with 3 digits or a sign after it.
    runs = data.translate(_RUN_MAP)
    if runs.find(_RUN19, lo, hi) < 0:
      es = np.flatnonzero((arr | 0x20) == 0x65)
      es = es[(es >= lo) & (es < hi - 3)]
      digits = np.frombuffer(runs, np.uint8)
      es = es[(digits[es + 1] & digits[es + 2] & digits[es + 3] & 1).astype(bool)]
      if not ((np.searchsorted(quotes, es) & 1) == start_in).any():
        return None
    inside = np.cumsum(arr == 0x22, dtype=np.uint8) & 1
    if start_in:
      inside ^= 1
    is_number = _IS_NUMBER[arr] & ~inside.view(bool)
    is_number[:lo] = False
    is_number[hi:] = False
    edges = np.diff(is_number.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    lengths = ends - starts
    suspects = set(np.flatnonzero(lengths >= 19).tolist())
    exponents = np.flatnonzero(((arr == 0x65) | (arr == 0x45)) & is_number)
    if exponents.size:  # "e" also ends true and false: only runs of 4+ characters (1e400)
      runs_of = np.searchsorted(starts, exponents, side="right") - 1
      suspects.update(runs_of[lengths[runs_of] >= 4].tolist())
    for i in sorted(suspects):
      why = _number_problem(data[starts[i]:ends[i]])
      if why is not None:
        return int(starts[i]), why
    return None

  def _end_number(self, final: bool) -> tuple[int, str] | None:
    """At the end of the stream, the problem of the number run carried to it."""
    if self.number and final:
      why, at, self.number = _number_problem(self.number), -len(self.number), b""
      return (at, why) if why is not None else None
    return None


class _Guard:
  """A binary file that hands its reader (a JSON parser) the bytes up to the first problem the
  `_Scanner` finds, then an end of file, so that the parser stops inside the item that holds it.
  A decompression error ends the stream the same way. ``problem``: the message with its line and
  column; ``stopped``: the parser asked for bytes past it (so a parse error is the cut, not an
  earlier syntax error of its own)."""

  def __init__(self, f, skip_bom: bool = True):
    self._f = f
    self._scanner = _Scanner()
    self.problem: str | None = None
    self.stopped = False
    self._line, self._col = 1, 1  # position of the next byte to hand over
    self._prev = (b"", 1, 1)  # the previous piece and the position of its start
    self._bom = skip_bom

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._f.close()

  def read(self, n: int = -1) -> bytes:
    if n == 0:  # ijson probes the type of the stream with read(0)
      return b""
    if self.problem is not None:
      self.stopped = True
      return b""
    n = max(n, min(self._scanner.string_len, _MAX_GROWN_READ)) if n > 0 else n
    try:
      block = self._f.read(n)
    except DECOMPRESSION_ERRORS as e:
      self.problem = (f"cannot decompress it: the file is corrupt or truncated "
                      f"({type(e).__name__}: {e}) {self._where(0, b'')}")
      self.stopped = True
      return b""
    if self._bom:
      self._bom = False
      if block.startswith(_BOM):
        block = block[len(_BOM):]
    found = self._scanner.feed(block, final=not block)
    if found is not None:
      at, why = found
      self.problem = f"{why} {self._where(at, block)}"
      block = block[:max(at, 0)]
    self._advance(block)
    if found is not None and not block:
      self.stopped = True
    return block

  def _advance(self, block: bytes) -> None:
    self._prev = (block, self._line, self._col)
    newlines = block.count(b"\n")
    if newlines:
      self._line += newlines
      self._col = 1 + _chars(block[block.rfind(b"\n") + 1:])
    else:
      self._col += _chars(block)

  def _where(self, at: int, block: bytes) -> str:
    """``at line L, column C`` of index ``at`` of ``block`` (negative: in the previous piece)."""
    line, col = self._line, self._col
    if at < 0:
      prev, line, col = self._prev
      at = max(0, len(prev) + at)
      block = prev
    head = block[:at]
    newlines = head.count(b"\n")
    if newlines:
      line, col, head = line + newlines, 1, head[head.rfind(b"\n") + 1:]
    return f"at line {line}, column {col + _chars(head)}"


def check_text(raw: bytes) -> tuple[str, str | None] | None:
  """The first problem of a whole JSON text (a line of JSON lines, a small document): ``(message
  with its line and column, the field that holds it or None)``, or None. The text is the bytes
  after any BOM."""
  found = _Scanner().feed(raw, final=True)
  if found is None:
    return None
  at, why = found
  head = raw[:at]
  line = head.count(b"\n") + 1
  col = 1 + _chars(head[head.rfind(b"\n") + 1:])
  return f"{why} at line {line}, column {col}", _field_at(raw, at)


def _field_at(raw: bytes, at: int) -> str | None:
  """The dotted keys of the objects that hold index ``at`` of a JSON text (array positions are
  not named), e.g. ``document_tokens.token``; None at the top level."""
  keys: list[str | None] = []
  pending: str | None = None
  last_string: str | None = None
  pos = 0
  for m in _TOKEN.finditer(raw, 0, at):
    if m.start() < pos:
      continue
    c = raw[m.start()]
    if c == 0x22:
      pos = _STRING_REST.match(raw, m.end()).end() + 1
      last_string = raw[m.end():pos - 1].decode("utf-8", "replace")
      continue
    if c == 0x3A:
      pending = last_string
    elif c in b"[{":
      keys.append(pending)
      pending = None
    elif c in b"]}":
      if keys:
        keys.pop()
      pending = None
    last_string = None
  named = [k for k in keys + [pending] if k]
  return clip(".".join(named), 100) if named else None


def open_data(path: str):
  """The file's bytes, decompressed on the fly when its first bytes are gzip's or xz's magic or
  (when they are neither) its name ends in ``.gz`` or ``.xz`` (the shipped SQuAD sample is xz;
  NQ ships gzipped); both decompressors stream, so memory holds one buffer.

  Raises:
    DataError: missing, a directory, or unreadable.
  """
  if os.path.isdir(path):
    raise DataError(path, None, None, "a directory, not a file: give the data file itself")
  try:
    with open(path, "rb") as f:
      magic = f.read(6)
  except OSError as e:
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None
  # The bytes decide (an xz file named .gz reads); the name only when they are neither, so
  # that a broken .gz or .xz file says it cannot be decompressed rather than "not UTF-8".
  kind = ("gz" if magic[:2] == b"\x1f\x8b" else "xz" if magic == b"\xfd7zXZ\x00"
          else os.path.splitext(path)[1][1:])
  if kind == "gz":
    return gzip.open(path, "rb")
  if kind == "xz":
    return lzma.open(path, "rb")
  return open(path, "rb")


def check_readable(path: str) -> None:
  """Raises the file-level `DataError` of a missing, unreadable, undecompressable or empty
  (blank, or only a BOM) file now, so a reader fails at the call, not at the first record."""
  try:
    with open_data(path) as f:
      first = True
      while True:
        # Small reads: a compressed file broken further on fails when the stream reaches it,
        # naming the record or line there, not here.
        chunk = f.read(1 << 12)
        if not chunk:
          raise DataError(path, None, None, "the file is empty")
        if first and chunk.startswith(_BOM):
          chunk = chunk[len(_BOM):]
        first = False
        if chunk.strip():
          return
  except DECOMPRESSION_ERRORS as e:
    raise DataError(path, None, None, f"cannot decompress it: the file is corrupt or truncated "
                    f"({type(e).__name__}: {e})") from None
  except OSError as e:
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None


def _open(path: str) -> _Guard:
  return _Guard(open_data(path))


def _line_column(path: str, char_pos: int | None) -> tuple[int, int]:
  """1-based line and column of character ``char_pos`` of the decoded file (None: its end)."""
  line, col, seen = 1, 1, 0
  with open_data(path) as f:
    if f.read(len(_BOM)) != _BOM:
      f.seek(0)
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
  with open_data(path) as f:
    offset = len(_BOM) if f.read(len(_BOM)) == _BOM else 0  # a skipped BOM counts
    f.seek(offset)
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
  try:
    why = _utf8_error(path)
  except DECOMPRESSION_ERRORS as e:
    return f"cannot decompress it: the file is corrupt or truncated ({type(e).__name__}: {e})"
  if why:
    return why
  guard = _open(path)
  try:
    with guard:
      for _ in ijson_python.basic_parse(guard):
        pass
  except ijson_python.UnexpectedSymbol as e:
    # The message is "Unexpected symbol '<s>' at <character position>".
    head, _, pos = str(e).rpartition(" at ")
    line, col = _line_column(path, int(pos) if pos.isdigit() else None)
    what = head.replace("Unexpected", "unexpected")
    return f"not valid JSON ({what}) at line {line}, column {col}"
  except ijson.IncompleteJSONError:
    if guard.stopped:
      return guard.problem
    line, col = _line_column(path, None)
    return f"not valid JSON: truncated (it ends early) at line {line}, column {col}"
  except ijson.JSONError as e:
    return f"not valid JSON ({str(e).strip().splitlines()[0][:120]})"
  except (ValueError, RecursionError) as e:
    return f"not valid JSON ({type(e).__name__}: {str(e)[:120]})"
  if guard.problem:
    return guard.problem
  first = (fallback.strip().splitlines() or ["unknown error"])[0]
  return f"not valid JSON ({first[:120]})"


def _item_events(events, path: str, key: str | None, what: str, keys: list):
  """The parse events of the items of the top-level array (``key`` None) or of the array under
  the top-level ``key``, as ``("item", event, value)`` for `ijson.items`, checking that the
  document has that shape. ``keys`` is kept as the key of each open container (None in arrays):
  the field an error inside an item names.

  The events come from ``basic_parse`` (no prefix): ``ijson.parse``'s prefix of every event
  repeats the whole path, quadratic in the depth, and in the length of deep keys."""
  first = next(events, None)
  if first is None or first[0] != ("start_array" if key is None else "start_map"):
    raise DataError(path, None, key, f"expected {what}")
  keys.append(None)
  depth, base = 1, (1 if key is None else 2)  # base: the depth of the items' events
  inside = key is None
  expect = found = False  # expect: the previous event was the top-level key
  kinds = _KINDS
  for event, value in events:
    kind = kinds.get(event)  # one lookup: scalars (the most events) take the first branch
    if kind is None:
      if inside:
        yield "item", event, value
      elif expect:
        raise DataError(path, None, key, f"expected {what}")
      continue
    if kind == 3:  # map_key
      keys[-1] = value
      if depth == 1:  # a top-level key (key None: the top is an array, never here)
        expect = value == key
        continue
    elif kind == 1:  # start_map, start_array
      if expect:
        expect = False
        if event != "start_array":
          raise DataError(path, None, key, f"expected {what}")
        inside = found = True
        depth += 1
        keys.append(None)
        continue
      depth += 1
      keys.append(None)
    else:  # end_map, end_array
      depth -= 1
      keys.pop()
      if depth < base:
        if inside:
          inside = False  # the end of the items' array
        elif depth == 0 and not found:
          raise DataError(path, None, key, f"expected {what}")
        continue
    if inside:
      yield "item", event, value


def iter_array(path: str, *, key: str | None = None, what: str = "a JSON list"
               ) -> Iterator[tuple[int, Any]]:
  """``(index, item)`` of the top-level array (``key`` None) or of the array under the
  top-level ``key``, one at a time. Non-integer numbers are floats (as `json.load` gives).

  Raises:
    DataError: the file is missing, empty, not UTF-8, not JSON (with the position; the index of
      the item being read is the record), over a limit of the module docstring (with the
      position and the field), or is not ``what``.
  """
  path = os.fspath(path)
  check_readable(path)
  n = 0
  keys: list = []
  guard = None
  try:
    with open_data(path) as raw:
      guard = _Guard(raw)
      # yajl hands over the events of one read buffer at a time (about 150 per kB as Python
      # tuples), so the buffer size bounds the memory the parser holds.
      events = ijson.basic_parse(guard, use_float=True, buf_size=_PARSE_BUFFER)
      for item in ijson.items(_item_events(events, path, key, what, keys), "item"):
        yield n, item
        n += 1  # an error from here on is in the next item (or after the last)
  except DataError as e:
    if e.record is None and e.field == key:  # wrong shape: a broken file says that first
      why = _json_error(path)
      if why:
        raise DataError(path, None, None, why) from None
    raise
  except (ijson.JSONError, UnicodeDecodeError, ValueError, OverflowError, RecursionError) as e:
    if guard is not None and guard.stopped:
      field = ".".join(k for k in keys[(1 if key is None else 2):] if k) or None
      raise DataError(path, f"#{n}", field, guard.problem) from None
    raise DataError(path, f"#{n}", None, diagnose(path, f"{type(e).__name__}: {e}")) from None
  except OSError as e:
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None
  if guard.problem:  # after the document's end (trailing bytes)
    raise DataError(path, None, None, guard.problem)


def _json_error(path: str) -> str | None:
  """Why the file is not JSON, or None when it is (a streaming pass over the parse events)."""
  guard = _open(path)
  try:
    with guard:
      for _ in ijson.basic_parse(guard, use_float=True):
        pass
  except (ijson.JSONError, ValueError, OverflowError, RecursionError) as e:
    return guard.problem if guard.stopped else diagnose(path, str(e))
  except (OSError, *DECOMPRESSION_ERRORS) as e:
    return f"cannot decompress it ({e})"
  return guard.problem


def has_key(path: str, prefix: str, key: str) -> bool:
  """Whether any object at ``prefix`` (e.g. ``data.item``) has ``key``; streams only the parse
  events (no object is built) and stops at the first. A broken file answers False here and
  raises in `iter_array`."""
  want = prefix.split(".") if prefix else []
  names: list[str] = []  # the path of the open containers (an array's items are "item")
  kinds: list[str] = []
  pending = ""
  try:
    with _open(path) as f:
      for event, value in ijson.basic_parse(f, use_float=True):
        if event == "map_key":
          pending = value
          if names == want and value == key:
            return True
        elif event == "start_map" or event == "start_array":
          if kinds:
            names.append(pending if kinds[-1] == "map" else "item")
          kinds.append("map" if event == "start_map" else "array")
        elif event == "end_map" or event == "end_array":
          kinds.pop()
          if names:
            names.pop()
  except (ijson.JSONError, ValueError, OSError, OverflowError, RecursionError,
          *DECOMPRESSION_ERRORS, DataError):
    return False
  return False


def iter_lines(path: str) -> Iterator[tuple[int, bytes]]:
  """``(line number, bytes)`` of each non-blank line of a JSON-lines file (decompressed; a BOM
  before the first line skipped), one at a time.

  Raises:
    DataError: a corrupt or truncated compressed stream (naming the line it reached), an
      unreadable file.
  """
  line_no = 0
  try:
    with open_data(path) as f:
      for line_no, raw in enumerate(f, 1):
        if line_no == 1 and raw.startswith(_BOM):
          raw = raw[len(_BOM):]
        if raw.strip():
          yield line_no, raw
  except DECOMPRESSION_ERRORS as e:
    raise DataError(f"{path}:{line_no + 1}", None, None,
                    f"cannot decompress it: the file is corrupt or truncated "
                    f"({type(e).__name__}: {e})") from None
  except OSError as e:
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None


def loads_line(raw: bytes, path: str, line: int):
  """One JSON line (bytes, without a BOM) -> its value, or a `DataError` at ``path:line`` naming
  the field and column of: bytes that are not UTF-8, a limit of the module docstring, or JSON
  that does not parse."""
  where = f"{path}:{line}"
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise DataError(where, None, "<line>", f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                    f"{e.start + 1}); re-encode it as UTF-8") from None
  problem = check_text(raw)
  if problem is not None:
    why, field = problem
    raise DataError(where, None, field or "<line>", why.replace(" at line 1, ", " at "))
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    raise DataError(where, None, "<line>", f"not JSON ({e.msg} at column {e.colno})") from None
  except (ValueError, RecursionError) as e:  # the checks above leave none; kept as a net
    raise DataError(where, None, "<line>", f"not JSON ({type(e).__name__}: {e})") from None


def load_text(raw: bytes, path: str):
  """A whole small JSON document (bytes without a BOM, UTF-8 checked) -> its value, or the
  `DataError` of `loads_line`'s checks naming the file, the line, column and field."""
  problem = check_text(raw)
  if problem is not None:
    why, field = problem
    raise DataError(path, None, field, why)
  text = raw.decode("utf-8")
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    why = ("not valid JSON: truncated (it ends early)" if e.pos >= len(text.rstrip())
           else f"not valid JSON ({e.msg})")
    raise DataError(path, None, None, f"{why} at line {e.lineno}, column {e.colno}") from None
  except (ValueError, RecursionError) as e:  # the checks above leave none; kept as a net
    raise DataError(path, None, None, f"not valid JSON ({type(e).__name__}: {e})") from None


def load_json(path: str):
  """A JSON data file, or a `DataError` naming the file and what is wrong with it: missing, a
  directory, empty, not UTF-8 (with the byte offset), over a limit of this module (nesting depth,
  number length, a lone surrogate escape, a NUL byte: with the line, column and field), truncated or otherwise not JSON (line and column). A gzip or
  xz file (by its name or its first bytes) is decompressed first (the shipped SQuAD sample is
  xz); a UTF-8 byte order mark is skipped."""
  path = os.fspath(path)
  try:
    with open_data(path) as f:
      raw = f.read()
  except DECOMPRESSION_ERRORS as e:
    raise DataError(path, None, None, f"cannot decompress it: the file is corrupt or truncated "
                    f"({type(e).__name__}: {e})") from None
  except OSError as e:
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None
  bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0  # a UTF-8 byte order mark
  raw = raw[bom:]
  if not raw.strip():
    raise DataError(path, None, None, "the file is empty")
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise DataError(path, None, None, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset "
                    f"{bom + e.start}); re-encode it as UTF-8") from None
  return load_text(raw, path)
