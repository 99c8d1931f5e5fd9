r"""Peak memory and time of every reader on hostile files (deep nesting, long numbers), each read in
a fresh child process under an address-space limit, so that a reader that blows up fails (a
`MemoryError` or a signal) instead of swapping the machine.

  python bench/hostile_files.py [--limit_mib=4096] [--cases=deep80k,deep200k,int5001,int10m,str40m]
  python bench/hostile_files.py --speed   # what the checks cost on a good 40 MB SQuAD file

One row per (reader, case): the outcome (the `DataError`'s first words, another exception's type,
or the signal that killed the child), the child's peak resident set size (``ru_maxrss``) and its
wall time. ``--speed``: CPU seconds of the byte checks alone and of the whole streamed read of the
shipped SQuAD sample repeated 25 times (40 MB). docs/data.md ("Hostile files") keeps the figures.
"""
from __future__ import annotations

import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import tempfile
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: poi_jax/ from this checkout (as the children)
_LIMIT = flags.DEFINE_integer("limit_mib", 4096, "Address-space limit of each child (MiB).")
_CASES = flags.DEFINE_list("cases", ["deep80k", "deep200k", "int5001", "int10m", "str40m"],
                           "Hostile contents (below).")
_SPEED = flags.DEFINE_bool("speed", False, "Time the checks on a good 40 MB file instead.")
_READERS = flags.DEFINE_list("readers", ["squad", "dream", "newsqa", "nlquad", "race", "nq",
                                         "narrativeqa-jsonl"], "Readers to run.")


def _value(case: str) -> bytes:
  """The hostile JSON value: balanced nesting (valid JSON, so no parser stops early) of ~80 kB
  or ~200 kB, an integer of 5,001 or 10 million digits, or a 40 MB string (valid, but long: the
  parser's time on one long token)."""
  if case.startswith("deep"):
    n = {"deep80k": 40_000, "deep200k": 100_000}[case]
    return b"[" * n + b"]" * n
  if case == "str40m":
    return b'"' + b"abc def " * 5_000_000 + b'"'
  return b"1" * {"int5001": 5001, "int10m": 10_000_000}[case]


def write(reader: str, case: str, d: pathlib.Path) -> pathlib.Path:
  """The file (or directory) ``reader`` is given: the hostile value where a record belongs."""
  v = _value(case)
  if reader in ("squad", "newsqa", "nlquad"):
    path = d / f"{reader}.json"
    path.write_bytes(b'{"version": "v2.0", "data": [' + v + b"]}")
  elif reader == "dream":
    path = d / "dream.json"
    path.write_bytes(b"[" + v + b"]")
  elif reader == "race":
    (d / "race" / "high").mkdir(parents=True)
    (d / "race" / "high" / "1.txt").write_bytes(b'{"id": ' + v + b"}")
    path = d / "race"
  else:  # JSON lines
    path = d / ("nq.jsonl" if reader == "nq" else "annotated.jsonl")
    path.write_bytes(b'{"example_id": ' + v + b"}\n")
  return path


_CHILD = r"""
import sys
from poi_jax.data.readers import choice, narrativeqa, newsqa, nlquad, nq, squad
from poi_jax.data.records import DataError
reader, path = sys.argv[1], sys.argv[2]
read = {"squad": squad.read_squad, "dream": choice.read_dream, "nlquad": nlquad.read_nlquad,
        "newsqa": lambda p: newsqa.read_newsqa(p, "train"),  # a split: its has_key pass too
        "race": lambda p: choice.read_race(p, "high"), "nq": nq.read_nq,
        "narrativeqa-jsonl": narrativeqa.read_annotated}[reader]
try:
  n = sum(1 for _ in read(path))
  print(f"read {n} records")
except DataError as e:
  print("DataError: " + str(e)[len(path):][:90].replace("\n", " "))
except BaseException as e:
  print(f"{type(e).__name__}: {str(e)[:60]}".replace("\n", " "))
"""


def run(reader: str, path: pathlib.Path, limit_mib: int) -> tuple[str, float, float]:
  """(outcome, peak RSS in MiB, wall seconds) of reading ``path`` in a child process."""
  def limit():
    resource.setrlimit(resource.RLIMIT_AS, (limit_mib << 20, limit_mib << 20))
  with tempfile.TemporaryFile("w+") as out:
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", _CHILD, reader, str(path)], cwd=ROOT,
                         stdout=out, stderr=subprocess.STDOUT, text=True, preexec_fn=limit)
    # wait4: this child's own rusage (RUSAGE_CHILDREN would be the largest child so far).
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    text = out.read().strip()
  if p.returncode < 0:
    outcome = f"killed by {signal.Signals(-p.returncode).name}"
  else:
    lines = text.splitlines() or ["?"]
    outcome = lines[-1] if p.returncode == 0 else f"exit {p.returncode}: {lines[-1][:80]}"
  return outcome, usage.ru_maxrss / 1024, wall


def speed() -> None:
  """CPU seconds: the byte checks alone (16 kB pieces, as the parser reads) and the whole read
  (`iter_array`: checks, yajl, the items built), on the SQuAD sample repeated 25 times."""
  from poi_jax.data import json_stream
  from poi_jax.data.json_stream import load_json
  sample = load_json(str(ROOT / "poi_jax" / "sample_data" / "squad2-dev-subset.json.xz"))
  with tempfile.TemporaryDirectory() as d:
    path = pathlib.Path(d) / "squad40.json"
    path.write_text(json.dumps(dict(sample, data=sample["data"] * 25)))
    raw = path.read_bytes()
    t = time.process_time()
    scanner = json_stream._Scanner()
    for i in range(0, len(raw), 1 << 14):
      assert scanner.feed(raw[i:i + (1 << 14)], final=False) is None
    checks = time.process_time() - t
    t = time.process_time()
    n = sum(1 for _ in json_stream.iter_array(str(path), key="data"))
    read = time.process_time() - t
  print(f"{len(raw) / 1e6:.1f} MB, {n} articles: checks {checks:.2f} s CPU "
        f"({len(raw) / 1e6 / checks:.0f} MB/s), whole read {read:.2f} s CPU")


def main(argv):
  del argv
  if _SPEED.value:
    speed()
    return
  print(f"| reader | case | outcome | peak RSS (MiB) | time (s) |")
  print("|---|---|---|---:|---:|")
  for case in _CASES.value:
    for reader in _READERS.value:
      with tempfile.TemporaryDirectory() as d:
        path = write(reader, case, pathlib.Path(d))
        outcome, peak, wall = run(reader, path, _LIMIT.value)
      print(f"| {reader} | {case} | {outcome} | {peak:.0f} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
  app.run(main)
