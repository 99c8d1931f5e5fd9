"""Two CPU processes joined by `jax.distributed` (through launch/local_multiprocess.sh) train the
tiny config and log the same losses as one process with the same global batch."""
import os
import subprocess

import pytest

from tests.train import engine_runs as er


def test_two_processes_log_the_same_losses_as_one(tmp_path):
  steps = 6
  extra = [f"--config.train.max_steps={steps}", "--mode=train",
           "--config.train.export_best=false"]
  one = er.run_main(*er.tiny_args(tmp_path / "one", *extra))
  assert one.returncode == 0, one.stderr[-3000:]

  env = er.env(1)
  env.update(NPROCS="2", PORT=str(20000 + os.getpid() % 20000), LOG_DIR=str(tmp_path / "logs"))
  two = subprocess.run(["bash", "launch/local_multiprocess.sh", "--",
                        *er.tiny_args(tmp_path / "two", *extra)],
                       cwd=er.ROOT, env=env, capture_output=True, text=True, timeout=600)
  logs = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.log")))
  assert two.returncode == 0, two.stderr + logs[-4000:]
  assert "2 process(es)" in logs  # (anywhere: progress bars of a slow run push it far back)

  a, b = er.losses(tmp_path / "one"), er.losses(tmp_path / "two")
  assert sorted(a) == sorted(b) == list(range(1, steps + 1))
  for s in a:
    assert b[s] == pytest.approx(a[s], abs=1e-5), s


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
