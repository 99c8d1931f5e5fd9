"""Preemption: a tiny run killed with SIGTERM mid-training saves a checkpoint and exits 143;
started again in the same workdir it resumes, and its losses from there equal an uninterrupted
run's to 1e-6 (same parameters, optimizer state, dropout RNG and data position). A SIGTERM
during an evaluation stops it; the resumed run evaluates that step again."""
import json
import os
import signal
import subprocess
import threading
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


def _signal_during(proc, text: str, timeout: float = 300) -> str:
  """Sends SIGTERM once ``text`` (an evaluation's progress bar) is on ``proc``'s stderr; returns
  all of stderr."""
  chunks, seen = [], threading.Event()

  def read():
    for chunk in iter(lambda: os.read(proc.stderr.fileno(), 4096), b""):
      chunks.append(chunk.decode(errors="replace"))
      if text in "".join(chunks[-3:]):
        seen.set()

  reader = threading.Thread(target=read, daemon=True)
  reader.start()
  assert seen.wait(timeout), f"no {text!r} on stderr: {''.join(chunks)[-2000:]}"
  assert proc.poll() is None, "the run ended before it could be interrupted"
  proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=timeout)
  reader.join(timeout=30)
  return "".join(chunks)


def test_sigterm_during_an_evaluation_saves_the_step_and_the_resumed_run_evaluates_it(tmp_path):
  # a periodic evaluation (step 4), then the final one (step 8), each stopped by SIGTERM: the
  # run exits 143 at once with the step saved; the next run evaluates that step first, and its
  # checkpoint gets the scores the stopped evaluation did not record, so best-k ranks it
  from poi_jax.model_files import checkpoint as ckpt_lib
  work = tmp_path / "w"
  args = er.tiny_args(work, "--config.train.max_steps=8", "--mode=train_and_eval",
                      "--config.train.eval_every=4", "--config.train.save_every=1000",
                      "--config.train.export_best=false", "--config.data.max_eval_examples=400")
  scored = lambda step: ckpt_lib.Checkpointer(str(work), keep=3, best_metric="f1").manager.metrics(
      step)

  proc = subprocess.Popen(er.main_cmd(*args), cwd=er.ROOT, env=er.env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
  err = _signal_during(proc, "eval @ 4")
  assert proc.returncode == 143, err[-3000:]
  assert f"SIGTERM: checkpoint 4 saved in {work}" in err
  assert scored(4) is None and not (work / "eval_results.json").exists()

  proc = subprocess.Popen(er.main_cmd(*args), cwd=er.ROOT, env=er.env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
  err = _signal_during(proc, "eval @ 8")
  out = proc.stdout.read().decode()
  assert proc.returncode == 143, err[-3000:]
  assert "resumed from checkpoint 4" in out and "evaluating it again" in out, out
  assert "eval @ step 4" in out, out  # before step 5
  assert f"SIGTERM: checkpoint 8 saved in {work}" in err
  assert scored(4)["f1"] == json.loads((work / "eval_results.json").read_text())["f1"]
  assert scored(8) is None

  done = er.run_main(*args)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "resumed from checkpoint 8" in done.stdout and "eval @ step 8" in done.stdout
  results = json.loads((work / "eval_results.json").read_text())
  assert results["step"] == 8 and scored(8)["f1"] == results["f1"]
  assert sorted(int(p.name) for p in (work / "checkpoints").iterdir()) == [4, 8]
  assert not (work / "checkpoints-rescoring").exists()
  assert sorted(er.losses(work)) == list(range(1, 9))
