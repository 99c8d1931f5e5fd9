"""Typed example records; each keeps the file and the id it came from (for error messages)."""
from __future__ import annotations

import dataclasses
import os


class DataError(ValueError):
  """Bad input data: the message names the file, the record id and the field."""

  def __init__(self, path, record, field: str | None, problem: str):
    where = ([f"record {record!r}"] if record is not None else []) + \
        ([f"field {field!r}"] if field and field != "<file>" else [])
    super().__init__(f"{path}: {', '.join(where) + ': ' if where else ''}{problem}")
    self.path, self.record, self.field = path, record, field


def load_json(path: str):
  """A JSON data file, or a `DataError` naming the file and what is wrong with it: missing,
  empty, not UTF-8 (with the byte offset), truncated or otherwise not JSON (line and column).
  A name ending in ``.xz`` or ``.gz`` is decompressed first (the shipped SQuAD sample is xz)."""
  import gzip
  import json
  import lzma
  opener = {".xz": lzma.open, ".gz": gzip.open}.get(os.path.splitext(path)[1], open)
  try:
    with opener(path, "rb") as f:
      raw = f.read()
  except OSError as e:
    raise DataError(path, None, None, f"cannot read it ({e.strerror or e})") from None
  except (lzma.LZMAError, EOFError) as e:  # gzip's BadGzipFile is an OSError
    raise DataError(path, None, None, f"cannot decompress it ({e})") from None
  if not raw.strip():
    raise DataError(path, None, None, "the file is empty")
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    raise DataError(path, None, None, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset "
                    f"{e.start}); re-encode it as UTF-8") from None
  try:
    return json.loads(text)
  except json.JSONDecodeError as e:
    why = ("not valid JSON: truncated (it ends early)" if e.pos >= len(text.rstrip())
           else f"not valid JSON ({e.msg})")
    raise DataError(path, None, None, f"{why} at line {e.lineno}, column {e.colno}") from None


@dataclasses.dataclass
class SquadExample:
  qid: str
  question: str
  context: str
  answers: list[dict]  # [{"text", "answer_start"}]; the gold answers
  is_impossible: bool
  plausible_answers: list[dict]
  title: str
  source: str


@dataclasses.dataclass
class ChoiceExample:
  qid: str
  passage: str
  question: str
  options: list[str]
  label: int  # index of the correct option
  source: str
  level: str = ""  # RACE: high | middle
