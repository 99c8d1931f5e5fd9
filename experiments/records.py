r"""Finished runs kept in the repository, so that a measurement spread over sessions survives a
change of machine.

A CPU claim runs for many hours, an hour or so a run, across sessions; the machine a session gets
is not always the last one, and what lies outside the repository (the work directories, their
checkpoints) goes with it. A finished run is summed up by its ``DONE.json`` marker
(`experiments/ablation.py`: its command, wall time, final results and ``environment.json``), a few
kilobytes. ``keep`` copies the markers of a measurement's finished runs into
``experiments/records/<measurement>/`` (committed with the notebook entry that reports them), each
with the commit it ran from; ``restore`` puts them back into a fresh work directory, where the
runner skips those runs and ``--no_run`` tables them with the rest:

  cd WORKTREE && python3 /path/to/main/experiments/records.py keep workdir-ablations/dreamcpusel
  cd NEW-WORKTREE && python3 /path/to/main/experiments/records.py restore workdir-ablations/dreamcpusel

(``experiments/ablations.sh keep|restore MEASUREMENT`` does the same, and ``run`` and ``table``
restore first.) A measurement's runs all come from one commit: a record from another commit than
the work tree's is refused, naming both, rather than tabled beside runs of other code.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

DONE = "DONE.json"
RECORDS = pathlib.Path(__file__).resolve().parent / "records"


def head_commit(tree: pathlib.Path) -> str:
  """The commit checked out at ``tree`` (a git work tree), e.g. ``a9443d4...`` (40 digits)."""
  try:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, check=True, text=True,
                          capture_output=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError) as e:
    raise SystemExit(f"error: {tree} is not a git work tree, so the commit its runs came from "
                     f"is unknown ({e})") from None


def _write_atomic(path: pathlib.Path, text: str) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(text)
  os.replace(tmp, path)


def _read(path: pathlib.Path) -> dict:
  try:
    record = json.loads(path.read_text())
  except (OSError, json.JSONDecodeError) as e:
    raise SystemExit(f"error: {path}: not a readable run record ({e})") from None
  for field in ("argv", "wall_s", "results"):
    if field not in record:
      raise SystemExit(f"error: {path}: no {field!r} field: not a DONE.json of "
                       "experiments/ablation.py")
  return record


def keep(workdir: pathlib.Path, records: pathlib.Path, commit: str) -> list[pathlib.Path]:
  """Copies every ``DONE.json`` under ``workdir`` (a measurement's work directory) to the same
  place under ``records / workdir.name``, adding ``"commit"``. An existing record of the same
  run is replaced only by the same run (same command and commit). Returns the records written."""
  written = []
  for marker in sorted(workdir.rglob(DONE)):
    record = _read(marker)
    record.setdefault("commit", commit)
    target = records / workdir.name / marker.relative_to(workdir)
    if target.exists():
      old = _read(target)
      if old["argv"][1:] != record["argv"][1:] or old.get("commit") != record["commit"]:
        raise SystemExit(f"error: {target} records another run (commit {old.get('commit')}) "
                         f"than {marker} (commit {record['commit']}); move one of them")
    _write_atomic(target, json.dumps(record, indent=2) + "\n")
    written.append(target)
  return written


def restore(records: pathlib.Path, workdir: pathlib.Path, commit: str) -> list[pathlib.Path]:
  """Puts each record of ``records / workdir.name`` back as ``DONE.json`` in ``workdir`` where
  that run has none (a marker already there is the run's own and is left alone). Refuses a record
  from a commit other than ``commit``. Returns the markers written."""
  source = records / workdir.name
  written = []
  for record_path in sorted(source.rglob(DONE)) if source.is_dir() else []:
    record = _read(record_path)
    if record.get("commit") != commit:
      raise SystemExit(f"error: {record_path} ran at commit {record.get('commit')}, this work "
                       f"tree is at {commit}: a measurement's runs come from one commit (run "
                       "from a worktree of the record's commit)")
    marker = workdir / record_path.relative_to(source)
    if not marker.exists():
      _write_atomic(marker, json.dumps(record, indent=2) + "\n")
      written.append(marker)
  return written


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("action", choices=("keep", "restore"))
  p.add_argument("workdir", type=pathlib.Path, help="a measurement's work directory, e.g. "
                 "workdir-ablations/dreamcpusel (relative to the current work tree)")
  p.add_argument("--records", type=pathlib.Path, default=RECORDS,
                 help="where the records live (default: this checkout's experiments/records)")
  args = p.parse_args(argv)
  commit = head_commit(pathlib.Path.cwd())
  if args.action == "keep":
    if not args.workdir.is_dir():
      raise SystemExit(f"error: {args.workdir}: no such work directory")
    done = keep(args.workdir, args.records, commit)
    print(f"kept {len(done)} finished runs of {args.workdir} in {args.records / args.workdir.name}"
          f" (commit {commit[:7]})")
  else:
    done = restore(args.records, args.workdir, commit)
    print(f"restored {len(done)} finished runs into {args.workdir} from "
          f"{args.records / args.workdir.name}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
