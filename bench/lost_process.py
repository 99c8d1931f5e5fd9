r"""What a user sees when one process of a two-process training run is SIGKILLed: this tree
beside an older one (default: the commit before the coordinator's loss was one line), in one run.

  python bench/lost_process.py [--before=fa3d441] [--victims=0,1]

For each tree and each victim, `launch/local_multiprocess.sh` trains ``configs/squad2.py:tiny``
(2 CPU processes, gloo), the victim is SIGKILLed once 5 steps are logged, and the table gives
the seconds from the kill to the launcher's exit, the launcher's status, how many lines the
survivor wrote after the kill, and its last line. The older tree is exported with ``git
archive`` into a temporary directory. Figures: docs/results.md.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SQUAD = "poi_jax/sample_data/squad2-dev-subset.json.xz"


def _pid_of(workdir, process_id):
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
    except OSError:
      continue
    if f"--workdir={workdir}" in cmd and f"--process_id={process_id}" in cmd:
      return int(pid)
  return None


def trial(tree: pathlib.Path, victim: int, scratch: pathlib.Path, port: int) -> dict:
  work, logs = scratch / "w", scratch / "logs"
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(tree), NPROCS="2", PORT=str(port),
             LOG_DIR=str(logs), GRACE_S="45", PYTHON=sys.executable)
  args = ["--config=configs/squad2.py:tiny", f"--workdir={work}",
          f"--config.data.train_file={SQUAD}", f"--config.data.eval_file={SQUAD}", "--config.data.max_train_examples=64",
          "--config.data.max_eval_examples=40", "--config.train.log_every=1",
          "--config.train.max_steps=16", "--mode=train", "--config.train.export_best=false",
          "--config.distributed.watchdog_timeout_s=10"]
  scratch.mkdir(parents=True)
  out = open(scratch / "launcher.log", "w")  # (a file: the exit, not a pipe's closing, is timed)
  run = subprocess.Popen(["bash", "launch/local_multiprocess.sh", "--", *args], cwd=tree,
                         env=env, stdout=out, stderr=subprocess.STDOUT)
  metrics = work / "metrics.jsonl"
  while run.poll() is None and not (metrics.exists()
                                    and len(metrics.read_text().splitlines()) >= 5):
    time.sleep(0.02)
  survivor_log = logs / f"proc{1 - victim}.log"
  before = len(survivor_log.read_text(errors="replace").splitlines())
  os.kill(_pid_of(work, victim), signal.SIGKILL)
  killed = time.time()
  run.wait(timeout=300)
  took = time.time() - killed
  out.close()
  after = survivor_log.read_text(errors="replace").splitlines()[before:]
  last = next((l for l in reversed(after) if l.strip()), "")
  return {"took": took, "status": run.returncode, "lines": len([l for l in after if l.strip()]),
          "last": last[:110] + ("..." if len(last) > 110 else "")}


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--before", default="fa3d441")
  parser.add_argument("--victims", default="0,1")
  a = parser.parse_args()
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    old = pathlib.Path(tmp) / "before"
    old.mkdir()
    subprocess.run(f"git archive {a.before} | tar -x -C {old}", shell=True, cwd=ROOT, check=True)
    for k, victim in enumerate(int(v) for v in a.victims.split(",")):
      for j, (name, tree) in enumerate(((a.before, old), ("this tree", ROOT))):
        scratch = pathlib.Path(tmp) / f"{name.replace(' ', '_')}-{victim}"
        r = trial(tree, victim, scratch, 21000 + (os.getpid() + 10 * k + j) % 20000)
        rows.append((victim, name, r))
        print(f"  done: process {victim} killed, {name}: {r['took']:.1f} s", file=sys.stderr)
  print("| process killed | code | kill -> launcher exit (s) | launcher status | survivor's "
        "lines after the kill | survivor's last line |")
  print("| --- | --- | --- | --- | --- | --- |")
  for victim, name, r in rows:
    print(f"| {victim} | {name} | {r['took']:.1f} | {r['status']} | {r['lines']} | "
          f"`{r['last']}` |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
