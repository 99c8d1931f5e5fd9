r"""Answers a JSON-lines file of questions with a trained model
(`poi_jax.inference.reader.Reader`).

  python -m poi_jax.predict --model=/tmp/squad-tiny --input=questions.jsonl \
      --output=answers.jsonl

``--model``: a workdir (best checkpoint, else the latest) or its ``export/`` directory. One JSON
object per input line:

* extractive models (SQuAD): ``{"id": ..., "question": ..., "context": ...}`` ->
  ``{"id", "answer", "start", "end", "score", "probability", "no_answer", "null_score_diff",
  "no_candidate"}``
  (``start``/``end``: character offsets in the context, ``end`` exclusive);
* multiple-choice models (RACE, DREAM): ``{"id", "passage" (or "context"), "question",
  "options": [...]}`` -> ``{"id", "index", "option", "probabilities", "logits"}``.

``id`` is optional (default: the line number): a string or an integer.

Hostile input (issue 35). The input file is checked before the model is loaded: a file that is
missing, a directory, unreadable, empty (or blank), compressed, UTF-16/32, or with no line in
UTF-8 ends the run in one ``error: <file>: ...`` line, exit 1. Each line is then parsed on its
own (`poi_jax.inference.requests.loads`: strict UTF-8, at most ``MAX_DEPTH`` nested arrays/objects,
numbers never converted when too long or beyond the float range); a bad line (not UTF-8, not
JSON, too deep, a missing or ill-typed field, an empty text or one with a lone surrogate, an
integer id of more than ``MAX_NUMBER_CHARS`` digits, a question the featurizer refuses) is
reported on stderr as ``skipped: <file>:<line>: field '<field>': <problem>`` and skipped; the
other lines are answered. When the model's task can be read from its directory (it can for
every workdir and export), the lines are parsed before the model is loaded too, and a file with
no good line ends in one ``error:`` line without loading it.

The output is written to a temporary file and renamed when complete. Exit codes: 0 every line
answered; 2 some lines skipped (the output holds the others; the summary on stdout counts
them); 1 the model or the input cannot be read, or no line holds a question (nothing written).
"""
from __future__ import annotations

import codecs
import json
import os
import sys
import tempfile

from absl import app, flags, logging

from poi_jax.data.pos import NltkResourceError
from poi_jax.data.records import ChoiceExample, SquadExample, clip
from poi_jax.io import default_mode
from poi_jax.models.encoders import CheckpointError
from poi_jax.inference.requests import (MAX_DEPTH, MAX_NUMBER_CHARS, InputError,  # noqa: F401
                                    JSONProblem, brief, check_options, field_name, loads)

_MODEL = flags.DEFINE_string("model", None, "A poi-jax workdir or its export/ directory.")
_INPUT = flags.DEFINE_string("input", None, "JSON lines: one question per line.")
_OUTPUT = flags.DEFINE_string("output", None, "JSON lines: one answer per answered line.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None,
                                   "Rows per model call (default: train.eval_batch_size).")
_NULL_THRESHOLD = flags.DEFINE_float(
    "null_threshold", None, "SQuAD 2.0: override the null-score-difference threshold δ "
    "(default: the one tuned on the eval set at the checkpoint).")
_LENGTH_BUCKETS = flags.DEFINE_string(
    "length_buckets", None, "Override the model's data.length_buckets: off, auto or lengths such "
    "as 128,256 (same answers; fewer padded positions computed, one compilation per bucket).")
_CHUNK = 64  # questions featurised and answered together (the progress bar's granularity)


class LineError(ValueError):
  """A bad input line: names the file, the line and the field."""

  def __init__(self, path: str, line: int, field: str, problem: str):
    super().__init__(f"{path}:{line}: field {field!r}: {problem}")


class InputFileError(Exception):
  """An input file that cannot be read as questions: one ``error:`` line naming it."""


# What a file that is not JSON lines often is: named, so that the error says what to do.
_MAGIC = ((b"\x1f\x8b", "gzip-compressed"), (b"\xfd7zXZ\x00", "xz-compressed"),
          (b"BZh", "bzip2-compressed"), (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
          (b"PK\x03\x04", "a zip archive"))
# UTF-32's little-endian mark starts with UTF-16's: UTF-32 first.
_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
         (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def _utf8(raw: bytes) -> bool:
  """Whether ``raw`` decodes as (strict) UTF-8."""
  try:
    raw.decode("utf-8")
    return True
  except UnicodeDecodeError:
    return False


def read_lines(path: str) -> list[tuple[int, bytes]]:
  """The non-blank lines of ``path`` as ``(line number, bytes)`` (a UTF-8 byte-order mark and
  ``\\r\\n`` line ends allowed), or `InputFileError` when the file cannot be a JSON-lines file of
  questions: missing, a directory, unreadable, empty or blank, compressed, UTF-16/32, or no
  line UTF-8. Reads no further than the bytes: each line is parsed by `parse_line`."""
  if os.path.isdir(path):
    raise InputFileError(f"{path}: is a directory, not a JSON-lines file of questions")
  try:
    with open(path, "rb") as f:
      data = f.read()
  except FileNotFoundError:
    raise InputFileError(f"{path}: does not exist") from None
  except OSError as e:
    raise InputFileError(f"{path}: cannot read it ({e.strerror or e})") from None
  for magic, what in _MAGIC:
    if data.startswith(magic):
      raise InputFileError(f"{path}: is {what}: decompress it first (one JSON object per line, "
                           f"UTF-8)")
  for bom, encoding in _BOMS:
    if data.startswith(bom):
      raise InputFileError(f"{path}: is {encoding} (it starts with a byte-order mark): save it "
                           f"as UTF-8")
  data = data.removeprefix(codecs.BOM_UTF8)
  lines = [(i, raw.removesuffix(b"\r")) for i, raw in enumerate(data.split(b"\n"), 1)
           if raw.strip()]
  if not lines:
    raise InputFileError(f"{path}: is empty: no questions (one JSON object per line)" if not data
                         else f"{path}: holds only blank lines: no questions")
  if not any(_utf8(raw) for _, raw in lines):
    i, raw = lines[0]
    e = None
    try:
      raw.decode("utf-8")
    except UnicodeDecodeError as err:
      e = err
    raise InputFileError(f"{path}: is not UTF-8 text: no line decodes (line {i}: byte "
                         f"0x{raw[e.start]:02x} at byte {e.start + 1})")
  return lines


def _text(obj: dict, field: str, path: str, line: int, *alternatives: str) -> str:
  from poi_jax.inference.reader import text_problem
  for name in (field, *alternatives):
    if name in obj:
      problem = text_problem(obj[name])
      if problem:
        raise LineError(path, line, name, problem)
      return obj[name]
  raise LineError(path, line, field, "missing")


def parse_line(raw: bytes | str, path: str, line: int, extractive: bool):
  """One input line -> ``(its id, a SquadExample / ChoiceExample)``; the record's ``qid`` is the
  line number (ids need not be unique) and its ``source`` ``path:line``. A `LineError` naming
  the field when the line is bad, whatever its bytes."""
  try:
    obj = loads(raw)
  except JSONProblem as e:
    where = e.path[0] if e.path and isinstance(e.path[0], str) else "<line>"
    raise LineError(path, line, field_name(where), e.problem) from None
  if not isinstance(obj, dict):
    raise LineError(path, line, "<line>", f"expected a JSON object, got {brief(obj)}")
  from poi_jax.inference.reader import text_problem
  qid = obj.get("id", str(line))
  # An id is written back as it came: a string (UTF-8: no lone surrogate) or a plain integer.
  if isinstance(qid, str):
    problem = text_problem(qid, allow_empty=True)
    if problem:
      raise LineError(path, line, "id", problem)
  elif isinstance(qid, bool) or not isinstance(qid, int):
    raise LineError(path, line, "id", f"must be a string or an integer of at most "
                    f"{MAX_NUMBER_CHARS} digits, got {brief(qid)}")
  source, key = f"{path}:{line}", f"line {line}"
  question = _text(obj, "question", path, line)
  if extractive:
    return qid, SquadExample(key, question, _text(obj, "context", path, line), [], False, [], "",
                             source)
  passage = _text(obj, "passage", path, line, "context")
  if "options" not in obj:
    raise LineError(path, line, "options", "missing")
  try:
    options = check_options(obj["options"], None, max_options=None)
  except InputError as e:
    raise LineError(path, line, e.field, e.problem) from None
  return qid, ChoiceExample(key, passage, question, options, 0, source)


def parse_lines(lines: list[tuple[int, bytes]], path: str, extractive: bool, *,
                err=sys.stderr) -> tuple[list[tuple], int]:
  """``(records, skipped)``: `parse_line` on each line; each bad line reported on ``err``."""
  records, skipped = [], 0
  for i, raw in lines:
    try:
      records.append(parse_line(raw, path, i, extractive))
    except LineError as e:
      print(f"skipped: {e}", file=err)
      skipped += 1
  return records, skipped


def _need_questions(records: list, skipped: int, path: str) -> None:
  """`InputFileError` when no line of ``path`` holds a question: nothing to answer or write."""
  if not records:
    raise InputFileError(f"{path}: none of its {skipped:,} line(s) holds a question (each is "
                         f"reported above)")


def _result(qid, out) -> dict:
  d = out.to_dict()
  if "text" in d:
    d["answer"] = d.pop("text")
  return {"id": qid, **d}


def _answer(reader, items: list[tuple]) -> list[tuple]:
  """``[(record, result dict or the error)]`` for ``items`` = ``[(id, record)]``: the chunk at
  once, else (a record was refused, or anything else failed) one by one, so that only the
  lines that fail alone are skipped: refused (``ValueError``, naming the field) or an internal
  error (named as such, with its type: a bug to report, not the line's fault)."""
  run = reader.answer_records if reader.is_extractive else reader.choose_records
  try:
    return [(r, _result(q, o)) for (q, r), o in zip(items, run([r for _, r in items]))]
  except Exception:  # noqa: BLE001 (one line must not cost the chunk its answers)
    pass
  out = []
  for qid, r in items:
    try:
      out.append((r, _result(qid, run([r])[0])))
    except ValueError as e:
      out.append((r, e))
    except Exception as e:  # noqa: BLE001
      out.append((r, RuntimeError(f"internal error ({type(e).__name__}: {clip(str(e), 200)}); "
                                  f"please report it")))
  return out


def write_answers(reader, records: list[tuple], output_path: str, *,
                  err=sys.stderr) -> tuple[int, int]:
  """Answers ``records`` (``[(id, record)]``) into ``output_path`` (atomically); reports each
  record that cannot be answered on ``err``. Returns ``(answered, skipped)``."""
  from tqdm.auto import tqdm
  out_dir = os.path.dirname(os.path.abspath(output_path))
  os.makedirs(out_dir, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".tmp-")
  os.chmod(tmp, default_mode())  # mkstemp's 0600 would stay after the rename
  answered = skipped = 0
  try:
    with os.fdopen(fd, "w") as f, tqdm(total=len(records), desc="answering", unit="q") as bar:
      for start in range(0, len(records), _CHUNK):
        chunk = records[start:start + _CHUNK]
        for record, result in _answer(reader, chunk):
          if isinstance(result, Exception):
            told = str(result)  # a DataError already starts with the record's path:line
            if not told.startswith(record.source):
              told = f"{record.source}: {told}"
            print(f"skipped: {told}", file=err)
            skipped += 1
          else:
            f.write(json.dumps(result) + "\n")
            answered += 1
        bar.update(len(chunk))
    os.replace(tmp, output_path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  return answered, skipped


def predict_file(reader, input_path: str, output_path: str, *, err=sys.stderr) -> tuple[int, int]:
  """Answers every good line of ``input_path`` into ``output_path`` (atomically); reports each
  bad line on ``err``. Returns ``(answered, skipped)``; `InputFileError` when the file cannot be
  read or no line holds a question (then nothing is written)."""
  records, skipped = parse_lines(read_lines(input_path), input_path, reader.is_extractive,
                                 err=err)
  _need_questions(records, skipped, input_path)
  answered, refused = write_answers(reader, records, output_path, err=err)
  return answered, skipped + refused


def _saved_task(model: str) -> str | None:
  """The task in the model's saved config (an export's or a workdir's), read without loading
  anything; None when it cannot be read (then `Reader.load` says why)."""
  from poi_jax.inference.load import readable_tasks
  from poi_jax.model_files.export import CONFIG_FILE
  for name in (CONFIG_FILE, "config.json"):
    try:
      with open(os.path.join(model, name)) as f:
        task = json.load(f).get("task")
    except (OSError, ValueError, AttributeError):
      continue
    return task if task in readable_tasks() else None
  return None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  path = _INPUT.value
  try:
    # The input first: a file that cannot be read costs nothing (no model loaded), and with the
    # task from the model's config its lines are checked before loading it too.
    lines = read_lines(path)
    task = _saved_task(_MODEL.value)
    parsed = None
    if task is not None:
      from poi_jax import tasks
      parsed = parse_lines(lines, path, tasks.get_task(task).answers == "span")
      _need_questions(*parsed, path)
    from poi_jax.inference.reader import Reader
    reader = Reader.load(_MODEL.value, null_threshold=_NULL_THRESHOLD.value,
                         batch_size=_BATCH_SIZE.value, length_buckets=_LENGTH_BUCKETS.value)
    if parsed is None:
      parsed = parse_lines(lines, path, reader.is_extractive)
      _need_questions(*parsed, path)
    records, skipped = parsed
    answered, refused = write_answers(reader, records, _OUTPUT.value)
    skipped += refused
  except (InputFileError, CheckpointError, FileNotFoundError, ValueError,
          NltkResourceError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"answered {answered} question(s), skipped {skipped} line(s)"
        f"{' (each reported on stderr)' if skipped else ''}; wrote {_OUTPUT.value}")
  return 2 if skipped else 0


if __name__ == "__main__":
  flags.mark_flags_as_required(["model", "input", "output"])
  app.run(main)
