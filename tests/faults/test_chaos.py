"""launch/chaos.py: kills at random moments of a two-process run, each resumed by the same
command, end equal to the uninterrupted run; and the checks it makes do catch what they name.
The long versions (50 cycles on the local launcher, 20 under SLURM) are documented commands:
docs/reliability.md."""
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("chaos", ROOT / "launch" / "chaos.py")
chaos = importlib.util.module_from_spec(_spec)
sys.modules["chaos"] = chaos  # (dataclasses look their module up)
_spec.loader.exec_module(chaos)


def test_two_kills_resume_to_the_uninterrupted_runs_losses_and_parameters(tmp_path):
  out = subprocess.run([sys.executable, "launch/chaos.py", "--cycles=2", "--seed=3",
                        f"--out={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
  report = json.loads((tmp_path / "chaos_report.json").read_text())
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  assert report["ok"] and report["cycles"] == 2, report
  assert report["episodes"] >= 1 and report["episodes_equal_to_reference"] == report["episodes"]
  assert all(c["launcher_exit_s"] is not None for c in report["cycle_records"])
  assert report["resume_overhead_s"]["n"] == 2
  assert "verdict: every check passed" in out.stdout


def _attempt(tmp_path, launcher_log: str, logs: dict) -> "chaos.Attempt":
  (tmp_path / "launcher.log").write_text(launcher_log)
  for i, text in logs.items():
    (tmp_path / f"proc{i}.log").write_text(text)
  return chaos.Attempt(proc=None, logs=tmp_path, started=0.0)


LOST = ("error: lost process 1 of 2 at step 6: no heartbeat for 5 s (killed, crashed or its host "
        "is gone); stopping process 0. Checkpoints saved so far are kept: run the same command "
        "again to resume\n")


def test_a_kill_with_the_survivor_naming_it_passes(tmp_path):
  a = _attempt(tmp_path, "process 1 failed with status 137 (KILL); stopping the others\n"
               "process 0 failed with status 70\n", {0: "train: ...\n" + LOST, 1: "train: ..."})
  statuses, problems = chaos.check_exit(chaos.Launcher("local", 2, {}), a, 9, {1})
  assert statuses == {1: "137", 0: "70"} and problems == []


@pytest.mark.parametrize("launcher_log, logs, expected", [
    # a segfault of the survivor after the first failure (the launcher names every failure)
    ("process 1 failed with status 137 (KILL); stopping the others\n"
     "process 0 failed with status 139 (SEGV)\n", {0: LOST, 1: ""}, "crash: process 0 ended with 139"),
    # a Python fatal error in a log, whatever the status
    ("process 1 failed with status 137 (KILL); stopping the others\n",
     {0: "Fatal Python error: Segmentation fault\n" + LOST, 1: ""}, "holds 'Fatal Python error'"),
    # a survivor that stopped with a traceback instead of one line
    ("process 1 failed with status 137 (KILL); stopping the others\n"
     "process 0 failed with status 70\n",
     {0: "Traceback (most recent call last):\n  ...\nRuntimeError: gloo\n", 1: ""}, "traceback"),
    # a survivor the launcher had to kill: it did not stop by itself
    ("process 1 failed with status 137 (KILL); stopping the others\n"
     "process 0 failed with status 137 (KILL)\n", {0: "process 0 of 2 joined the run\ntrain: ...\n",
                                                    1: ""}, "hang: process 0"),
    # a survivor that exits 1 without saying why in one line
    ("process 1 failed with status 137 (KILL); stopping the others\n"
     "process 0 failed with status 1\n", {0: "train: 40%\n", 1: ""}, "crash: process 0 ended with 1"),
])
def test_each_kind_of_bad_exit_is_caught(tmp_path, launcher_log, logs, expected):
  a = _attempt(tmp_path, launcher_log, logs)
  _, problems = chaos.check_exit(chaos.Launcher("local", 2, {}), a, 9, {1})
  assert any(expected.lower() in p.lower() for p in problems), problems


def test_a_survivor_killed_by_the_launcher_before_it_joined_is_not_a_hang(tmp_path):
  """The coordinator died during start-up, before the survivor's jax.distributed.initialize
  returned: the survivor waits for it (a slow coordinator looks the same) until the launcher's
  grace ends it; its watchdog never ran."""
  a = _attempt(tmp_path, "process 0 failed with status 143 (TERM); stopping the others\n"
               "process 1 failed with status 137 (KILL)\n", {0: "", 1: ""})
  _, problems = chaos.check_exit(chaos.Launcher("local", 2, {}), a, 15, {0})
  assert problems == []


def test_slurm_task_lines_are_read_as_statuses(tmp_path):
  a = _attempt(tmp_path, "srun: error: host: task 0: Killed\nsrun: error: host: task 1: "
               "Exited with exit code 70\nsrun: error: host: task 1: Segmentation fault\n",
               {0: "", 1: LOST})
  statuses, problems = chaos.Launcher("slurm", 2, {}).statuses(a), None
  assert statuses == {0: "137", 1: "Segmentation fault"}
  _, problems = chaos.check_exit(chaos.Launcher("slurm", 2, {}), a, 9, {0})
  assert any("crash: process 1" in p for p in problems), problems
