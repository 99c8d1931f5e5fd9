r"""Ablation runner: a grid of config overrides times seeds, each run trained and evaluated, and a
table of the metric's mean and standard deviation over the seeds.

  python experiments/ablation.py --config=configs/dream.py:minilm \
      --grid model.head=none,poi,duma --grid model.pos_embedding=true,false \
      --seeds=3 --workdir=DIR [--parallel=N] [--metrics=accuracy] [--holdout=0.1] \
      [-- --config.train.epochs=3 ...]   # extra flags for every run

Cells are the cartesian product of the ``--grid`` values (in the order given), or the cells listed
one by one with ``--cell "model.head=poi model.pos_embedding=false"`` (repeatable; for ablations
that are no product, e.g. POI-Net with and without POS beside DUMA); each cell runs once
per seed (``--seeds=N``: seeds 0..N-1, passed as ``--config.seed``) as a subprocess
``python -m poi_jax.main --config=... --workdir=DIR/<cell>/seed-<s> --mode=train_and_eval
<grid overrides> <extra flags>``, its output in ``log.txt`` beside it. ``--parallel=N`` runs N at
once on one device; then each process gets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` and
``XLA_PYTHON_CLIENT_MEM_FRACTION=0.9/N`` (unless already set) so that they share a GPU.

Resume: a run that exited 0 gets a ``DONE.json`` marker (its command, wall time, final results)
written by this runner. Running the same command again skips runs with a marker and reruns the
others (failed or interrupted ones; the engine resumes them from their last checkpoint). An
``eval_results.json`` alone does not count: intermediate evaluations write it too. A marker for
another command (other extra flags) is an error: use another ``--workdir``.

``--holdout=F`` carves a held-out fraction F of the training passages (`experiments/holdout.py`)
into ``DIR/holdout/`` and runs every cell on it (train on the rest, evaluate on the held-out
part): choose hyper-parameters this way, never on the evaluated articles.

``--no_run`` starts nothing and writes the table of what ``DIR`` holds (e.g. after copying back
the results of several device sessions into one ``DIR``; run the same command with the same
relative ``--workdir``, so that the markers' commands match). SIGTERM stops the running runs
(the engine saves a checkpoint) and still writes the table.

Writes ``DIR/ablation.md`` and ``DIR/ablation.json`` (one row per cell: each metric's mean and
sample standard deviation over the seeds that finished, the per-seed values, steps, wall time
(of every segment of a run that SIGTERM stopped and a later invocation resumed; a segment killed
outright, or one that failed, is not counted), device and software versions (from the run's
``environment.json``), and the log of each failed run), also after failures; exits 1 if any run
failed.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import math
import os
import pathlib
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: experiments/ and poi_jax/ of this checkout

from experiments import holdout as holdout_lib  # noqa: E402
from poi_jax.train import environment  # noqa: E402  (formats a record; imports no JAX)

DONE = "DONE.json"
# The wall time of a run's segments stopped by SIGTERM (the engine saved a checkpoint and the next
# invocation resumes from it), so that a finished run's wall_s counts all of its training.
WALL_EARLIER = "wall_earlier.json"


@dataclasses.dataclass
class Run:
  cell: str
  seed: int
  workdir: pathlib.Path
  argv: list[str]
  overrides: list[str]  # the cell's grid overrides, --config.key=value
  status: str = "pending"  # pending | running | done | failed
  results: dict | None = None
  wall_s: float | None = None
  environment: dict | None = None  # the run's environment.json (poi_jax.train.environment)
  proc: subprocess.Popen | None = None
  started: float = 0.0


def parse_grid(specs: list[str]) -> list[tuple[str, list[str]]]:
  """``["model.head=none,poi"]`` -> ``[("model.head", ["none", "poi"])]``."""
  grid = []
  for spec in specs:
    key, sep, values = spec.partition("=")
    key = key.strip().removeprefix("--").removeprefix("config.")
    if not sep or not key or not values:
      raise SystemExit(f"error: --grid {spec!r}: expected KEY=V1,V2,... (e.g. model.head=poi,duma)")
    if key in [k for k, _ in grid] or key == "seed":
      raise SystemExit(f"error: --grid {key} given twice (or seed: use --seeds)")
    grid.append((key, [v.strip() for v in values.split(",")]))
  return grid


def cell_name(assignment: list[tuple[str, str]]) -> str:
  """A stable, filesystem-safe directory name: ``model.head-poi__model.pos_embedding-false``; a
  value with other characters is sanitised and gets a hash of the exact assignment, so that two
  values never share a directory."""
  if not assignment:
    return "default"
  raw = "__".join(f"{k}-{v}" for k, v in assignment)
  safe = re.sub(r"[^A-Za-z0-9._-]", "_", raw)
  if safe != raw or len(safe) > 200:
    safe = safe[:180] + "_" + hashlib.sha1(raw.encode()).hexdigest()[:10]
  return safe


def _write_atomic(path: pathlib.Path, text: str) -> None:
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_text(text)
  os.replace(tmp, path)


def _read_json(path: pathlib.Path):
  try:
    return json.loads(path.read_text())
  except (OSError, json.JSONDecodeError):
    return None


def load_config(config_spec: str):
  """The config of ``path.py:variant`` (without command-line overrides)."""
  import importlib.util
  path, _, arg = config_spec.partition(":")
  spec = importlib.util.spec_from_file_location("ablation_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg or None)


def default_metrics(config_spec: str, extra: list[str]) -> list[str]:
  """The task's metric (the one that picks the best checkpoint)."""
  best = config_value(config_spec, extra, "train.best_metric")
  if best:
    return [best]
  from poi_jax import tasks
  return [tasks.get_task(config_value(config_spec, extra, "task")).metric]


def config_value(config_spec: str, extra: list[str], key: str) -> str:
  """``--config.<key>`` from the extra flags, else the config file's value."""
  for a in reversed(extra):
    if a.startswith(f"--config.{key}="):
      return a.split("=", 1)[1]
  value = load_config(config_spec)
  for part in key.split("."):
    value = value[part]
  return value


def parse_cell(spec: str) -> list[tuple[str, str]]:
  """``"model.head=poi model.pos_embedding=false"`` -> ``[("model.head", "poi"), ...]``."""
  out = []
  for part in spec.split():
    key, sep, value = part.partition("=")
    if not sep or not key:
      raise SystemExit(f"error: --cell {spec!r}: expected space-separated KEY=VALUE")
    out.append((key.removeprefix("--").removeprefix("config."), value))
  return out


def cells(args) -> list[list[tuple[str, str]]]:
  """The cells: the listed ``--cell``s, or the cartesian product of the ``--grid``s."""
  if args.cell and args.grid:
    raise SystemExit("error: give --grid (a product) or --cell (a list), not both")
  if args.cell:
    return [parse_cell(c) for c in args.cell]
  grid = parse_grid(args.grid)
  return [list(zip([k for k, _ in grid], values))
          for values in itertools.product(*[vs for _, vs in grid])]


def plan(args, extra: list[str]) -> list[Run]:
  seeds = list(range(args.seeds)) if args.seed_values is None else [
      int(s) for s in args.seed_values.split(",")]
  runs = []
  for assignment in cells(args):
    name = cell_name(assignment)
    overrides = [f"--config.{k}={v}" for k, v in assignment]
    # The extra flags come after the cell's, and the last assignment of a key wins: a key set
    # in both would run every cell at the extra flag's value, silently (and name the runs by
    # values they never used).
    clash = [f for k, _ in assignment for f in extra if f.startswith(f"--config.{k}=")]
    if clash:
      spec = " ".join(f"{k}={v}" for k, v in assignment)
      raise SystemExit(f"error: cell {spec!r} sets what the flags after -- set "
                       f"again ({' '.join(clash)}), which would override the cell's value in "
                       "every run: drop it from the flags after --")
    for seed in seeds:
      workdir = pathlib.Path(args.workdir) / name / f"seed-{seed}"
      argv = [sys.executable, "-m", args.module, f"--config={args.config}",
              f"--workdir={workdir}", "--mode=train_and_eval", *overrides, *extra,
              f"--config.seed={seed}"]
      runs.append(Run(name, seed, workdir, argv, overrides))
  return runs


def _check_marker(run: Run) -> None:
  """Marks ``run`` done when its workdir holds a DONE marker for the same command."""
  marker = _read_json(run.workdir / DONE)
  if marker is None:
    return
  if marker.get("argv", [])[1:] != run.argv[1:]:  # (the interpreter's path may differ)
    raise SystemExit(f"error: {run.workdir} holds a finished run of another command:\n  "
                     f"{shlex.join(marker.get('argv', []))}\nnot\n  {shlex.join(run.argv)}\n"
                     "use another --workdir (or delete that run directory)")
  run.status, run.results, run.wall_s = "done", marker["results"], marker["wall_s"]
  run.environment = marker.get("environment")


def _env(parallel: int) -> dict:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
  env.setdefault("PYTHONUNBUFFERED", "1")
  if parallel > 1:  # N processes share one accelerator: no process takes all its memory
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / parallel:.3f}")
  return env


def _start(run: Run, env: dict) -> None:
  run.workdir.mkdir(parents=True, exist_ok=True)
  log = open(run.workdir / "log.txt", "a")
  log.write(f"\n$ {shlex.join(run.argv)}\n")
  log.flush()
  run.proc = subprocess.Popen(run.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                              stdin=subprocess.DEVNULL)
  log.close()  # the child holds its own descriptor
  run.status, run.started = "running", time.time()


def _note_stopped(run: Run) -> None:
  """Adds the time of ``run``, stopped by SIGTERM, to its workdir's tally of earlier segments."""
  earlier = _read_json(run.workdir / WALL_EARLIER) or {}
  _write_atomic(run.workdir / WALL_EARLIER, json.dumps(
      {"wall_s": earlier.get("wall_s", 0.0) + time.time() - run.started,
       "segments": earlier.get("segments", 0) + 1}))


def _finish(run: Run) -> None:
  earlier = _read_json(run.workdir / WALL_EARLIER) or {}
  run.wall_s = time.time() - run.started + earlier.get("wall_s", 0.0)
  results = _read_json(run.workdir / "eval_results.json")
  if run.proc.returncode != 0 or results is None:
    run.status = "failed"
    return
  run.status, run.results = "done", results
  run.environment = _read_json(run.workdir / "environment.json")
  _write_atomic(run.workdir / DONE, json.dumps(
      {"argv": run.argv, "wall_s": run.wall_s, "segments": earlier.get("segments", 0) + 1,
       "results": results, "environment": run.environment}, indent=2))


def execute(runs: list[Run], parallel: int) -> None:
  """Runs the pending runs, ``parallel`` at a time, printing one line per start and finish."""
  env = _env(parallel)
  pending = [r for r in runs if r.status == "pending"]
  running: list[Run] = []
  total = len(runs)
  try:
    while pending or running:
      while pending and len(running) < parallel:
        run = pending.pop(0)
        _start(run, env)
        running.append(run)
        print(f"start {run.cell} seed {run.seed} ({run.workdir / 'log.txt'})", flush=True)
      time.sleep(0.5)
      for run in [r for r in running if r.proc.poll() is not None]:
        running.remove(run)
        _finish(run)
        n_done = sum(r.status == "done" for r in runs)
        n_failed = sum(r.status == "failed" for r in runs)
        what = (", ".join(f"{k}={v}" for k, v in run.results.items() if k != "step")
                if run.status == "done" else f"exit {run.proc.returncode}, see "
                f"{run.workdir / 'log.txt'}")
        print(f"[{n_done} done, {n_failed} failed, {len(running)} running / {total}] "
              f"{run.status} {run.cell} seed {run.seed} in {run.wall_s:.0f} s: {what}",
              flush=True)
  except KeyboardInterrupt:  # (SIGTERM too) stop the children; their runs resume next time
    for run in running:
      run.proc.terminate()
    for run in running:
      run.proc.wait()
      _note_stopped(run)
    raise


def _stats(values: list[float]) -> tuple[float | None, float | None]:
  if not values:
    return None, None
  return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def summarise(runs: list[Run], metrics: list[str]) -> list[dict]:
  """One row per cell: per-seed values, mean and sample standard deviation of each metric."""
  rows = {}
  for run in runs:
    row = rows.setdefault(run.cell, {"cell": run.cell, "overrides": run.overrides, "seeds": [],
                                      "failed": []})
    if run.status == "done":
      row["seeds"].append({"seed": run.seed, "step": run.results.get("step"),
                           "wall_s": round(run.wall_s, 1),
                           **{m: run.results.get(m) for m in metrics},
                           **_provenance(run.environment)})
    else:
      row["failed"].append({"seed": run.seed, "status": "failed" if run.status == "failed"
                            else "not run", "log": str(run.workdir / "log.txt")})
  for row in rows.values():
    for m in metrics:
      vals = [s[m] for s in row["seeds"] if isinstance(s[m], (int, float))]
      row[m] = dict(zip(("mean", "std"), _stats(vals)), values=vals)
  return list(rows.values())


def _provenance(env: dict | None) -> dict:
  """``{"device", "software"}`` of a finished run, from its environment.json (nothing for a run
  whose engine wrote none: an older engine, or a stand-in in tests), and ``"attention"``, the
  attention kernels its steps ran (``cpu_kernel``, ...), where the engine recorded them: on a
  CPU ``model.attention=auto`` chooses per machine, and the kernels draw other dropout bits."""
  if not env:
    return {}
  out = {"device": environment.device(env), "software": environment.software(env)}
  if env.get("attention"):
    out["attention"] = ", ".join(sorted({v["kernel"] for v in env["attention"].values()}))
  return out


def _fmt(x, digits=2) -> str:
  return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def table(rows: list[dict], metrics: list[str], header: str) -> str:
  cols = ["cell", *[f"{m} (mean ± std)" for m in metrics], *[f"{m} per seed" for m in metrics],
          "steps", "wall s (mean)", "failed or not run (log)"]
  lines = [header, "", "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
  for r in rows:
    cells = [" ".join(o.removeprefix("--config.") for o in r["overrides"]) or r["cell"]]
    cells += [f"{_fmt(r[m]['mean'])} ± {_fmt(r[m]['std'])}" for m in metrics]
    cells += [", ".join(f"{s['seed']}: {_fmt(s[m])}" for s in r["seeds"]) or "-" for m in metrics]
    cells.append(", ".join(sorted({str(s["step"]) for s in r["seeds"]})) or "-")
    cells.append(_fmt(statistics.fmean([s["wall_s"] for s in r["seeds"]]) if r["seeds"] else None,
                      0))
    cells.append("; ".join(f"seed {f['seed']} {f['status']}: {f['log']}" for f in r["failed"]))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
  ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (
      argv, [])
  p = argparse.ArgumentParser(description="Ablation grid x seeds through poi_jax.main; "
                              "see the module docstring.")
  p.add_argument("--config", required=True, help="e.g. configs/dream.py:minilm")
  p.add_argument("--grid", action="append", default=[], help="KEY=V1,V2 (repeatable)")
  p.add_argument("--cell", action="append", default=[],
                 help="instead of --grid: one cell, 'KEY=V KEY2=V2' (repeatable)")
  p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
  p.add_argument("--seed_values", default=None, help="explicit seeds, e.g. 13,42 (over --seeds)")
  p.add_argument("--workdir", required=True)
  p.add_argument("--parallel", type=int, default=1, help="runs at once on the device")
  p.add_argument("--metrics", default="", help="comma-separated eval_results.json keys "
                 "(default: the task's metric)")
  p.add_argument("--holdout", type=float, default=0.0,
                 help="> 0: train on the rest of the training data, evaluate on this fraction "
                      "of its passages (for choosing hyper-parameters)")
  p.add_argument("--no_run", action="store_true",
                 help="start nothing: the table of the runs already finished in --workdir")
  p.add_argument("--module", default="poi_jax.main", help=argparse.SUPPRESS)  # tests: a stub
  args = p.parse_args(ours)
  if args.parallel < 1 or args.seeds < 1:
    p.error("--parallel and --seeds must be >= 1")
  workdir = pathlib.Path(args.workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  if args.holdout > 0:
    train = config_value(args.config, extra, "data.train_file")
    train_h, eval_h = holdout_lib.carve(train, str(workdir / "holdout"), args.holdout)
    extra = [*extra, f"--config.data.train_file={train_h}", f"--config.data.eval_file={eval_h}"]
    print(f"holdout: training on {train_h}, evaluating on {eval_h} (carved from {train})")
  metrics = [m for m in args.metrics.split(",") if m] or default_metrics(args.config, extra)
  runs = plan(args, extra)
  for run in runs:
    _check_marker(run)
  n_skip = sum(r.status == "done" for r in runs)
  print(f"{len(runs)} runs ({len({r.cell for r in runs})} cells x "
        f"{len({r.seed for r in runs})} seeds), {n_skip} already finished, {args.parallel} at a "
        "time", flush=True)
  def stop(signum, frame):  # a scheduler's SIGTERM: stop the runs, still write the table
    raise KeyboardInterrupt(f"signal {signum}")
  signal.signal(signal.SIGTERM, stop)
  try:
    if not args.no_run:
      execute(runs, args.parallel)
  finally:
    rows = summarise(runs, metrics)
    header = (f"# Ablation: `{args.config}`\n\nseeds {sorted({r.seed for r in runs})}; extra "
              f"flags: `{shlex.join(extra) or '-'}`; std: sample standard deviation over seeds")
    _write_atomic(workdir / "ablation.json", json.dumps(
        {"config": args.config, "grid": args.grid, "cell": args.cell, "extra": extra, "metrics": metrics,
         "cells": rows}, indent=2))
    _write_atomic(workdir / "ablation.md", table(rows, metrics, header))
  print((workdir / "ablation.md").read_text())
  failed = [r for r in runs if r.status != "done"]
  if failed:
    print(f"{len(failed)} run(s) failed or not run: "
          + ", ".join(f"{r.cell} seed {r.seed}" for r in failed), file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
