r"""Chaos for training: kill a random process of a multi-process run at a random moment, resume
with the same command, again and again; then check the result against an uninterrupted run.

  python launch/chaos.py --cycles=50 --out=/tmp/chaos                    # the local launcher
  python launch/chaos.py --cycles=20 --launcher=slurm --out=/tmp/chaos   # one-node SLURM
  python launch/chaos.py --cycles=5 --out=DIR -- --config.train.max_steps=40   # flags to main

Each cycle starts the run (``launch/local_multiprocess.sh``, or ``launch/slurm_gpu.sh`` with
``PER=cpu`` on the cluster ``SLURM_CONF`` names; one node, since the processes are found and
signalled through this machine's ``/proc``), picks a phase (start-up, a training step, a
checkpoint save, an evaluation, shutdown), a process and a signal (SIGKILL, or SIGTERM), waits
for the phase and sends the signal; then the same command runs again and resumes. A run that
reaches its last step ends an *episode*: its losses (``metrics.jsonl``) and final parameters
(the last checkpoint) are compared with a reference run of the same command that nothing
interrupted (bitwise by default, ``--atol`` to allow a tolerance), and the next cycle starts a
new workdir. Checked in every cycle:

- **crash**: a process ended by a signal nobody sent (SIGSEGV, SIGABRT, ...), with a status
  other than 0, 70 (stopped: another was lost), 137/143 (the signal sent), or its log holds
  ``Fatal Python error``, ``Segmentation fault`` or a traceback;
- **hang**: the launcher still running ``--hang_s`` after the signal (default: the watchdog's
  timeout + the launcher's grace + 30 s);
- **one line**: every process that ended with an error ends its log with one line that says why
  (``error: ...`` or ``SIGTERM: checkpoint N saved ...``), except the process that was sent
  the signal and died of it (the launcher's line names it: ``process 1 failed with status 137
  (KILL)``, srun's ``task 1: Killed``) and, under SLURM, tasks that srun itself terminated
  because another task failed (``--kill-on-bad-exit``);
- **no checkpoint lost or damaged**: the newest checkpoint committed before the signal is still
  there, the resume restores the newest one present (``resumed from checkpoint N``), and nothing
  is set aside as damaged;
- **resume overhead**: seconds from the signal to the first new training step of the resumed run
  (the ``time`` of that step's ``metrics.jsonl`` row).

The report (``OUT/chaos_report.json``, and a Markdown table on stdout) counts cycles, signals by
phase, crashes, hangs, lost or damaged checkpoints, episodes equal to the reference, and the
resume overhead; the exit status is 1 if any check failed. Every run's logs stay under OUT.
docs/reliability.md has the figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: poi_jax/ of this checkout
SAMPLE = ROOT / "poi_jax" / "sample_data" / "squad2-dev-subset.json.xz"
PHASES = ("start-up", "step", "save", "eval", "shutdown")
WATCHDOG_S = 5
GRACE_S = 10
# The tiny POI-Net on the SQuAD 2.0 sample the package ships: a few steps a second on a CPU, a
# checkpoint every 4 steps and an evaluation every 8, so every phase comes round in ~20 s.
WORKLOAD = ["--config=configs/squad2.py:tiny", "--mode=train_and_eval",
            f"--config.data.train_file={SAMPLE}", f"--config.data.eval_file={SAMPLE}",
            "--config.data.max_train_examples=64", "--config.data.max_eval_examples=40",
            "--config.train.log_every=1", "--config.train.max_steps=24",
            "--config.train.save_every=4", "--config.train.eval_every=8",
            "--config.train.export_best=false",
            f"--config.distributed.watchdog_timeout_s={WATCHDOG_S}"]
OK_STATUS = {0, 70, 128 + signal.SIGTERM}
CRASH_TEXT = ("Fatal Python error", "Segmentation fault", "Traceback (most recent call last)",
              "core dumped", "terminate called")
JOINED = "joined the run"  # printed by each process once jax.distributed is up and watched
ONE_LINE = re.compile(r"^(error: |SIGTERM: checkpoint \d+ saved|SIGINT: checkpoint \d+ saved)")


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def last_line(text: str) -> str:
  lines = [l for l in text.replace("\r", "\n").splitlines() if l.strip()]
  return lines[-1].strip() if lines else ""


def read(path: pathlib.Path) -> str:
  try:
    return path.read_text(errors="replace")
  except OSError:
    return ""


def metrics_rows(workdir: pathlib.Path) -> list[dict]:
  """The rows of ``metrics.jsonl`` (a row being written at a kill is skipped)."""
  out = []
  for line in read(workdir / "metrics.jsonl").splitlines():
    try:
      out.append(json.loads(line))
    except ValueError:
      pass
  return out


def committed_steps(workdir: pathlib.Path) -> list[int]:
  """Checkpoint steps renamed into place by orbax (its commit); temporary ones excluded."""
  d = workdir / "checkpoints"
  return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def saving(workdir: pathlib.Path, since: float = 0.0) -> bool:
  """Whether orbax is writing a checkpoint (a temporary directory made after ``since``: one left
  by a save an earlier kill cut short is removed by the next start, not written to)."""
  d = workdir / "checkpoints"
  try:
    return d.is_dir() and any(".orbax-checkpoint-tmp" in p.name and p.stat().st_mtime >= since
                              for p in d.iterdir())
  except OSError:  # (renamed into place while listed)
    return False


def find_processes(workdir: pathlib.Path) -> dict[int, int]:
  """process index -> pid of each `poi_jax.main` process training in ``workdir`` on this
  machine (``--process_id=`` of the local launcher, ``SLURM_PROCID`` under SLURM)."""
  out = {}
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
      environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
      continue
    if "poi_jax.main" not in cmd or f"--workdir={workdir}" not in cmd:
      continue
    index = next((int(a.split("=", 1)[1]) for a in cmd if a.startswith("--process_id=")), None)
    if index is None:
      m = re.search(r"(?:^|\0)SLURM_PROCID=(\d+)", environ)
      index = int(m.group(1)) if m else None
    if index is not None:
      out[index] = int(pid)
  return out


@dataclasses.dataclass
class Attempt:
  """One start of the run: its launcher and where its logs go."""
  proc: subprocess.Popen
  logs: pathlib.Path
  started: float

  def log(self, index: int) -> str:
    return read(self.logs / f"proc{index}.log")


class Launcher:
  """Starts the run's processes with one of the repository's launchers."""

  def __init__(self, kind: str, nprocs: int, extra_env: dict):
    self.kind, self.nprocs, self.extra_env = kind, nprocs, extra_env

  def start(self, args: list[str], logs: pathlib.Path) -> Attempt:
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **self.extra_env, PYTHON=sys.executable,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if self.kind == "local":
      env.update(NPROCS=str(self.nprocs), PORT=str(free_port()), LOG_DIR=str(logs),
                 GRACE_S=str(GRACE_S))
      argv = ["bash", "launch/local_multiprocess.sh", "--", *args]
    else:
      env.update(NODES="1", PER="cpu", TASKS_PER_NODE=str(self.nprocs),
                 SRUN_ARGS=f"--output={logs}/proc%t.log")
      argv = ["bash", "launch/slurm_gpu.sh", "--", *args]
    out = open(logs / "launcher.log", "w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    out.close()
    return Attempt(proc, logs, time.time())

  def statuses(self, attempt: Attempt) -> dict[int, str]:
    """process index -> how the launcher says it ended, for those it reports as failed."""
    text = read(attempt.logs / "launcher.log")
    if self.kind == "local":
      return {int(i): s for i, s in re.findall(r"process (\d+) failed with status (\d+)", text)}
    out = {}
    for i, what in re.findall(r"task (\d+): (.+)", text):
      m = re.match(r"Exited with exit code (\d+)", what)
      out[int(i)] = m.group(1) if m else {"Killed": "137", "Terminated": "143"}.get(
          what.strip(), what.strip())
    return out


def phase_now(workdir: pathlib.Path, attempt: Attempt, rows_before: int) -> str:
  """What the run is doing, as seen from outside."""
  log0 = attempt.log(0)
  if "compiled step shapes:" in log0:
    return "shutdown"
  if saving(workdir, attempt.started):
    return "save"
  if log0.rfind("eval @") > log0.rfind("train:"):  # (a resumed run may evaluate first)
    return "eval"
  return "start-up" if len(metrics_rows(workdir)) <= rows_before else "step"


def wait_for_phase(phase: str, workdir: pathlib.Path, attempt: Attempt, rows_before: int,
                   rng: random.Random, max_steps: int) -> bool:
  """Sleeps until ``phase`` is under way (True), or the run ended first (False)."""
  if phase == "start-up":
    deadline = time.time() + rng.uniform(0.5, 8.0)
    while time.time() < deadline:
      if attempt.proc.poll() is not None:
        return False
      time.sleep(0.01)
    return True
  while attempt.proc.poll() is None:
    rows = metrics_rows(workdir)
    log0 = attempt.log(0)
    if phase == "step" and len(rows) > rows_before:
      # a random step from here on, not always the first one after a resume
      if rng.random() < 0.35 or max(r.get("step", 0) for r in rows) >= max_steps - 1:
        time.sleep(rng.uniform(0, 0.2))
        return True
      rows_before = len(rows)
    elif phase == "save" and saving(workdir, attempt.started):
      return True
    elif phase == "eval" and log0.rfind("eval @") > log0.rfind("train:"):
      time.sleep(rng.uniform(0, 0.3))
      return True
    elif phase == "shutdown" and "compiled step shapes:" in log0:
      return True
    time.sleep(0.005)
  return False


@dataclasses.dataclass
class Cycle:
  """One signal and what followed it: where it was aimed and landed, the processes' statuses,
  the problems found, and the resume it caused (its step and overhead)."""
  episode: int
  attempt: str
  aimed: str
  phase: str
  signal: str
  target: int
  committed_before: list
  statuses: dict
  problems: list
  t_signal: float = 0.0
  launcher_exit_s: float | None = None
  resume_step: int | None = None
  resume_overhead_s: float | None = None


def check_exit(launcher: Launcher, attempt: Attempt, signum: int | None,
               signalled: set) -> tuple[dict, list[str]]:
  """The processes' ends and what is wrong with them."""
  problems = []
  statuses = launcher.statuses(attempt)
  # srun ends the whole step when one task fails (--kill-on-bad-exit=1): the others get its
  # SIGTERM, and srun's lines name the task that failed first
  step_ended_by_srun = bool(re.search(r"Terminating StepId|CANCELLED AT",
                                      read(attempt.logs / "launcher.log")
                                      + "".join(attempt.log(i) for i in range(launcher.nprocs))))
  for i in range(launcher.nprocs):
    text = attempt.log(i)
    status = statuses.get(i, "0")
    sent = i in signalled and signum is not None
    allowed = OK_STATUS | ({128 + signum} if sent else set())
    if launcher.kind == "local" and status == "137" and not sent and JOINED not in text:
      pass  # killed by the launcher before it joined the run: jax.distributed.initialize waits
      # for a coordinator that died before it listened (a slow one looks the same) up to
      # distributed.initialization_timeout_s; the launcher's grace ends it (docs/reliability.md)
    elif launcher.kind == "local" and status == "137" and not sent:
      problems.append(f"hang: process {i} did not stop by itself; the launcher killed it after "
                      f"its grace")
    elif not status.isdigit() or int(status) not in allowed:
      problems.append(f"crash: process {i} ended with {status}")
    for mark in CRASH_TEXT:
      if mark in text:
        problems.append(f"crash: process {i}'s log holds '{mark}'")
    by_signal_sent = sent and status == str(128 + signum)  # (named by the launcher's line)
    by_srun = launcher.kind == "slurm" and status == "143" and step_ended_by_srun
    if status.isdigit() and int(status) not in (0, 137) and not by_signal_sent and not by_srun:
      line = last_line(text)
      if not ONE_LINE.match(line):
        problems.append(f"no one-line cause: process {i} ended with {status}, last line {line!r}")
  return statuses, problems


def run_once(launcher: Launcher, args: list[str], logs: pathlib.Path, timeout: float) -> Attempt:
  """One start of the run left alone to its end (the reference); a run past ``timeout`` is
  killed and is an error."""
  attempt = launcher.start(args, logs)
  try:
    attempt.proc.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    os.killpg(attempt.proc.pid, signal.SIGKILL)
    attempt.proc.wait()
    raise RuntimeError(f"{logs}: the run did not end in {timeout:.0f} s")
  return attempt


def final_state(workdir: pathlib.Path):
  """The last checkpoint's arrays (numpy), read by orbax without building the model."""
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  import logging
  logging.getLogger("absl").setLevel(logging.ERROR)  # orbax's notes on optional metadata
  import jax
  import numpy as np
  import orbax.checkpoint as ocp
  path = workdir / "checkpoints" / str(committed_steps(workdir)[-1]) / "state"
  ckpt = ocp.PyTreeCheckpointer()
  tree = ckpt.metadata(path).item_metadata.tree
  restore = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree,
                         is_leaf=lambda x: hasattr(x, "shape"))
  state = ckpt.restore(path, args=ocp.args.PyTreeRestore(restore_args=restore))
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_leaves_with_path(state)}


def compare(workdir: pathlib.Path, reference: dict, atol: float) -> list[str]:
  """What differs between an episode's finished run and the reference run."""
  import numpy as np
  problems = []
  rows = [r for r in metrics_rows(workdir) if "loss" in r]
  steps = [r["step"] for r in rows]
  if len(steps) != len(set(steps)):
    problems.append(f"metrics.jsonl logs a step twice: {sorted(steps)}")
  got = {r["step"]: r["loss"] for r in rows}
  if sorted(got) != sorted(reference["losses"]):
    problems.append(f"steps {sorted(got)} differ from the reference's {sorted(reference['losses'])}")
  worst = max((abs(got[s] - reference["losses"][s]) for s in got if s in reference["losses"]),
              default=0.0)
  if worst > atol:
    problems.append(f"losses differ from the reference's by up to {worst:.3g} (atol {atol})")
  state = final_state(workdir)
  if sorted(state) != sorted(reference["state"]):
    problems.append("the final checkpoint holds other arrays than the reference's")
  else:
    diff = max(float(np.max(np.abs(state[k].astype(np.float64)
                                   - reference["state"][k].astype(np.float64)), initial=0.0))
               for k in state)
    if diff > atol:
      problems.append(f"final parameters differ from the reference's by up to {diff:.3g}")
  return problems


def chaos(args) -> dict:
  rng = random.Random(args.seed)
  out = pathlib.Path(args.out).resolve()
  out.mkdir(parents=True, exist_ok=True)
  env = {"POI_JAX_NLTK_DOWNLOAD": os.environ.get("POI_JAX_NLTK_DOWNLOAD", "0")}
  launcher = Launcher(args.launcher, args.nprocs, env)
  cache = out / "compilation-cache"
  run_args = [*WORKLOAD, f"--config.runtime.compilation_cache_dir={cache}", *args.main_flags]
  max_steps = int(next(a.split("=")[1] for a in reversed(run_args)
                       if a.startswith("--config.train.max_steps=")))
  hang_s = args.hang_s or WATCHDOG_S + GRACE_S + 30

  ref_dir = out / "reference"
  if not (ref_dir / "reference.done").exists():
    shutil.rmtree(ref_dir, ignore_errors=True)
    attempt = run_once(launcher, [*run_args, f"--workdir={ref_dir}"], ref_dir / "logs", 900)
    if attempt.proc.returncode:
      raise RuntimeError(f"the reference run failed ({attempt.proc.returncode}); see "
                         f"{ref_dir}/logs")
    (ref_dir / "reference.done").write_text("")
  reference = {"losses": {r["step"]: r["loss"] for r in metrics_rows(ref_dir) if "loss" in r},
               "state": final_state(ref_dir)}

  cycles: list[Cycle] = []
  episodes, unprovoked = [], []
  episode = 0
  while len(cycles) < args.cycles:
    episode += 1
    workdir = out / f"episode-{episode}"
    shutil.rmtree(workdir, ignore_errors=True)
    waiting: list[Cycle] = []  # signalled, their first new training step not seen yet
    failures = 0
    for n in range(1, 1000):
      logs = out / f"episode-{episode}-logs" / f"attempt-{n}"
      rows_before = len(metrics_rows(workdir))
      committed_at_start = committed_steps(workdir)
      attempt = launcher.start([*run_args, f"--workdir={workdir}"], logs)
      aimed = rng.choice(PHASES) if len(cycles) < args.cycles else None
      cycle = None
      if aimed and wait_for_phase(aimed, workdir, attempt, rows_before, rng, max_steps):
        procs = find_processes(workdir)
        target = rng.randrange(args.nprocs)
        signum = signal.SIGKILL if rng.random() < args.kill_fraction else signal.SIGTERM
        phase = phase_now(workdir, attempt, rows_before)
        cycle = Cycle(episode, logs.name, aimed, phase, signal.Signals(signum).name, target,
                      committed_steps(workdir), {}, [], t_signal=time.time())
        if target in procs:
          try:
            os.kill(procs[target], signum)
          except ProcessLookupError:
            pass
        else:
          cycle.problems.append(f"process {target} not found (found {sorted(procs)})")
      try:
        attempt.proc.wait(timeout=hang_s if cycle else 900)
        if cycle:
          cycle.launcher_exit_s = round(time.time() - cycle.t_signal, 2)
      except subprocess.TimeoutExpired:
        (cycle.problems if cycle else unprovoked).append(
            f"hang: episode {episode} {logs.name}: the launcher still ran "
            f"{hang_s if cycle else 900} s after {'the signal' if cycle else 'its start'}")
        os.killpg(attempt.proc.pid, signal.SIGKILL)
        attempt.proc.wait()
      # the resume of this start: the newest checkpoint, none set aside
      resume_problems, resume_step = check_resume(workdir, attempt, committed_at_start)
      for c in waiting:
        c.problems += resume_problems
        resume_problems = []
        if resume_step is not None and c.resume_step is None:
          c.resume_step = resume_step
      first = first_new_step_time(workdir, waiting[0].t_signal) if waiting else None
      if first is not None:
        for c in waiting:
          c.resume_overhead_s = round(first - c.t_signal, 2)
        waiting = []
      unprovoked += resume_problems
      if cycle:
        cycle.statuses, problems = check_exit(launcher, attempt, signal.Signals[cycle.signal],
                                              {cycle.target})
        cycle.problems += problems
        now = committed_steps(workdir)
        lost = [s for s in cycle.committed_before if s not in now and s > max(now, default=-1)]
        if lost or (cycle.committed_before and not now):
          cycle.problems.append(f"checkpoint lost: {cycle.committed_before} committed before "
                                f"the signal, {now} after")
        cycles.append(cycle)
        waiting.append(cycle)
        print(f"cycle {len(cycles)}/{args.cycles}: episode {episode} {logs.name}, "
              f"{cycle.signal} to process {cycle.target} in {cycle.phase} (aimed: {aimed}); "
              f"launcher ended {cycle.launcher_exit_s} s after it, statuses "
              f"{cycle.statuses or 'all 0'}; {'; '.join(cycle.problems) or 'ok'}", flush=True)
      elif attempt.proc.returncode != 0:
        _, problems = check_exit(launcher, attempt, None, set())
        unprovoked.append(f"episode {episode} {logs.name}: the run failed with "
                          f"{attempt.proc.returncode} and no signal sent: {problems}")
        failures += 1
        if failures >= 3:
          break
      if attempt.proc.returncode == 0 and max_step(workdir) >= max_steps:
        break  # the run is complete (a signal that came as it ended found nothing left to do)
    problems = compare(workdir, reference, args.atol) if max_step(workdir) >= max_steps else \
        ["the episode did not finish"]
    episodes.append({"episode": episode, "problems": problems})
    print(f"episode {episode}: {'equal to the reference' if not problems else problems}",
          flush=True)
  return report(args, cycles, episodes, unprovoked)


def max_step(workdir: pathlib.Path) -> int:
  return max((r.get("step", 0) for r in metrics_rows(workdir) if "loss" in r), default=0)


def first_new_step_time(workdir: pathlib.Path, after: float) -> float | None:
  """When the first training step after ``after`` was logged (read before the next start, which
  drops the rows past its checkpoint)."""
  times = [r["time"] for r in metrics_rows(workdir) if "loss" in r and r.get("time", 0) > after]
  return min(times) if times else None


def check_resume(workdir: pathlib.Path, attempt: Attempt,
                 committed: list[int]) -> tuple[list[str], int | None]:
  """After a start has ended: did it restore the newest checkpoint present when it started, and
  set none aside as damaged? Returns the problems and the step it resumed from."""
  text = attempt.log(0)
  m = re.search(r"resumed from checkpoint (\d+)", text)
  step = int(m.group(1)) if m else None
  problems = []
  if step is not None and committed and step != committed[-1]:
    problems.append(f"resumed from {step}, not the newest checkpoint {committed[-1]}")
  if "is damaged" in text or (workdir / "checkpoints-damaged").exists():
    problems.append("a checkpoint was set aside as damaged")
  return problems, step


def report(args, cycles: list[Cycle], episodes: list[dict], unprovoked: list[str]) -> dict:
  by_phase = {p: {"SIGKILL": 0, "SIGTERM": 0} for p in PHASES}
  for c in cycles:
    by_phase[c.phase][c.signal] += 1
  overheads = [c.resume_overhead_s for c in cycles if c.resume_overhead_s is not None]
  kinds = {"crash": 0, "hang": 0, "no one-line cause": 0, "checkpoint lost": 0, "resumed from": 0,
           "damaged": 0}
  for c in cycles:
    for p in c.problems:
      for k in kinds:
        if k in p:
          kinds[k] += 1
  result = {
      "launcher": args.launcher, "processes": args.nprocs, "seed": args.seed,
      "cycles": len(cycles), "signals_by_phase": by_phase,
      "cycles_with_problems": sum(bool(c.problems) for c in cycles),
      "problems_by_kind": kinds,
      "failures_without_a_signal": unprovoked,
      "episodes": len(episodes),
      "episodes_equal_to_reference": sum(not e["problems"] for e in episodes),
      "resume_overhead_s": {"median": statistics.median(overheads) if overheads else None,
                            "max": max(overheads) if overheads else None,
                            "n": len(overheads)},
      "cycle_records": [{k: v for k, v in dataclasses.asdict(c).items()} for c in cycles],
      "episode_records": episodes,
  }
  result["ok"] = not result["cycles_with_problems"] and not unprovoked and \
      result["episodes_equal_to_reference"] == len(episodes)
  return result


def markdown(r: dict) -> str:
  lines = [f"chaos: {r['cycles']} cycles on the {r['launcher']} launcher, {r['processes']} "
           f"processes, seed {r['seed']}", "",
           "| phase | SIGKILL | SIGTERM |", "| --- | ---: | ---: |"]
  lines += [f"| {p} | {v['SIGKILL']} | {v['SIGTERM']} |" for p, v in r["signals_by_phase"].items()]
  o = r["resume_overhead_s"]
  lines += ["", f"crashes {r['problems_by_kind']['crash']}, hangs {r['problems_by_kind']['hang']}, "
            f"exits without a one-line cause {r['problems_by_kind']['no one-line cause']}, "
            f"checkpoints lost {r['problems_by_kind']['checkpoint lost']}, wrong resumes "
            f"{r['problems_by_kind']['resumed from']}, damaged {r['problems_by_kind']['damaged']}; "
            f"episodes equal to the uninterrupted run {r['episodes_equal_to_reference']} of "
            f"{r['episodes']}; resume overhead (signal -> first new step) median "
            f"{o['median']} s, max {o['max']} s (n={o['n']})"]
  for c in r["cycle_records"]:
    if c["problems"]:
      lines.append(f"- episode {c['episode']} {c['attempt']}: {'; '.join(c['problems'])}")
  for u in r["failures_without_a_signal"]:
    lines.append(f"- {u}")
  for e in r["episode_records"]:
    if e["problems"]:
      lines.append(f"- episode {e['episode']}: {'; '.join(e['problems'])}")
  lines.append("verdict: " + ("every check passed" if r["ok"] else "FAILED"))
  return "\n".join(lines)


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  flags, main_flags = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
      else (argv, [])
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--cycles", type=int, default=50, help="signals to send in all")
  ap.add_argument("--out", required=True, help="directory for the runs, logs and report")
  ap.add_argument("--launcher", choices=["local", "slurm"], default="local")
  ap.add_argument("--nprocs", type=int, default=2)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--kill_fraction", type=float, default=0.7,
                  help="the share of signals that are SIGKILL (the rest SIGTERM)")
  ap.add_argument("--atol", type=float, default=0.0,
                  help="allowed difference from the reference run (0: bitwise)")
  ap.add_argument("--hang_s", type=float, default=0.0,
                  help="seconds after the signal before a still-running launcher is a hang "
                       f"(default: watchdog {WATCHDOG_S} + grace {GRACE_S} + 30)")
  args = ap.parse_args(flags)
  args.main_flags = main_flags
  if args.launcher == "slurm" and not os.environ.get("SLURM_CONF") and not shutil.which("srun"):
    ap.error("--launcher=slurm needs srun (and SLURM_CONF for a cluster of your own)")
  result = chaos(args)
  path = pathlib.Path(args.out) / "chaos_report.json"
  from poi_jax.io import write_json_atomic
  write_json_atomic(str(path), result)
  print(markdown(result))
  print(f"report: {path}")
  return 0 if result["ok"] else 1


if __name__ == "__main__":
  sys.exit(main())
