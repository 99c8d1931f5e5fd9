"""`poi_jax.data.json_stream`'s checks on the bytes (issue 35): nesting depth, number length and
range, lone surrogate escapes, NUL bytes, found at the same place whether a text comes whole or in
pieces of any size, as a plain byte-by-byte reference finds them; and the streaming guard's cut.
"""
from __future__ import annotations

import io
import random

import ijson
import pytest

from poi_jax.data import json_stream
from poi_jax.data.records import DataError

MAX = json_stream.MAX_DEPTH
NUMBER = b"-+.0123456789eE"


def reference(raw: bytes) -> tuple[int, str] | None:
  """The first problem of a JSON text, ``(byte index, kind)``, by a walk over its bytes that
  knows JSON's strings and escapes (slow and plain: what the scanner must agree with)."""
  found = []
  if b"\0" in raw:
    found.append((raw.index(b"\0"), "nul"))
  in_string, depth, i, n = False, 0, 0, len(raw)
  while i < n:
    c = raw[i:i + 1]
    if in_string:
      if c == b"\\" and raw[i + 1:i + 2] == b"u":
        code = int(raw[i + 2:i + 6], 16)
        if 0xD800 <= code < 0xDC00:
          low = raw[i + 8:i + 12]
          if raw[i + 6:i + 8] == b"\\u" and len(low) == 4 and 0xDC00 <= int(low, 16) < 0xE000:
            i += 12
            continue
          found.append((i, "surrogate"))
        elif 0xDC00 <= code < 0xE000:
          found.append((i, "surrogate"))
        i += 6
      elif c == b"\\":
        i += 2
      else:
        in_string = c != b'"'
        i += 1
      continue
    if c == b'"':
      in_string = True
    elif c in (b"[", b"{"):
      depth += 1
      if depth > MAX:
        found.append((i, "depth"))
    elif c in (b"]", b"}"):
      depth -= 1
    elif c and c in NUMBER:
      j = i
      while j < n and raw[j:j + 1] in NUMBER:
        j += 1
      if json_stream._number_problem(raw[i:j]):
        found.append((i, "number"))
      i = j
      continue
    i += 1
  return min(found) if found else None


def _kind(message: str) -> str:
  return ("nul" if "NUL" in message else "surrogate" if "surrogate" in message else
          "depth" if "nested" in message else "number")


def _string(rng: random.Random) -> bytes:
  parts = [rng.choice((b"abc", b"caf\xc3\xa9", b" ", b"e", b"[{", b"]", b"1" * 25, b"\\\\",
                       b'\\"', b"\\n", b"\\u00e9", b"\\ud83d\\ude00", b"\\uD83D\\uDE00",
                       b"\\ud800", b"\\udc00", b"\\ud800\\u0041", b"\\\\ud800", b"\0"))
           for _ in range(rng.randrange(0, 6))]
  return b'"' + b"".join(parts) + b'"'


def _value(rng: random.Random, depth: int = 0) -> bytes:
  r = rng.random()
  if r < 0.35 and depth < 40:
    items = [_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if rng.random() < 0.5:
      return b"[" + b", ".join(items) + b"]"
    return b"{" + b", ".join(_string(rng) + b": " + v for v in items) + b"}"
  if r < 0.7:
    return _string(rng)
  return rng.choice((b"1", b"-12", b"1.5e10", b"true", b"9223372036854775807",
                     b"9223372036854775808", b"-9223372036854775809", b"1e400", b"1e-400",
                     b"1" * 1000, b"1" * 1001, b"12345678901234567890123.5"))


def _text(rng: random.Random) -> bytes:
  if rng.random() < 0.25:
    d = rng.choice((MAX - 1, MAX, MAX + 1, 300))
    return b"[" * d + _value(rng) + b"]" * d
  return _value(rng)


def _streamed(raw: bytes, rng: random.Random) -> tuple[int, str] | None:
  scanner, offset, pos = json_stream._Scanner(), 0, 0
  while True:
    block = raw[pos:pos + rng.choice((1, 2, 3, 5, 7, 12, 13, 64, 4096))]
    pos += len(block)
    found = scanner.feed(block, final=not block)
    if found is not None:
      return offset + found[0], _kind(found[1])
    if not block:
      return None
    offset += len(block)


def test_the_scanner_finds_what_a_byte_walk_finds_whole_or_in_pieces():
  rng = random.Random(35)
  kinds = set()
  for _ in range(400):
    raw = _text(rng)
    want = reference(raw)
    whole = json_stream._Scanner().feed(raw, final=True)
    whole = None if whole is None else (whole[0], _kind(whole[1]))
    assert whole == want, raw[:300]
    assert _streamed(raw, rng) == want, raw[:300]
    kinds.add(want[1] if want else None)
  assert kinds == {None, "nul", "surrogate", "depth", "number"}  # every kind was exercised


@pytest.mark.parametrize("text,problem", [
    (b"[" * MAX + b"]" * MAX, None),
    (b"[" * (MAX + 1) + b"]" * (MAX + 1), f"nested more than {MAX} levels deep"),
    (b'["[[[[' + b"[" * 200 + b'"]', None),  # brackets in a string
    (b"[9223372036854775807, -9223372036854775808]", None),
    (b"[9223372036854775808]", "an integer outside the signed 64-bit range"),
    (b"[1e400]", "a number too large for a 64-bit float (1e400)"),
    (b"[1e-400, 1.5e300]", None),
    (b"[" + b"1" * 1001 + b"]", "a number of 1,001 characters"),
    (b'["' + b"1" * 5000 + b'"]', None),  # digits in a string
    (b'{"a": "\\ud83d\\ude00"}', None),
    (b'{"a": "x\\ud800"}', "lone UTF-16 surrogate escape \\ud800"),
    (b'{"a": "\\ud800\\u0041"}', "lone UTF-16 surrogate escape \\ud800"),
    (b'{"a": "\\udc00"}', "lone UTF-16 surrogate escape \\udc00"),
    (b'{"a": "\\\\ud800"}', None),  # an escaped backslash, then the letters ud800
    (b'{"a": "\\\\\\ud800"}', "lone UTF-16 surrogate escape"),
    (b'{"a": "\\u0000"}', None),  # an escaped NUL is a character
    (b'{"a": "x\x00"}', "a NUL byte")])
def test_check_text(text, problem):
  found = json_stream.check_text(text)
  if problem is None:
    assert found is None
  else:
    assert found is not None and problem in found[0], found


def test_check_text_names_the_field_and_position():
  text = b'{"data": [{"title": "t",\n "answers": [{"answer_start": ' + b"1" * 30 + b"}]}]}"
  why, field = json_stream.check_text(text)
  assert why.startswith("an integer outside the signed 64-bit range (30 digits)")
  assert why.endswith("at line 2, column 31") and field == "data.answers.answer_start"


def test_check_text_gives_the_column_of_the_first_bad_bracket():
  why, _ = json_stream.check_text(b"[" * (MAX + 1) + b"]" * (MAX + 1))
  assert why.endswith(f"at line 1, column {MAX + 1}")


def test_a_surrogate_pair_cut_between_reads_is_not_lone():
  """The guard hands the parser reads of any size: a pair split anywhere reads as one emoji."""
  raw = b'["' + b"a" * 20 + b'\\ud83d\\ude00", "\\\\ud800"]'
  for cut in range(1, len(raw)):
    pieces = [raw[:cut], raw[cut:]]

    class Reader:
      def read(self, n):  # noqa: D401 - a file
        return pieces.pop(0) if pieces and n else b""
    guard = json_stream._Guard(Reader())
    assert list(ijson.items(guard, "item", use_float=True)) == ["a" * 20 + "\U0001F600",
                                                                "\\ud800"], cut
    assert guard.problem is None


def test_the_guard_cuts_the_stream_before_the_problem(tmp_path):
  """Items before the bad one are read; the error names the item holding it and its field."""
  path = tmp_path / "d.json"
  path.write_bytes(b'{"data": [{"id": "a"}, {"id": "b"},\n {"id": "c", "n": '
                   + b"1" * 5001 + b"}]}")
  items = json_stream.iter_array(str(path), key="data")
  assert [next(items)[1]["id"], next(items)[1]["id"]] == ["a", "b"]
  with pytest.raises(DataError) as e:
    next(items)
  assert str(e.value) == (f"{path}: record '#2', field 'n': a number of 5,001 characters (the "
                          f"limit is 1,000; a data file's numbers are offsets, counts and ids) "
                          f"at line 2, column 19")


def test_a_long_string_reads_in_linear_time(tmp_path):
  """yajl reads an unfinished token again from its start on every buffer; the guard reads an
  open string in growing buffers, so a 16 MB string takes a few large reads, not thousands."""
  reads = []

  class Counting(io.BytesIO):
    def read(self, n=-1):
      reads.append(n)
      return super().read(n)
  raw = b'["' + b"x" * (16 << 20) + b'"]'
  guard = json_stream._Guard(Counting(raw))
  (value,) = list(ijson.items(guard, "item", use_float=True))
  assert len(value) == 16 << 20
  assert len(reads) < 30, len(reads)  # fixed 16 kB reads would be over a thousand


@pytest.mark.parametrize("magic,name", [(b"gz", "d.json.xz"), (b"xz", "d.json.gz"),
                                        (b"gz", "d.json"), (None, "d.json")])
def test_open_data_decompresses_by_the_bytes(tmp_path, magic, name):
  import gzip
  import lzma
  raw = b'{"data": [1]}'
  packed = {b"gz": gzip.compress, b"xz": lzma.compress, None: bytes}[magic](raw)
  (tmp_path / name).write_bytes(packed)
  with json_stream.open_data(str(tmp_path / name)) as f:
    assert f.read() == raw


def test_open_data_refuses_a_directory(tmp_path):
  with pytest.raises(DataError, match=f"{tmp_path}: a directory, not a file"):
    json_stream.open_data(str(tmp_path))
