"""A one-node SLURM cluster of this machine (Debian's slurm-wlm and munge: `apt-get install -y
slurm-wlm munge`), everything it writes (configuration, munge key and socket, state, logs) in one
directory, on ports picked free at start; nothing under /etc is read or changed. Used by
tests/slow/test_slurm.py and by the chaos command's SLURM run (docs/reliability.md):

  python -m tests.slurm_cluster start /tmp/slurm    # prints SLURM_CONF=/tmp/slurm/slurm.conf
  SLURM_CONF=/tmp/slurm/slurm.conf python launch/chaos.py --launcher=slurm ...
  python -m tests.slurm_cluster stop /tmp/slurm
"""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _sbin(name: str) -> str:
  return shutil.which(name) or f"/usr/sbin/{name}"


def missing() -> list[str]:
  """The daemons and commands not installed."""
  return [d for d in DAEMONS if shutil.which(d) is None and not os.path.exists(f"/usr/sbin/{d}")]


def start(d: pathlib.Path, cpus: int = 2) -> pathlib.Path:
  """Starts munged, slurmctld and slurmd with their files in ``d``; returns the ``SLURM_CONF``
  path once the node is idle (RuntimeError with the controller's log otherwise)."""
  d = pathlib.Path(d)
  for sub in ("state", "spool", "munge"):
    (d / sub).mkdir(parents=True, exist_ok=True)
  (d / "munge").chmod(0o700)
  key = d / "munge" / "munge.key"
  if not key.exists():
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
  sock = d / "munge" / "munge.socket"
  host = socket.gethostname()
  conf = d / "slurm.conf"
  conf.write_text("\n".join([
      "ClusterName=poitest", f"SlurmctldHost={host}",
      f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
      "AuthType=auth/munge", f"AuthInfo=socket={sock}",
      "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
      "SelectType=select/cons_tres", "SchedulerType=sched/builtin", "MpiDefault=none",
      f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool",
      f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd.pid",
      f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd.log",
      "SlurmUser=root", "ReturnToService=2",
      f"NodeName={host} CPUs={cpus} State=UNKNOWN",
      "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
  subprocess.run([_sbin("munged"), "--force", f"--socket={sock}", f"--key-file={key}",
                  f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/munge/munged.log",
                  f"--seed-file={d}/munge/munged.seed"], check=True)
  env = dict(os.environ, SLURM_CONF=str(conf))
  subprocess.run([_sbin("slurmctld"), "-f", str(conf)], check=True, env=env)
  subprocess.run([_sbin("slurmd"), "-f", str(conf)], check=True, env=env)
  deadline = time.time() + 60
  while time.time() < deadline:
    out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
    if out.stdout.strip() == "idle":
      return conf
    time.sleep(0.5)
  raise RuntimeError(f"the test cluster did not come up: {out.stdout} {out.stderr}; "
                     f"{(d / 'slurmctld.log').read_text()[-2000:]}")


def stop(d: pathlib.Path) -> None:
  d = pathlib.Path(d)
  for pidfile in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
    try:
      os.kill(int((d / pidfile).read_text().split()[0]), signal.SIGTERM)
    except (OSError, ValueError):
      pass


if __name__ == "__main__":
  what, where = sys.argv[1:3]
  if what == "start":
    if missing():
      sys.exit(f"error: no {', '.join(missing())}: apt-get install -y slurm-wlm munge")
    print(f"SLURM_CONF={start(pathlib.Path(where).resolve())}")
  else:
    stop(pathlib.Path(where))
