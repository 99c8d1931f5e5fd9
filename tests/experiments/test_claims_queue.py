"""experiments/claims_queue.sh runs issue 50's remaining CPU claims in the declared order.

The order was declared before any of the runs (docs/notebook.md, session 64): the proof's rows
first (POI-Net at the paper's settings, DUMA under both protocols, QOPN at its settings), then
item 4's screen and the 2 x 2; each paper-settings measurement seed by seed, then seeds 3-4 where
issue 50's rule owes them (`claims.py seeds`, tested in test_claims.py). ``DRY=1`` prints the
calls without running or making anything. Every call is one run (one arm, rate and seed):
ablations.sh keeps finished runs in experiments/records/ only when its call ends."""
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="claims_queue.sh needs bash")
def test_the_queue_runs_the_declared_order_each_selection_into_its_best_stage():
  out = subprocess.run(["bash", "experiments/claims_queue.sh"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, DRY="1"))
  assert out.returncode == 0, out.stderr
  calls = [" ".join(line.split()[1:-1]) for line in out.stdout.splitlines()
           if line.startswith("== ") and line.split()[1] in ("old", "new")]
  seeds = lambda s: f"SEEDS={s + 1} SEED_VALUES={s}"  # noqa: E731
  paper = lambda what, arms: [  # noqa: E731  seed by seed: the arms of a seed in turn
      f"new {what} ARMS={arm} {seeds(s)}" for s in range(3) for arm in arms.split()]
  selection = lambda arm, var: [  # noqa: E731  the grid, then the choice's 5 seeds
      *(f"old dreamcpusel ARMS={arm} LRS={lr}" for lr in ("2e-5", "5e-5", "1e-4")),
      *(f"old dreamcpubest {var}=<choice> {seeds(s)}" for s in range(5))]
  screen = [f"old dreamcpuwhy WHY={why} POI_LR=5e-5 {seeds(s)}"  # item 4's options, by seed
            for s in range(3) for why in ("stop", "add", "concat", "zeros", "lr10")]
  assert calls == [*paper("dreamcpupaper", "enc poi"), *selection("duma", "DUMA_LR"),
                   *paper("dumacpupaper", "enc duma"), *paper("qopncpupaper", "qopn window"),
                   *screen, *selection("nopos", "NOPOS_LR"), *selection("pos", "POS_LR"),
                   *paper("dreamcpupaper", "nopos pos")]
  # one run a call: ablations.sh keeps finished runs only when its call ends
  # (a second arm, rate or option would be a word without "="; dreamcpusel's SEEDS default is 1)
  assert all("=" in word for c in calls for word in c.split()[2:])
  assert all("SEED_VALUES=" in c or c.startswith("old dreamcpusel ") for c in calls)
  # each paper-settings measurement then adds seeds 3-4 where issue 50's rule owes them
  lines = out.stdout.splitlines()
  rule = [i for i, line in enumerate(lines) if line.startswith("== (seeds 3-4 of ")]
  # (first, those squad1cpupaper's seeds 0-2 have owed since 2026-11-27)
  assert [lines[i].split()[4] for i in rule] == ["squad1cpupaper", "dreamcpupaper",
                                                 "dumacpupaper", "qopncpupaper", "dreamcpupaper"]
  assert rule[0] == 0
  assert all(lines[i - 1].split()[2] == lines[i].split()[4] and "SEED_VALUES=2" in lines[i - 1]
             for i in rule[1:])  # right after the measurement's seed 2
