"""Slow suite: launch/slurm_gpu.sh run for real on a one-node SLURM cluster that the test starts
and stops itself (Debian's slurm-wlm and munge: `apt-get install -y slurm-wlm munge`), with
``PER=cpu``: two tasks of `poi_jax.main --distributed=auto` train the tiny config, one is
SIGKILLed mid-run, the job step ends with the survivor's one-line lost-process error, and the
same submission resumes to the uninterrupted run's losses.

  python -m pytest -m slow -s tests/slow/test_slurm.py

Everything the cluster writes (configuration, munge key and socket, state, logs) lives in the
test's temporary directory, on ports picked free at start; nothing under /etc is read or changed.
"""
import os
import pathlib
import signal
import subprocess
import time

import pytest

from tests import slurm_cluster
from tests.train import engine_runs as er

pytestmark = pytest.mark.slow
STEPS = 16
EXTRA = [f"--config.train.max_steps={STEPS}", "--mode=train", "--config.train.export_best=false",
         "--config.train.save_every=3", "--config.distributed.watchdog_timeout_s=10"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
  """``SLURM_CONF`` of a running one-node cluster (2 CPUs); stopped at the end."""
  missing = slurm_cluster.missing()
  if missing:
    pytest.skip(f"no {', '.join(missing)}: apt-get install -y slurm-wlm munge")
  d = tmp_path_factory.mktemp("slurm")
  try:
    conf = slurm_cluster.start(d)
  except RuntimeError as e:
    pytest.fail(str(e))
  yield str(conf)
  slurm_cluster.stop(d)


def _submit(conf, workdir, logs) -> subprocess.Popen:
  env = er.env(1)
  env.update(SLURM_CONF=conf, NODES="1", PER="cpu", TASKS_PER_NODE="2",
             SRUN_ARGS=f"--output={logs}/proc%t.log")
  logs.mkdir(parents=True, exist_ok=True)
  return subprocess.Popen(["bash", "launch/slurm_gpu.sh", "--", *er.tiny_args(workdir, *EXTRA)],
                          cwd=er.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _task_pid(workdir, procid: int) -> int | None:
  """The pid of the `poi_jax.main` task ``procid`` (SLURM_PROCID) training in ``workdir``."""
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
      environ = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace").split("\0")
    except OSError:
      continue
    if "poi_jax.main" in cmd and f"--workdir={workdir}" in cmd \
        and f"SLURM_PROCID={procid}" in environ:
      return int(pid)
  return None


def _last_line(path: pathlib.Path) -> str:
  lines = [l for l in path.read_text().replace("\r", "\n").splitlines() if l.strip()]
  return lines[-1] if lines else ""


def test_slurm_job_loses_a_task_in_one_line_and_resumes(cluster, tmp_path):
  reference = tmp_path / "one"
  out = er.run_main(*er.tiny_args(reference, *EXTRA))
  assert out.returncode == 0, out.stderr[-3000:]
  one_process = er.losses(reference)

  work = tmp_path / "w"
  run = _submit(cluster, work, tmp_path / "logs")
  metrics = work / "metrics.jsonl"
  deadline = time.time() + 400
  while time.time() < deadline and run.poll() is None:
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
      break
    time.sleep(0.05)
  assert run.poll() is None, "the job ended before a task could be killed"
  pid = _task_pid(work, 0)  # the coordinator: it hosts JAX's coordination service
  assert pid is not None
  os.kill(pid, signal.SIGKILL)
  _, err = run.communicate(timeout=180)
  assert run.returncode != 0, err
  assert "task 0: Killed" in err, err
  survivor = _last_line(tmp_path / "logs" / "proc1.log")
  assert survivor.startswith("error: lost process 0 of 2 (the coordinator"), survivor
  assert survivor.endswith("run the same command again to resume"), survivor
  assert max(er.losses(work)) < STEPS, "the kill came too late to test a resume"

  again = _submit(cluster, work, tmp_path / "logs2")  # the same submission
  _, err = again.communicate(timeout=600)
  assert again.returncode == 0, err + (tmp_path / "logs2" / "proc1.log").read_text()[-3000:]
  assert "resumed from checkpoint" in (tmp_path / "logs2" / "proc0.log").read_text()
  got = er.losses(work)
  assert sorted(got) == sorted(one_process) == list(range(1, STEPS + 1))
  for step in got:
    assert got[step] == pytest.approx(one_process[step], abs=1e-5), step
