"""Two CPU processes joined by `jax.distributed` (through launch/local_multiprocess.sh) train the
tiny config and log the same losses as one process with the same global batch; when one of them
is SIGKILLed (process 0, the coordinator, by default; process 1 in the slow suite), the other
stops within seconds in one line naming it, the launcher returns the killed process's status,
and the same command resumes to the same losses."""
import os
import signal
import subprocess
import time

import pytest

from tests.train import engine_runs as er

STEPS = 16
# The same attention kernel for one process and two: `auto` takes the native kernel on one CPU
# device and `explicit_vjp` on several, and their attention-dropout bits differ.
EXTRA = [f"--config.train.max_steps={STEPS}", "--mode=train", "--config.train.export_best=false",
         "--config.train.save_every=3", "--config.model.attention=explicit_vjp"]


@pytest.fixture
def one_process(tmp_path_factory):
  """The reference: one process, the same global batch, never interrupted."""
  work = tmp_path_factory.mktemp("one")
  out = er.run_main(*er.tiny_args(work, *EXTRA))
  assert out.returncode == 0, out.stderr[-3000:]
  return er.losses(work)


def _launch(workdir, logs, *extra, port_offset=0):
  env = er.env(1)
  env.update(NPROCS="2", PORT=str(20000 + (os.getpid() + port_offset) % 20000),
             LOG_DIR=str(logs), GRACE_S="45")
  return subprocess.Popen(["bash", "launch/local_multiprocess.sh", "--",
                           *er.tiny_args(workdir, *EXTRA, *extra)],
                          cwd=er.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _logs(logs):
  return "".join(p.read_text() for p in sorted(logs.glob("*.log")))


def _pid_of(workdir, process_id) -> int | None:
  """The pid of ``poi_jax.main --process_id=<process_id>`` training in ``workdir``."""
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
    except OSError:
      continue
    if f"--workdir={workdir}" in cmd and f"--process_id={process_id}" in cmd \
        and "poi_jax.main" in cmd:
      return int(pid)
  return None


@pytest.mark.parametrize("victim", [
    0,  # the coordinator, host of JAX's coordination service (poi_jax/faults/coordination.py)
    # the watchdog's heartbeat (slow; without a model: tests/faults/test_lost_process.py)
    pytest.param(1, marks=pytest.mark.slow),
])
def test_a_killed_process_stops_the_other_in_one_line_and_the_run_resumes(tmp_path,
                                                                           one_process, victim):
  work, logs = tmp_path / "w", tmp_path / "logs"
  run = _launch(work, logs, "--config.distributed.watchdog_timeout_s=10",
                port_offset=1 + 10 * victim)
  metrics = work / "metrics.jsonl"
  deadline = time.time() + 400
  while time.time() < deadline and run.poll() is None:
    if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
      break
    time.sleep(0.02)
  assert run.poll() is None, "the run ended before a process could be killed"
  pid = _pid_of(work, victim)
  assert pid is not None
  os.kill(pid, signal.SIGKILL)
  killed_at = time.time()
  _, err = run.communicate(timeout=120)
  took = time.time() - killed_at
  survivor = (logs / f"proc{1 - victim}.log").read_text()
  assert run.returncode == 137, err + survivor[-3000:]  # the killed process's status
  assert took < 60, took
  assert f"process {victim} failed with status 137 (KILL)" in err
  last = survivor.strip().splitlines()[-1]
  if victim == 0:  # JAX's client notices at once; the line, not its fatal log
    assert took < 15, took
    assert last.startswith("error: lost process 0 of 2 (the coordinator: it hosts JAX's "
                           "coordination service) at step "), survivor[-3000:]
    assert len([l for l in survivor.splitlines() if "process 0" in l]) == 1, survivor[-3000:]
  else:
    assert last.startswith("error: lost process 1 of 2 at step "), survivor[-3000:]
  assert last.endswith("; stopping process %d. Checkpoints saved so far are kept: run the same "
                       "command again to resume" % (1 - victim)), last
  assert "Traceback" not in survivor and "Fatal Python error" not in survivor
  assert "*** Check failure" not in survivor and "F0000" not in survivor  # no C++ fatal log
  assert "terminate called" not in survivor and "bad_cast" not in survivor
  logged = er.losses(work)
  assert max(logged) < STEPS, "the kill came too late to test a resume"
  assert "2 process(es)" in (logs / "proc0.log").read_text()
  # The step named is the survivor's last (the loop reports each step to the watchdog).
  named = int(last.split(" at step ")[1].split(":")[0])
  assert max(logged) <= named <= max(logged) + 2, (named, max(logged))

  again = _launch(work, tmp_path / "logs2", port_offset=2 + 10 * victim)  # the same command
  _, err = again.communicate(timeout=600)
  logs2 = _logs(tmp_path / "logs2")
  assert again.returncode == 0, err + logs2[-4000:]
  resumed = int(logs2.split("resumed from checkpoint ")[1].split()[0])
  assert resumed >= 3
  # Two processes log what one does, before the kill and after the resume (rows the killed run
  # logged past its checkpoint were dropped on resume and logged again).
  got = er.losses(work)
  assert sorted(got) == sorted(one_process) == list(range(1, STEPS + 1))
  for s in got:
    assert got[s] == pytest.approx(one_process[s], abs=1e-5), s


@pytest.mark.slow  # a third 2-process run (`pytest -m slow tests/train/test_distributed.py`)
def test_a_fault_in_a_two_process_run_stops_both_in_one_line(tmp_path):
  """A NaN loss in a 2-process run: both processes stop at once with one `error:` line (their
  own, or the other's announced through the watchdog), no shutdown-barrier wait, nothing
  non-finite saved."""
  work, logs = tmp_path / "w", tmp_path / "logs"
  run = _launch(work, logs, "--config.optim.lr=1e6", "--config.train.save_every=1",
                port_offset=3)
  _, err = run.communicate(timeout=600)
  assert run.returncode in (1, 70), err
  for i in range(2):
    last = (logs / f"proc{i}.log").read_text().strip().splitlines()[-1]
    assert last.startswith("error: non-finite loss at step") or \
        last.startswith("error: process 1 of 2 stopped (error: non-finite loss") or \
        last.startswith("error: process 0 of 2 stopped (error: non-finite loss"), (i, last)
  bad = int(last.split("non-finite loss at step ")[1].split()[0])
  kept = sorted(int(p.name) for p in (work / "checkpoints").iterdir() if p.name.isdigit())
  assert max(kept) == bad - 1  # save_every=1: every step before the NaN, none after


def test_dry_run_prints_one_command_per_process(tmp_path):
  env = er.env(1)
  env.update(NPROCS="3", LOG_DIR=str(tmp_path))
  out = subprocess.run(["bash", "launch/local_multiprocess.sh", "--dry-run", "--",
                        "--config=configs/squad2.py:tiny", "--workdir=/tmp/x"],
                       cwd=er.ROOT, env=env, capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  lines = [l for l in out.stdout.splitlines() if "poi_jax.main" in l]
  assert [f"--process_id={i}" in l for i, l in enumerate(lines)] == [True] * 3
  assert all("--num_processes=3" in l for l in lines)
  assert not (tmp_path / "proc0.log").exists()  # nothing was started


def test_cluster_launchers_dry_run():
  env = er.env(1)
  env.update(NODES="2", GPUS_PER_NODE="4", TPU_NAME="pod", ZONE="zone-a")
  slurm = subprocess.run(["bash", "launch/slurm_gpu.sh", "--dry-run", "--",
                          "--config=configs/squad2.py", "--workdir=/runs/a"],
                         cwd=er.ROOT, env=env, capture_output=True, text=True, timeout=60)
  assert slurm.returncode == 0, slurm.stderr
  assert slurm.stdout.startswith("srun --nodes=2 --ntasks-per-node=4 --gpus-per-task=1")
  assert "poi_jax.main --distributed=auto --config=configs/squad2.py --workdir=/runs/a" \
      in slurm.stdout
  tpu = subprocess.run(["bash", "launch/tpu_vm.sh", "--dry-run", "--",
                        "--config=configs/squad2.py", "--workdir=/mnt/gcs/a"],
                       cwd=er.ROOT, env=env, capture_output=True, text=True, timeout=60)
  assert tpu.returncode == 0, tpu.stderr
  assert "gcloud compute tpus tpu-vm ssh pod --zone=zone-a --worker=all" in tpu.stdout
  assert "--distributed=auto" in tpu.stdout
  env.pop("TPU_NAME")
  missing = subprocess.run(["bash", "launch/tpu_vm.sh", "--dry-run"], cwd=er.ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
  assert missing.returncode != 0 and "TPU_NAME" in missing.stderr


def test_launcher_reports_the_cause_and_does_not_wait_out_the_grace(tmp_path):
  """A stand-in for `python` (no JAX): process 1 stops with 70 (it saw another one lost) just
  before process 0 is SIGKILLed. The launcher returns 137, the cause, not the first status it
  reaped, and a caller reading its output is not held for GRACE_S by the killer's sleep."""
  fake = tmp_path / "python"
  fake.write_text("#!/bin/bash\n"
                  "for a in \"$@\"; do case $a in --process_id=*) id=${a#*=};; esac; done\n"
                  "if [ \"$id\" = 1 ]; then sleep 0.2; exit 70; fi\n"
                  "sleep 0.8; kill -KILL $$\n")
  fake.chmod(0o755)
  env = er.env(1)
  env.update(NPROCS="2", GRACE_S="30", LOG_DIR=str(tmp_path / "logs"), PYTHON=str(fake))
  started = time.time()
  out = subprocess.run(["bash", "launch/local_multiprocess.sh", "--", "--x"], cwd=er.ROOT,
                       env=env, capture_output=True, text=True, timeout=60)
  assert time.time() - started < 20
  assert out.returncode == 137, out.stderr
  assert "process 1 failed with status 70; stopping the others (30s grace)" in out.stderr
  assert "process 0 failed with status 137 (KILL)" in out.stderr
