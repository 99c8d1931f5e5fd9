"""Preemption: a tiny run killed with SIGTERM mid-training saves a checkpoint and exits 143;
started again in the same workdir it resumes, and its losses from there equal an uninterrupted
run's to 1e-6 (same parameters, optimizer state, dropout RNG and data position)."""
import json
import signal
import subprocess
import time

import pytest

from tests.train import engine_runs as er

STEPS = 150


def _args(workdir):
  return er.tiny_args(workdir, f"--config.train.max_steps={STEPS}", "--mode=train",
                      "--config.train.save_every=1000", "--config.train.export_best=false")


def test_sigterm_then_resume_equals_uninterrupted_run(tmp_path):
  ref = er.run_main(*_args(tmp_path / "ref"))
  assert ref.returncode == 0, ref.stderr[-3000:]

  work = tmp_path / "pre"
  proc = subprocess.Popen(er.main_cmd(*_args(work)), cwd=er.ROOT, env=er.env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  metrics = work / "metrics.jsonl"
  deadline = time.time() + 300
  while time.time() < deadline and proc.poll() is None:
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
      break
    time.sleep(0.02)
  assert proc.poll() is None, "the run ended before it could be interrupted"
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=300)
  assert proc.returncode == 143, err[-3000:]
  stopped = max(er.losses(work))
  assert stopped < STEPS, "SIGTERM came too late to test a resume"
  assert (work / "checkpoints" / str(stopped)).is_dir()

  again = er.run_main(*_args(work))
  assert again.returncode == 0, again.stderr[-3000:]
  assert f"resumed from checkpoint {stopped}" in again.stdout

  want, got = er.losses(tmp_path / "ref"), er.losses(work)
  assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
  for step in range(stopped + 1, STEPS + 1):
    assert got[step] == pytest.approx(want[step], abs=1e-6), step
