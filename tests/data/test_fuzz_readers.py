"""Fuzzed data files: every reader either reads a mutated file correctly or raises one `DataError`
naming the file, the record and the field; never another exception (issue 28, item 5).

A seeded mutator (reproducible: the failing mutation's seed and description are in the assertion
message) starts from real records of each format: SQuAD 2.0, DREAM and RACE from ../shared/data
(the `data_dir` fixture), NQ (full and simplified), NewsQA and NLQuAD from the test writers built
on the shared SQuAD subset, NarrativeQA (the official CSV pair and DASSA's annotated JSON lines).
Each mutation applies one to three of: a dropped or renamed field, a value of the wrong type, an
empty string or list, a number outside the context (negative, past the end, 2**63), a huge value
(a 300,000-character string, 10**40), a duplicated record, and on the written bytes: invalid
UTF-8, a truncated file, a flipped byte.

Hostile files (issue 35), every class on every format: nesting depth, number length and range,
compression (gzip and xz, intact, truncated, a flipped byte), encodings (a byte order mark,
invalid UTF-8, a NUL byte, lone and paired surrogate escapes), and the file system (empty, blank
or BOM-only files, a directory for a file, an NQ directory without ``*.jsonl``); each case says
whether it must fail (and with what cause), must read as the unmodified file, or may do either.
And a child process reads a 200 kB nested file with each JSON reader under an address-space
limit (before the depth limit, 18 GB).

Default suite: 100 mutations per format and every hostile case once per format (readers only,
no JAX; seconds). The slow suite (``python -m pytest tests/data/test_fuzz_readers.py -m slow
-s``) runs 1,000 mutations per format and 1,000 drawn hostile cases per class and format, and
prints the counts (docs/results.md, "Fuzzed data files"; docs/data.md, "Hostile files").
"""
from __future__ import annotations

import codecs
import collections
import copy
import csv
import dataclasses
import gzip
import io
import json
import lzma
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
from typing import Any, Callable

import pytest

from poi_jax.data import json_stream
from poi_jax.data.json_stream import load_json
from poi_jax.data.readers import choice, narrativeqa, newsqa, nlquad, nq, squad
from poi_jax.data.records import (ChoiceExample, DataError, NarrativeExample, NqExample,
                                  SquadExample)
from tests.conftest import ROOT, SQUAD
from tests.data import nq_synthetic, qopn_fixtures

DEFAULT_MUTATIONS = 100
SLOW_MUTATIONS = 1000
# Wrong-typed values: every JSON type, plus the edge values of each.
WRONG = (None, True, False, 0, -1, 1.5, float("nan"), "", "x", "-1", [], [1], ["a"], {}, {"a": 1},
         [[]], [{}])
OUTSIDE = (-1, -7, 10**6, 2**63, -(2**63), 10**40)
HUGE_STRING = "ab " * 100_000
# A position (line, column, byte offset or item index) or a record and a field must be named.
POSITION = re.compile(r"line \d+|column \d+|offset \d+|record '#\d+'|:\d+: |the file is empty|"
                      r"cannot read|no such file|truncated|not UTF-8")
# What may be said of a whole file (its name is the whole "where"): a data mutation can empty it.
FILE_LEVEL = re.compile(r"the file is empty|a directory, not a file|no \*\.jsonl|no summaries\.csv")


# ----------------------------------------------------------------------------- the formats
@dataclasses.dataclass
class Format:
  name: str
  base: Any  # JSON-like data (a CSV file is a list of rows)
  write: Callable[[Any, pathlib.Path], pathlib.Path]  # data, directory -> the path to read
  read: Callable[[pathlib.Path], list]
  check: Callable[[list], None]  # invariants of records read without error
  files: Callable[[pathlib.Path], list[pathlib.Path]]  # the files byte mutations may touch


def _squad_subset(data_dir) -> dict:
  return load_json(str(SQUAD))


def _json_write(name: str) -> Callable:
  def write(data, d: pathlib.Path) -> pathlib.Path:
    path = d / name
    path.write_bytes(json.dumps(data).encode("utf-8"))
    return path
  return write


def _check_squad(records):
  for r in records:
    assert isinstance(r, SquadExample)
    assert all(isinstance(x, str) for x in (r.qid, r.question, r.context, r.title))
    assert isinstance(r.is_impossible, bool)
    for a in r.answers + r.plausible_answers:
      assert isinstance(a["text"], str) and type(a["answer_start"]) is int
      assert 0 <= a["answer_start"] <= len(r.context) - len(a["text"])


def _check_nlquad(records):
  _check_squad(records)
  for r in records:
    for a in r.answers:
      assert r.context[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]


def _check_choice(records):
  for r in records:
    assert isinstance(r, ChoiceExample)
    assert all(isinstance(x, str) for x in (r.qid, r.passage, r.question))
    assert all(isinstance(o, str) for o in r.options) and 0 <= r.label < len(r.options)


def _check_nq(records):
  for r in records:
    assert isinstance(r, NqExample) and isinstance(r.question, str) and r.question.strip()
    n = len(r.tokens)
    assert all(isinstance(t, str) for t in r.tokens) and len(r.html) == n
    for c in r.candidates:
      assert 0 <= c.start_token < c.end_token <= n
    for a in r.annotations:
      assert -1 <= a.candidate_index < len(r.candidates)
      for s in (a.long,) + a.short:
        assert s.start_token < 0 or 0 <= s.start_token < s.end_token <= n
      assert a.yes_no in nq.YES_NO


def _check_narrative(records):
  for r in records:
    assert isinstance(r, NarrativeExample) and r.question
    assert all(isinstance(t, str) for t in r.question)
    assert len(r.answers) == 2 and all(isinstance(a, str) and a for a in r.answers)
    assert r.document.tokens and all(isinstance(t, str) for t in r.document.tokens)


def _squad_format(data_dir) -> Format:
  article = copy.deepcopy(_squad_subset(data_dir)["data"][0])
  article["paragraphs"] = article["paragraphs"][:2]
  for p in article["paragraphs"]:
    p["qas"] = p["qas"][:4]
  return Format("squad2", {"version": "v2.0", "data": [article]}, _json_write("squad.json"),
                lambda p: list(squad.read_squad(p)), _check_squad, lambda p: [p])


def _dream_format(data_dir) -> Format:
  dialogues = json.loads((data_dir / "dream" / "dev.json").read_text())[:2]
  return Format("dream", dialogues, _json_write("dream.json"),
                lambda p: list(choice.read_dream(p)), _check_choice, lambda p: [p])


def _race_format(data_dir) -> Format:
  first = sorted((data_dir / "race" / "dev" / "high").glob("*.txt"))[0]
  passage = json.loads(first.read_text())

  def write(data, d):
    (d / "race" / "high").mkdir(parents=True)
    (d / "race" / "high" / first.name).write_bytes(json.dumps(data).encode("utf-8"))
    return d / "race"
  return Format("race", passage, write, lambda p: list(choice.read_race(p, "high")),
                _check_choice, lambda p: sorted((p / "high").glob("*.txt")))


def _nq_pages(data_dir) -> list[dict]:
  return nq_synthetic.page_examples(str(SQUAD), max_examples=2,
                                    paragraphs_per_page=1, num_annotations=2)


def _simplified(ex: dict) -> dict:
  """The simplified NQ format of a full-format example (as the official simplify script)."""
  strip = lambda s: {k: v for k, v in s.items() if "byte" not in k}
  out = {k: v for k, v in ex.items() if k not in ("document_tokens", "question_tokens")}
  out["document_text"] = " ".join(t["token"] for t in ex["document_tokens"])
  out["long_answer_candidates"] = [strip(c) for c in ex["long_answer_candidates"]]
  out["annotations"] = [{"long_answer": strip(a["long_answer"]),
                         "short_answers": [strip(s) for s in a["short_answers"]],
                         "yes_no_answer": a["yes_no_answer"]} for a in ex["annotations"]]
  return out


def _nq_write(name: str, gz: bool) -> Callable:
  def write(lines, d):
    path = d / name
    text = "".join(json.dumps(x) + "\n" for x in lines).encode("utf-8")
    path.write_bytes(gzip.compress(text, mtime=0) if gz else text)
    return path
  return write


def _nq_formats(data_dir) -> list[Format]:
  pages = _nq_pages(data_dir)
  return [Format("nq-full", pages, _nq_write("nq.jsonl.gz", gz=True),
                 lambda p: list(nq.read_nq(p)), _check_nq, lambda p: [p]),
          Format("nq-simplified", [_simplified(p) for p in pages],
                 _nq_write("nq.jsonl", gz=False), lambda p: list(nq.read_nq(p)), _check_nq,
                 lambda p: [p])]


def _qopn_formats(data_dir, tmp: pathlib.Path) -> list[Format]:
  articles = qopn_fixtures.long_articles(str(SQUAD),
                                         paragraphs_per_article=1, articles=(0, 1))[:2]
  articles = [(t, text, qas[:3]) for t, text, qas in articles]
  news = json.loads(pathlib.Path(qopn_fixtures.write_newsqa(tmp / "n.json", articles)).read_text())
  news["data"][0]["questions"][0]["validatedAnswers"] = [{"s": 0, "e": 3}, {"noAnswer": True}]
  nlq = json.loads(pathlib.Path(qopn_fixtures.write_nlquad(tmp / "l.json", articles)).read_text())
  return [Format("newsqa", news, _json_write("newsqa.json"),
                 lambda p: list(newsqa.read_newsqa(p, "train")), _check_squad, lambda p: [p]),
          Format("nlquad", nlq, _json_write("nlquad.json"),
                 lambda p: list(nlquad.read_nlquad(p)), _check_nlquad, lambda p: [p])]


def _narrative_csv_format(data_dir) -> Format:
  """The official pair: rows of summaries.csv and qaps.csv (header first)."""
  para = _squad_subset(data_dir)["data"][0]["paragraphs"][0]
  qas = [qa for qa in para["qas"] if qa["answers"]][:3]
  summaries = [["document_id", "set", "summary", "summary_tokenized"],
               ["d0", "train", para["context"], " ".join(para["context"].split())]]
  qaps = [["document_id", "set", "question", "answer1", "answer2", "question_tokenized"]] + [
      ["d0", "train", qa["question"], qa["answers"][0]["text"], qa["answers"][-1]["text"],
       " ".join(qa["question"].split())] for qa in qas]

  def write(data, d):
    for name in ("summaries", "qaps"):
      buf = io.StringIO()
      w = csv.writer(buf)
      rows = data.get(name, []) if isinstance(data, dict) else []
      for row in rows if isinstance(rows, list) else [[rows]]:
        w.writerow(["" if c is None else c for c in row] if isinstance(row, list) else [row])
      (d / f"{name}.csv").write_bytes(buf.getvalue().encode("utf-8"))
    return d / "qaps.csv"
  return Format("narrativeqa-csv", {"summaries": summaries, "qaps": qaps}, write,
                lambda p: list(narrativeqa.read_narrativeqa(str(p), "train")), _check_narrative,
                lambda p: [p, p.parent / "summaries.csv"])


def _narrative_jsonl_format(data_dir) -> Format:
  """DASSA's annotated lines: sentences with SRL, a discourse relation, a coreference cluster."""
  lines = []
  for i, para in enumerate(_squad_subset(data_dir)["data"][0]["paragraphs"][:2]):
    sents = [s.split() + ["."] for s in para["context"].split(". ")[:3] if s.split()]
    srl = [{"tokens": s, "srl": {"verbs": [
        {"verb": s[0], "tags": ["B-V", "B-ARG1"] + ["I-ARG1"] * (len(s) - 2)}]}} for s in sents]
    qas = [qa for qa in para["qas"] if qa["answers"]][:2]
    lines.append({"document_id": f"d{i}", "summary_parse": {"sentences": srl},
                  "sdp": [{"Type": "Explicit", "Sense": "Expansion.Conjunction",
                           "Arg1": {"Sent": 0, "Span": [0, 2]}, "Arg2": {"Sent": 1, "Span": [1, 3]},
                           "Conn": {"Sent": 1, "Span": [0, 1]}}],
                  "coref_clusters": [{"mentions": [{"start": 0, "end": 1},
                                                   {"start": 5, "end": 6}]}],
                  "questions": [{"question": qa["question"], "answer1": qa["answers"][0]["text"],
                                 "answer2": qa["answers"][-1]["text"], "id": qa["id"]}
                                for qa in qas]})

  def write(data, d):
    path = d / "annotated.jsonl"
    rows = data if isinstance(data, list) else [data]
    path.write_bytes("".join(json.dumps(x) + "\n" for x in rows).encode("utf-8"))
    return path
  return Format("narrativeqa-jsonl", lines, write,
                lambda p: list(narrativeqa.read_narrativeqa(str(p))), _check_narrative,
                lambda p: [p])


@pytest.fixture(scope="module")
def formats(data_dir, tmp_path_factory) -> dict[str, Format]:
  tmp = tmp_path_factory.mktemp("fuzz-bases")
  out = [_squad_format(data_dir), _dream_format(data_dir), _race_format(data_dir),
         *_nq_formats(data_dir), *_qopn_formats(data_dir, tmp), _narrative_csv_format(data_dir),
         _narrative_jsonl_format(data_dir)]
  return {f.name: f for f in out}


FORMAT_NAMES = ("squad2", "dream", "race", "nq-full", "nq-simplified", "newsqa", "nlquad",
                "narrativeqa-csv", "narrativeqa-jsonl")


# ----------------------------------------------------------------------------- the mutator
def _nodes(data) -> list[list[tuple[Any, Any]]]:
  """``(container, key)`` of every value in the tree, grouped by depth (so a mutation hits a
  top-level field as often as a token deep in a page)."""
  levels: list[list[tuple[Any, Any]]] = []
  stack = [(data, 0)]
  while stack:
    node, depth = stack.pop()
    items = (node.items() if isinstance(node, dict) else
             enumerate(node) if isinstance(node, list) else ())
    for k, v in list(items):
      while len(levels) <= depth:
        levels.append([])
      levels[depth].append((node, k))
      stack.append((v, depth + 1))
  return levels


def _outside_value(rng, v):
  n = v if isinstance(v, int) and not isinstance(v, bool) else 0
  return rng.choice(OUTSIDE + (n + 1, n - 1, n + 10**4))


def _huge_list(value: list) -> list:
  """The list's first item repeated to about 300 kB (at most 2,000 times)."""
  item = value[:1] or [0]
  return item * max(2, min(2000, 300_000 // (len(json.dumps(item)) + 1)))


def mutate_data(data, rng: random.Random) -> tuple[Any, str]:
  """One structural mutation of a deep copy of ``data``; returns it and what was done."""
  data = copy.deepcopy(data)
  levels = _nodes(data)
  if not levels:
    return rng.choice(WRONG), "the whole document replaced"
  node, key = rng.choice(rng.choice(levels))
  value = node[key]
  op = rng.choice(("drop", "rename", "wrong_type", "empty", "outside", "huge", "duplicate"))
  where = f"{op} at {key!r} (value {str(value)[:30]!r})"
  if op == "drop":
    del node[key]
  elif op == "rename":
    if isinstance(node, dict):
      node[f"{key}_renamed"] = node.pop(key)
    else:
      node[key] = {"renamed": value}
  elif op == "wrong_type":
    node[key] = rng.choice([w for w in WRONG if type(w) is not type(value)] or WRONG)
  elif op == "empty":
    node[key] = type(value)() if isinstance(value, (str, list, dict)) else ""
  elif op == "outside":
    node[key] = _outside_value(rng, value)
  elif op == "huge":
    node[key] = (HUGE_STRING if isinstance(value, str) else
                 _huge_list(value) if isinstance(value, list) else
                 dict(value, **{f"k{i}": i for i in range(2000)}) if isinstance(value, dict)
                 else 10**40)
  elif op == "duplicate":
    if isinstance(node, list):
      node.insert(key, copy.deepcopy(value))
    else:
      node[key] = [value, value]
  return data, where


def mutate_bytes(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
  op = rng.choice(("truncate", "invalid_utf8", "flip", "truncate_line"))
  at = rng.randrange(len(raw) + 1)
  if op == "truncate":
    return raw[:at], f"truncated at byte {at} of {len(raw)}"
  if op == "truncate_line":  # cut the last line short: a file cut during a copy
    cut = raw.rstrip(b"\n").rfind(b"\n") + 1
    at = rng.randrange(cut, len(raw) + 1) if cut < len(raw) else at
    return raw[:at], f"truncated at byte {at} of {len(raw)}"
  if op == "invalid_utf8":
    bad = rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe9t\xe9", b"\x80"))
    return raw[:at] + bad + raw[at:], f"invalid UTF-8 {bad!r} at byte {at}"
  if not raw:
    return raw, "flip of an empty file"
  at = min(at, len(raw) - 1)
  return raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1:], f"byte {at} replaced"


def mutated_file(fmt: Format, seed: int, d: pathlib.Path) -> tuple[pathlib.Path, str, bool]:
  """Writes mutation ``seed`` of ``fmt`` under ``d``; returns the path to read, what was done,
  and whether the bytes were mutated (then a file-level error may name a position instead of a
  record)."""
  rng = random.Random(f"{fmt.name}-{seed}")
  data, what = fmt.base, []
  for _ in range(rng.choice((1, 1, 1, 2, 3))):
    data, w = mutate_data(data, rng)
    what.append(w)
  byte_level = rng.random() < 0.3
  if byte_level and rng.random() < 0.5:
    data, what = fmt.base, []  # bytes alone, on the real records
  path = fmt.write(data, d)
  if byte_level:
    target = rng.choice(fmt.files(path))
    raw, w = mutate_bytes(target.read_bytes(), rng)
    target.write_bytes(raw)
    what.append(f"{target.name}: {w}")
  return path, "; ".join(what), byte_level


def run_mutation(fmt: Format, seed: int, d: pathlib.Path) -> str:
  """``"ok"`` or ``"DataError"``; any other exception, or an error that names neither a record
  and field nor a position, fails with the seed and the mutation."""
  path, what, byte_level = mutated_file(fmt, seed, d)
  try:
    records = fmt.read(path)
  except DataError as e:
    msg = str(e)
    assert msg.startswith(str(path.parent)), f"{fmt.name} seed {seed} ({what}): {msg[:300]}"
    named = e.record is not None or e.field not in (None, "<file>")
    assert named or (byte_level and POSITION.search(msg)) or FILE_LEVEL.search(msg), \
        f"{fmt.name} seed {seed} ({what}): the error names no record, field or position: {msg}"
    assert len(msg) < 2000, f"{fmt.name} seed {seed} ({what}): a {len(msg)}-character message"
    return "DataError"
  except Exception as e:  # noqa: BLE001 - the point of the test
    raise AssertionError(f"{fmt.name} seed {seed} ({what}): {type(e).__name__}: {e}"[:2000]) from e
  try:
    fmt.check(records)
  except AssertionError as e:
    raise AssertionError(f"{fmt.name} seed {seed} ({what}): read without error but a record "
                         f"breaks an invariant") from e
  return "ok"


def fuzz(fmt: Format, n: int, root: pathlib.Path) -> collections.Counter:
  counts = collections.Counter()
  for seed in range(n):
    d = root / f"m{seed}"
    d.mkdir()
    counts[run_mutation(fmt, seed, d)] += 1
    shutil.rmtree(d)
  return counts


# ----------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_real_records_read_unmutated(formats, name, tmp_path):
  """The starting records are real and read without error (so each mutation starts from a
  good file)."""
  fmt = formats[name]
  records = fmt.read(fmt.write(fmt.base, tmp_path))
  assert records
  fmt.check(records)


def test_the_invariants_can_fail(formats, tmp_path):
  """A reader that kept an answer outside its context would fail the check."""
  (ex,) = formats["squad2"].read(formats["squad2"].write(formats["squad2"].base, tmp_path))[:1]
  bad = dataclasses.replace(ex, answers=[{"text": "x", "answer_start": len(ex.context) + 5}])
  with pytest.raises(AssertionError):
    _check_squad([bad])


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_fuzzed_files_read_or_raise_one_data_error(formats, name, tmp_path):
  counts = fuzz(formats[name], DEFAULT_MUTATIONS, tmp_path)
  assert sum(counts.values()) == DEFAULT_MUTATIONS
  # Both outcomes happen: the mutator reaches the validation and also leaves readable files.
  assert counts["DataError"] > 0 and counts["ok"] > 0, counts


@pytest.mark.slow
def test_fuzzed_files_at_scale(formats, tmp_path):
  """1,000 mutations per format; prints the table of docs/results.md."""
  rows = []
  for name in FORMAT_NAMES:
    (tmp_path / name).mkdir()
    counts = fuzz(formats[name], SLOW_MUTATIONS, tmp_path / name)
    assert sum(counts.values()) == SLOW_MUTATIONS
    rows.append((name, SLOW_MUTATIONS, counts["ok"], counts["DataError"]))
  print("\n| format | mutations | read OK | DataError | other exception |")
  print("|---|---:|---:|---:|---:|")
  for name, n, ok, err in rows:
    print(f"| {name} | {n} | {ok} | {err} | 0 |")


# ----------------------------------------------------------------------------- hostile bytes
# Issue 35: classes of input that crashed the readers (a segfault on a 5,001-digit integer),
# made them use memory quadratic in the nesting depth (3 GB for 80 kB), or escaped as another
# exception. Each class is run on every format; each case says what must come out: "error" (one
# `DataError` whose message gives the cause), "same" (the records of the unmodified file), or
# "any" (a correct read or a `DataError`, as in the mutations above).
CLASSES = ("depth", "number", "compression", "encoding", "filesystem")
JSON_FORMATS = tuple(n for n in FORMAT_NAMES if n != "narrativeqa-csv")  # the CSV has no nesting
PLACEHOLDER = "@@hostile@@"
MAX_DEPTH = json_stream.MAX_DEPTH


@dataclasses.dataclass(frozen=True)
class Case:
  cls: str
  what: str
  expect: str  # "error" | "same" | "any"
  cause: str = ""  # a regular expression the error must match ("error")
  value: bytes = b""  # a JSON value put where a random value was (value cases)
  edit: str = ""  # a byte edit of one file (byte cases): see _edit


def _nested(depth: int, obj: bool = False) -> bytes:
  return (b'{"a": ' * depth + b"1" + b"}" * depth) if obj else b"[" * depth + b"]" * depth


def _cases(cls: str, fmt: str, rng: random.Random | None = None) -> list[Case]:
  """The cases of class ``cls`` for format ``fmt``: all of them (``rng`` None: the default
  suite's handful) or one drawn with ``rng`` (the slow suite, which draws its parameters)."""
  json_fmt = fmt in JSON_FORMATS
  err = (lambda cause: ("error", cause)) if json_fmt else (lambda cause: ("any", ""))
  r = rng or random.Random(0)
  if cls == "depth":
    deep = r.choice((MAX_DEPTH + 1, 1_000, 100_000)) if rng else 100_000
    out = [Case(cls, f"{MAX_DEPTH - 3} nested arrays", "any", value=_nested(MAX_DEPTH - 3)),
           Case(cls, f"{MAX_DEPTH + 1} nested arrays", *err("nested more than"),
                value=_nested(MAX_DEPTH + 1)),
           Case(cls, f"{deep:,} nested arrays", *err("nested more than"), value=_nested(deep)),
           Case(cls, "1,000 nested objects", *err("nested more than"),
                value=_nested(1_000, obj=True))]
  elif cls == "number":
    long = r.choice((1001, 5001, 1_000_000)) if rng else 5001
    out = [Case(cls, "2**63 - 1", "any", value=b"9223372036854775807"),
           Case(cls, "2**63", *err("integer outside"), value=b"9223372036854775808"),
           Case(cls, "-2**63 - 1", *err("integer outside"), value=b"-9223372036854775809"),
           Case(cls, f"{long:,} digits", *err("a number of"), value=b"1" * long),
           Case(cls, "1e400", *err("too large for a 64-bit float"), value=b"1e400"),
           Case(cls, "1.5e300", "any", value=b"1.5e300")]
  elif cls == "compression":
    out = [Case(cls, f"{z} intact", "same", edit=f"{z}") for z in ("gzip", "xz")]
    out += [Case(cls, f"{z} truncated", "error", "decompress|truncated", edit=f"{z}-cut")
            for z in ("gzip", "xz")]
    out += [Case(cls, "gzip with a flipped byte", "any", edit="gzip-flip"),
            Case(cls, "xz with a flipped byte", "any", edit="xz-flip")]
  elif cls == "encoding":
    out = [Case(cls, "a UTF-8 byte order mark", "same", edit="bom"),
           Case(cls, "invalid UTF-8", "error", "not UTF-8", edit="invalid-utf8"),
           Case(cls, "a NUL byte", "error", "NUL byte|not UTF-8", edit="nul"),
           Case(cls, "a lone high surrogate escape", *err("surrogate"), value=b'"a\\ud800"'),
           Case(cls, "a lone low surrogate escape", *err("surrogate"), value=b'"\\udc00b"'),
           Case(cls, "a surrogate pair escape", "any", value=b'"\\ud83d\\ude00"'),
           Case(cls, "an escaped NUL", "any", value=b'"a\\u0000b"')]
  else:
    out = [Case(cls, "an empty file", "error", "the file is empty", edit="empty"),
           Case(cls, "a blank file", "error", "the file is empty", edit="blank"),
           Case(cls, "only a byte order mark", "error", "the file is empty", edit="bom-only"),
           # NarrativeQA: a directory for qaps.csv is a checkout of the repository to look in.
           Case(cls, "a directory for a file", "error",
                r"a directory, not a file|no summaries\.csv beside it", edit="dir")]
    if fmt.startswith("nq"):
      out.append(Case(cls, "a directory without *.jsonl", "error", r"no \*\.jsonl",
                      edit="nq-empty-dir"))
  return [r.choice(out)] if rng else out


def _edit(edit: str, target: pathlib.Path, rng: random.Random) -> pathlib.Path | None:
  """Applies a byte edit to ``target``'s text (a gzipped file, NQ's, is decompressed first and
  compressed again after a text edit); returns a path to read instead, if the edit replaces
  what is read."""
  raw = target.read_bytes()
  packed = raw[:2] == b"\x1f\x8b"
  raw = gzip.decompress(raw) if packed else raw
  write = (lambda b: target.write_bytes(gzip.compress(b, mtime=0))) if packed else \
      target.write_bytes
  at = rng.randrange(len(raw) + 1)
  if edit in ("gzip", "xz") or edit.startswith(("gzip-", "xz-")):
    z = gzip.compress(raw, mtime=0) if edit.startswith("gzip") else lzma.compress(raw)
    if edit.endswith("-cut"):
      z = z[:rng.randrange(10, len(z) - 1)]
    elif edit.endswith("-flip"):
      i = rng.randrange(len(z) // 4, len(z))
      z = z[:i] + bytes([z[i] ^ (1 << rng.randrange(8))]) + z[i + 1:]
    target.write_bytes(z)
  elif edit == "bom":
    write(codecs.BOM_UTF8 + raw)
  elif edit == "invalid-utf8":
    write(raw[:at] + rng.choice((b"\xff", b"\xc3(", b"\xed\xa0\x80")) + raw[at:])
  elif edit == "nul":
    write(raw[:at] + b"\0" + raw[at:])
  elif edit == "empty":
    target.write_bytes(b"")  # no bytes at all, even for a .gz name
  elif edit in ("blank", "bom-only"):
    write({"blank": b" \n\t\n", "bom-only": codecs.BOM_UTF8}[edit])
  elif edit == "dir":
    target.unlink()
    target.mkdir()
    (target / "part.jsonl").mkdir()  # NQ reads a directory's *.jsonl: here one is a directory
  elif edit == "nq-empty-dir":
    d = target.parent / "nq-dir"
    d.mkdir()
    (d / "README.txt").write_text("no data here")
    return d
  return None


def _put_value(fmt: Format, value: bytes, d: pathlib.Path, rng: random.Random) -> pathlib.Path:
  """Writes ``fmt``'s records with a random value replaced by the JSON ``value`` (raw bytes, so
  that no encoder limit stops a hostile one; in a CSV they are a cell's text)."""
  data = copy.deepcopy(fmt.base)
  levels = _nodes(data)
  node, key = rng.choice(rng.choice(levels))
  node[key] = PLACEHOLDER
  path = fmt.write(data, d)
  for f in fmt.files(path):
    raw = f.read_bytes()
    packed = raw[:2] == b"\x1f\x8b"
    text = gzip.decompress(raw) if packed else raw
    mark = PLACEHOLDER.encode()
    if mark not in text:
      continue
    text = text.replace(b'"' + mark + b'"', value).replace(mark, value)
    f.write_bytes(gzip.compress(text, mtime=0) if packed else text)
  return path


def _ids(records) -> list:
  return [getattr(r, "qid", None) or getattr(r, "example_id", None) for r in records]


def run_hostile(fmt: Format, case: Case, seed: int, d: pathlib.Path) -> str:
  """``"ok"`` or ``"DataError"`` for one case; fails (naming the format, the case and the seed)
  on any other exception, on an error that names no file, record, field or position or not the
  case's cause, and on an outcome other than the case's expectation."""
  rng = random.Random(f"{fmt.name}-{case.what}-{seed}")
  label = f"{fmt.name} {case.cls}: {case.what} (seed {seed})"
  if case.value:
    path = _put_value(fmt, case.value, d, rng)
  else:
    path = fmt.write(fmt.base, d)
    target = rng.choice(fmt.files(path))
    path = _edit(case.edit, target, rng) or path
  try:
    records = fmt.read(path)
  except DataError as e:
    msg = str(e)
    assert msg.startswith(str(d)), f"{label}: the error names no file of it: {msg[:300]}"
    named = e.record is not None or e.field not in (None, "<file>")
    assert named or POSITION.search(msg) or FILE_LEVEL.search(msg) or "decompress" in msg, \
        f"{label}: the error names no record, field or position: {msg[:300]}"
    assert len(msg) < 2000, f"{label}: a {len(msg)}-character message"
    assert case.expect != "same", f"{label}: must read as the unmodified file, got {msg[:300]}"
    if case.expect == "error":
      assert re.search(case.cause, msg), f"{label}: the error does not say {case.cause!r}: {msg}"
    return "DataError"
  except Exception as e:  # noqa: BLE001 - the point of the test
    raise AssertionError(f"{label}: {type(e).__name__}: {e}"[:2000]) from e
  assert case.expect != "error", f"{label}: read without error ({len(records)} records)"
  fmt.check(records)
  if case.expect == "same":
    assert _ids(records) == _ids(fmt.read(fmt.write(fmt.base, d / "plain"))), label
  return "ok"


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_hostile_files_read_or_raise_one_data_error(formats, name, cls, tmp_path):
  """Each class of hostile input, every case of it, on every format (a few files each)."""
  outcomes = collections.Counter()
  for i, case in enumerate(_cases(cls, name)):
    d = tmp_path / f"c{i}"
    (d / "plain").mkdir(parents=True)
    outcomes[run_hostile(formats[name], case, 0, d)] += 1
  assert outcomes["DataError"] > 0, outcomes  # each class holds cases that must fail


def test_a_hostile_case_that_reads_would_fail(formats, tmp_path):
  """The expectation is checked: a case that must fail but reads (a plain SQuAD file taken for
  one with a broken compressed stream) fails the run."""
  case = Case("compression", "nothing done", "error", "decompress", edit="bom")
  (tmp_path / "plain").mkdir()
  with pytest.raises(AssertionError, match="read without error"):
    run_hostile(formats["squad2"], case, 0, tmp_path)


HOSTILE_SLOW = 1000


@pytest.mark.slow
def test_hostile_files_at_scale(formats, tmp_path):
  """1,000 cases per class and format, each drawn (case, depth, length, position, byte) from its
  seed; prints the table of docs/data.md ("Hostile files"): the outcomes by what the case
  required (an error, the unmodified file's records, or either)."""
  rows = []
  for name in FORMAT_NAMES:
    for cls in CLASSES:
      counts = collections.Counter()
      for seed in range(HOSTILE_SLOW):
        (case,) = _cases(cls, name, random.Random(f"{name}-{cls}-{seed}"))
        d = tmp_path / name / cls / str(seed)
        (d / "plain").mkdir(parents=True)
        counts[case.expect, run_hostile(formats[name], case, seed, d)] += 1
        shutil.rmtree(d)
      assert sum(counts.values()) == HOSTILE_SLOW
      rows.append((name, cls, counts))
  print("\n| format | class | cases | must fail: DataError | must read as the plain file: read | "
        "either: read / DataError | other exception |")
  print("|---|---|---:|---:|---:|---:|---:|")
  for name, cls, c in rows:
    print(f"| {name} | {cls} | {sum(c.values())} | {c['error', 'DataError']} | "
          f"{c['same', 'ok']} | {c['any', 'ok']} / {c['any', 'DataError']} | 0 |")


_MEMORY_CHILD = r"""
import json, resource, sys, time
from poi_jax.data.readers import choice, narrativeqa, newsqa, nlquad, nq, squad
from poi_jax.data.records import DataError
readers = {"squad": squad.read_squad, "dream": choice.read_dream, "nlquad": nlquad.read_nlquad,
           "newsqa": lambda p: newsqa.read_newsqa(p, "train"), "nq": nq.read_nq,
           "race": lambda p: choice.read_race(p, "high"),
           "narrativeqa": narrativeqa.read_annotated}
# The address space this process has now (imports done), plus the budget: a reader that needs
# more gets a MemoryError (reported) instead of swapping the machine.
vm = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmSize"))) * 1024
limit = vm + int(sys.argv[1]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
out = {}
for name, path in json.loads(sys.argv[2]).items():
  t = time.perf_counter()
  try:
    n = sum(1 for _ in readers[name](path))
    outcome = f"read {n} records"
  except DataError as e:
    outcome = "DataError: " + str(e)
  except BaseException as e:
    outcome = f"{type(e).__name__}: {str(e)[:200]}"
  out[name] = [outcome, time.perf_counter() - t]
print(json.dumps(out))
"""


def test_deeply_nested_files_fail_fast_in_bounded_memory(tmp_path):
  """A 200 kB file of nested arrays, given to every JSON reader in a child process allowed 256 MB
  more address space than its imports took: each ends in a `DataError` within seconds (before
  the depth limit, ijson's prefixes took 18 GB for this file, and the train CLI died in a
  MemoryError)."""
  deep = _nested(100_000)
  paths = {}
  for name in ("squad", "dream", "nlquad", "newsqa"):
    paths[name] = tmp_path / f"{name}.json"
    paths[name].write_bytes((b"[" if name == "dream" else b'{"version": "v2.0", "data": [')
                            + deep + (b"]" if name == "dream" else b"]}"))
  for name in ("nq", "narrativeqa"):
    paths[name] = tmp_path / f"{name}.jsonl"
    paths[name].write_bytes(b'{"example_id": ' + deep + b"}\n")
  (tmp_path / "race" / "high").mkdir(parents=True)
  (tmp_path / "race" / "high" / "1.txt").write_bytes(b'{"id": ' + deep + b"}")
  paths["race"] = tmp_path / "race"
  env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
  r = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, "256",
                      json.dumps({k: str(v) for k, v in paths.items()})],
                     capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
  assert r.returncode == 0, r.stderr[-2000:]
  results = json.loads(r.stdout.strip().splitlines()[-1])
  assert sorted(results) == sorted(paths)
  for name, (outcome, seconds) in results.items():
    assert outcome.startswith(f"DataError: {paths[name]}"), (name, outcome)
    assert f"nested more than {MAX_DEPTH} levels deep" in outcome, (name, outcome)
    assert seconds < 10, (name, seconds)
