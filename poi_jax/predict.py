r"""Answers a JSON-lines file of questions with a trained model (`poi_jax.reader.Reader`).

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

``id`` is optional (default: the line number). A bad line (not JSON, a missing or empty field,
a question the featurizer refuses) is reported on stderr with its line number and field, and
skipped; the other lines are answered. The output is written to a temporary file and renamed
when complete. Exit codes: 0 every line answered; 2 some lines skipped (the output holds the
others); 1 the model or the input cannot be read.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

from absl import app, flags, logging

from poi_jax.data.pos import NltkResourceError
from poi_jax.data.records import ChoiceExample, SquadExample
from poi_jax.io import default_mode
from poi_jax.models.encoders import CheckpointError

_MODEL = flags.DEFINE_string("model", None, "A poi-jax workdir or its export/ directory.")
_INPUT = flags.DEFINE_string("input", None, "JSON lines: one question per line.")
_OUTPUT = flags.DEFINE_string("output", None, "JSON lines: one answer per answered line.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", None,
                                   "Rows per model call (default: train.eval_batch_size).")
_NULL_THRESHOLD = flags.DEFINE_float(
    "null_threshold", None, "SQuAD 2.0: override the null-score-difference threshold δ "
    "(default: the one tuned on the eval set at the checkpoint).")
_CHUNK = 64  # questions featurised and answered together (the progress bar's granularity)


class LineError(ValueError):
  """A bad input line: names the file, the line and the field."""

  def __init__(self, path: str, line: int, field: str, problem: str):
    super().__init__(f"{path}:{line}: field {field!r}: {problem}")


def _text(obj: dict, field: str, path: str, line: int, *alternatives: str) -> str:
  for name in (field, *alternatives):
    if name in obj:
      value = obj[name]
      if not isinstance(value, str) or not value.strip():
        raise LineError(path, line, name, f"must be a non-empty string, got {value!r}")
      return value
  raise LineError(path, line, field, "missing")


def parse_line(raw: str, path: str, line: int, extractive: bool):
  """One input line -> ``(its id, a SquadExample / ChoiceExample)``; the record's ``qid`` is the
  line number (ids need not be unique) and its ``source`` ``path:line``. A `LineError` when the
  line is bad."""
  try:
    obj = json.loads(raw)
  except json.JSONDecodeError as e:
    raise LineError(path, line, "<line>", f"not JSON ({e})") from None
  if not isinstance(obj, dict):
    raise LineError(path, line, "<line>", "expected a JSON object")
  qid = obj.get("id", str(line))
  if not isinstance(qid, (str, int)):
    raise LineError(path, line, "id", f"must be a string or an integer, got {qid!r}")
  source, key = f"{path}:{line}", f"line {line}"
  question = _text(obj, "question", path, line)
  if extractive:
    return qid, SquadExample(key, question, _text(obj, "context", path, line), [], False, [], "",
                             source)
  passage = _text(obj, "passage", path, line, "context")
  options = obj.get("options")
  if not isinstance(options, list) or len(options) < 2:
    raise LineError(path, line, "options", f"must be a list of at least 2 strings, got "
                    f"{options!r}")
  if not all(isinstance(o, str) for o in options):
    raise LineError(path, line, "options", f"holds a value that is not a string: {options!r}")
  return qid, ChoiceExample(key, passage, question, options, 0, source)


def _result(qid, out) -> dict:
  d = out.to_dict()
  if "text" in d:
    d["answer"] = d.pop("text")
  return {"id": qid, **d}


def _answer(reader, items: list[tuple]) -> list[tuple]:
  """``[(record, result dict or the error)]`` for ``items`` = ``[(id, record)]``: the chunk at
  once, else (a record was refused) one by one, so that only the bad records are skipped."""
  run = reader.answer_records if reader.is_extractive else reader.choose_records
  try:
    return [(r, _result(q, o)) for (q, r), o in zip(items, run([r for _, r in items]))]
  except ValueError:
    pass
  out = []
  for qid, r in items:
    try:
      out.append((r, _result(qid, run([r])[0])))
    except ValueError as e:
      out.append((r, e))
  return out


def predict_file(reader, input_path: str, output_path: str, *, err=sys.stderr) -> tuple[int, int]:
  """Answers every good line of ``input_path`` into ``output_path`` (atomically); reports each
  bad line on ``err``. Returns ``(answered, skipped)``."""
  from tqdm.auto import tqdm
  with open(input_path) as f:
    lines = [(i, raw) for i, raw in enumerate(f, 1) if raw.strip()]
  records, skipped = [], 0
  for i, raw in lines:
    try:
      records.append(parse_line(raw, input_path, i, reader.is_extractive))
    except LineError as e:
      print(f"skipped: {e}", file=err)
      skipped += 1
  out_dir = os.path.dirname(os.path.abspath(output_path))
  os.makedirs(out_dir, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".tmp-")
  os.chmod(tmp, default_mode())  # mkstemp's 0600 would stay after the rename
  answered = 0
  try:
    with os.fdopen(fd, "w") as f, tqdm(total=len(records), desc="answering", unit="q") as bar:
      for start in range(0, len(records), _CHUNK):
        chunk = records[start:start + _CHUNK]
        for record, result in _answer(reader, chunk):
          if isinstance(result, Exception):
            print(f"skipped: {record.source}: {result}", file=err)
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


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  from poi_jax.reader import Reader
  try:
    if not os.path.exists(_INPUT.value):
      raise FileNotFoundError(f"--input={_INPUT.value!r} does not exist")
    reader = Reader.load(_MODEL.value, null_threshold=_NULL_THRESHOLD.value,
                         batch_size=_BATCH_SIZE.value)
    answered, skipped = predict_file(reader, _INPUT.value, _OUTPUT.value)
  except (CheckpointError, FileNotFoundError, ValueError, NltkResourceError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(f"answered {answered} question(s), skipped {skipped}; wrote {_OUTPUT.value}")
  return 2 if skipped else 0


if __name__ == "__main__":
  flags.mark_flags_as_required(["model", "input", "output"])
  app.run(main)
