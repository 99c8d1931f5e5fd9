"""TensorFlow Datasets sources, ``tfds:<name>[/<config>]:<split>``, read into the same records as
the local readers (extra ``[tfds]``: ``pip install -e ".[tfds]"``; TensorFlow is not needed).

Supported: ``squad`` (``squad/v1.1``, ``squad/v2.0``; splits ``train``, ``validation``) ->
`SquadExample`, ``race`` (``race/high``, ``race/middle``; splits ``train``, ``dev``, ``test``)
-> `ChoiceExample`. Records are read with ``tfds.data_source`` (random access, no TensorFlow), so
a prepared dataset (``TFDS_DATA_DIR``) or network is needed; without either, one line says so and
how to pass local files instead. Each record's ``source`` is the ``tfds:...`` string, so errors
name it; the same validation as the local readers runs before any tokenising.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator

from poi_jax.data.records import ChoiceExample, DataError, SquadExample

LETTERS = "ABCDEFGH"
SUPPORTED = ("squad", "race")


class TfdsUnavailableError(FileNotFoundError):
  """A TFDS source cannot be read here (no package, no network, no prepared data)."""


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  name: str  # "squad/v2.0"
  split: str  # "validation"

  @property
  def family(self) -> str:
    return self.name.split("/")[0]

  @property
  def config(self) -> str:
    return self.name.split("/")[1] if "/" in self.name else ""

  def __str__(self) -> str:
    return f"tfds:{self.name}:{self.split}"


def parse_source(source: str) -> TfdsSource:
  """``tfds:<name>[/<config>]:<split>`` -> `TfdsSource` (ValueError naming the source)."""
  parts = source.split(":")
  if len(parts) != 3 or parts[0] != "tfds" or not parts[1] or not parts[2]:
    raise ValueError(f"{source!r} is not a TFDS source; expected tfds:<name>[/<config>]:<split>, "
                     f"e.g. tfds:squad/v2.0:validation")
  src = TfdsSource(parts[1], parts[2])
  if src.family not in SUPPORTED:
    raise ValueError(f"{source!r}: TFDS dataset {src.family!r} has no reader here; supported: "
                     f"{', '.join(SUPPORTED)} (or pass local files)")
  return src


def _text(v: Any) -> str:
  return v.decode("utf-8") if isinstance(v, bytes) else str(v)


def _texts(v: Any) -> list[str]:
  return [_text(x) for x in list(v)]


def _rows(rows: Iterable, source: str) -> Iterator[tuple[int, Any]]:
  """``(index, row)``; a row that TFDS cannot read back (a corrupt record file) is a `DataError`
  naming the source and the row."""
  it = iter(rows)
  i = 0
  while True:
    try:
      row = next(it)
    except StopIteration:
      return
    except Exception as e:  # noqa: BLE001 - TFDS's storage raises its own types
      raise DataError(source, f"#{i}", None, f"cannot read this row ({type(e).__name__}: "
                      f"{str(e)[:200]})") from None
    yield i, row
    i += 1


def _decoded(rows: Iterable, source: str, convert) -> Iterator:
  """``convert(index, row)`` for each row; bytes that are not UTF-8 are a `DataError` naming
  the source and the row (TFDS stores text as UTF-8 bytes)."""
  for i, row in _rows(rows, source):
    try:
      out = convert(i, row)
    except UnicodeDecodeError as e:
      raise DataError(source, f"#{i}", None, f"not UTF-8 text (byte 0x{e.object[e.start]:02x} "
                      f"at offset {e.start})") from None
    yield from out


def _answers(src: str, qid: str, field: str, value, context: str) -> list[dict]:
  if value is None:
    return []
  texts, starts = _texts(value["text"]), [int(s) for s in list(value["answer_start"])]
  if len(texts) != len(starts):
    raise DataError(src, qid, field, f"{len(texts)} texts but {len(starts)} answer_start values")
  out = []
  for t, s in zip(texts, starts):
    if not 0 <= s <= len(context) - len(t):
      raise DataError(src, qid, f"{field}.answer_start",
                      f"{s} is outside the context ({len(context)} characters)")
    out.append({"text": t, "answer_start": s})
  return out


def squad_records(rows: Iterable, source: str, *, require_answers: bool = True
                  ) -> Iterator[SquadExample]:
  """TFDS ``squad`` rows (``id, title, context, question, answers{text, answer_start}`` and, for
  v2.0, ``is_impossible, plausible_answers``) -> records, one at a time, validated like
  `read_squad`."""
  return _decoded(rows, source, lambda i, row: _squad_row(i, row, source, require_answers))


def _squad_row(i: int, row, source: str, require_answers: bool) -> list[SquadExample]:
  qid = _text(row.get("id", f"#{i}"))
  for field in ("context", "question"):
    if field not in row:
      raise DataError(source, qid, field, "missing")
  context, question = _text(row["context"]), _text(row["question"])
  impossible = bool(row.get("is_impossible", False))
  answers = _answers(source, qid, "answers", row.get("answers"), context)
  plausible = _answers(source, qid, "plausible_answers", row.get("plausible_answers"), context)
  if impossible:
    answers = []  # TFDS v2.0 stores the plausible answers apart; no gold answer
  if require_answers and not impossible and not answers:
    raise DataError(source, qid, "answers", "an answerable question without answers")
  return [SquadExample(qid, question, context, answers, impossible, plausible,
                       _text(row.get("title", "")), source)]


def race_records(rows: Iterable, source: str, level: str) -> Iterator[ChoiceExample]:
  """TFDS ``race`` rows (``article, questions, options, answers`` letters, ``example_id``) ->
  one record per question, one at a time, validated like `read_race`."""
  return _decoded(rows, source, lambda i, row: _race_row(i, row, source, level))


def _race_row(i: int, row, source: str, level: str) -> list[ChoiceExample]:
  pid = _text(row.get("example_id", f"#{i}"))
  for field in ("article", "questions", "options", "answers"):
    if field not in row:
      raise DataError(source, pid, field, "missing")
  questions, answers = _texts(row["questions"]), _texts(row["answers"])
  options = [_texts(o) for o in list(row["options"])]
  if not len(questions) == len(options) == len(answers):
    raise DataError(source, pid, "questions", "questions, options and answers differ in count")
  article = _text(row["article"])
  out = []
  for j, (q, opts, ans) in enumerate(zip(questions, options, answers)):
    rid = f"{pid}-{j}"
    if len(ans) != 1 or ans not in LETTERS[:len(opts)]:
      raise DataError(source, rid, "answers", f"{ans!r} is not one of the {len(opts)} options")
    out.append(ChoiceExample(rid, article, q, opts, LETTERS.index(ans), source, level))
  return out


def network_reachable(host: str = "storage.googleapis.com", timeout: float = 3.0) -> bool:
  """Whether a TCP connection to TFDS's download host opens within ``timeout`` seconds (offline,
  TFDS's own download retries for minutes before failing)."""
  import socket
  try:
    with socket.create_connection((host, 443), timeout=timeout):
      return True
  except OSError:
    return False


def _unavailable(source: str, why: str, hint: str) -> TfdsUnavailableError:
  return TfdsUnavailableError(f"{source}: {why}; pass local files instead{hint}")


def read_tfds(source: str, *, require_answers: bool = True, hint: str = "",
              data_dir: str | None = None) -> Iterator:
  """The records of a TFDS source, one at a time (TFDS's data source reads each row on demand).

  Args:
    source: ``tfds:<name>[/<config>]:<split>``.
    require_answers: SQuAD: an answerable question must have answers.
    hint: appended to the "cannot load" line, e.g. ``" (--config.data.eval_file=...json)"``.
    data_dir: the TFDS data directory (None: ``TFDS_DATA_DIR`` or TFDS's default).

  Raises:
    TfdsUnavailableError: the package is not installed, or the data cannot be loaded (offline).
    DataError: a bad record (names the source, the record id and the field), when the stream
      reaches it.
  """
  src = parse_source(source)
  try:
    import tensorflow_datasets as tfds
  except ImportError:
    raise _unavailable(source, "tensorflow_datasets is not installed (pip install -e \".[tfds]\")",
                       hint) from None
  try:
    try:  # a dataset already prepared in the data dir: no network at all
      rows = tfds.data_source(src.name, split=src.split, data_dir=data_dir, download=False)
    except Exception:  # not prepared (or another file format): download and prepare it
      if not network_reachable():
        raise _unavailable(source, "not prepared in the TFDS data directory (TFDS_DATA_DIR) and "
                           "no network to download it", hint) from None
      rows = tfds.data_source(src.name, split=src.split, data_dir=data_dir, download=True)
    n_rows = len(rows)
  except TfdsUnavailableError:
    raise
  except Exception as e:  # network, DNS, unknown split: all mean "not here"
    first = (str(e).strip().splitlines() or [""])[0][:200]
    raise _unavailable(source, f"TensorFlow Datasets cannot load it here, it needs network or a "
                       f"prepared TFDS_DATA_DIR ({type(e).__name__}: {first})", hint) from None
  lazy_rows = (rows[i] for i in range(n_rows))
  if src.family == "squad":
    return squad_records(lazy_rows, source, require_answers=require_answers)
  return race_records(lazy_rows, source, src.config or "all")
