"""``--mode=prepare --beam_pipeline_options=runner=DirectRunner,...`` builds the same feature
shards and manifest as ``--mode=prepare``, byte for byte, and a rerun keeps the whole shards.

Apache Beam pins its own protobuf and pyarrow, so it is installed into a virtual environment
that sees this one's packages (``--system-site-packages``), as a Beam worker image would be
built, not into the test environment; the pip install needs PyPI (about 20 s). Slow:
`python -m pytest -m slow tests/slow/test_prepare_beam.py` (about 2 minutes on 2 CPU cores).
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from tests.train import engine_runs as er

pytestmark = [pytest.mark.slow, pytest.mark.required]

ARGS = ["--config=configs/squad2.py:tiny", "--mode=prepare", "--config.data.records_per_shard=8"]
BEAM = "--beam_pipeline_options=runner=DirectRunner,direct_num_workers=2"


@pytest.fixture(scope="module")
def beam_python(tmp_path_factory) -> str:
  venv = tmp_path_factory.mktemp("beam") / "venv"
  subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
  python = str(venv / "bin" / "python")
  r = subprocess.run([python, "-m", "pip", "install", "-q", "apache-beam"], capture_output=True,
                     text=True, timeout=900)
  if r.returncode:
    pytest.skip(f"could not pip install apache-beam into a virtual environment (PyPI needed): "
                f"{r.stderr[-500:]}")
  return python


def shard_files(workdir) -> dict[str, bytes]:
  cache = pathlib.Path(workdir) / "cache"
  return {str(p.relative_to(cache)): p.read_bytes() for p in sorted(cache.rglob("*"))
          if p.is_file() and (p.name.startswith("shard-") or p.name == "manifest.json")}


def run(python, *args):
  return subprocess.run([python, "-m", "poi_jax.main", *args], cwd=er.ROOT, env=er.env(),
                        capture_output=True, text=True, timeout=1200)


def test_beam_builds_the_same_shards_and_a_rerun_keeps_them(beam_python, tmp_path):
  local, beam = tmp_path / "local", tmp_path / "beam"
  r = run(sys.executable, *ARGS, f"--workdir={local}")
  assert r.returncode == 0, r.stderr[-3000:]
  r = run(beam_python, *ARGS, f"--workdir={beam}", BEAM)
  assert r.returncode == 0, r.stderr[-3000:]
  want, got = shard_files(local), shard_files(beam)
  # Both splits of the tiny config (train, eval), several shards each, plus their manifests.
  assert sum(name.endswith("manifest.json") for name in want) == 2
  assert len(want) > 20
  assert sorted(got) == sorted(want)
  assert [n for n in want if got[n] != want[n]] == []

  # A rerun builds only what is missing: delete one shard, keep the others' mtimes.
  cache = beam / "cache"
  kept = {p: p.stat().st_mtime_ns for p in cache.rglob("shard-*.array_record")}
  gone = sorted(kept)[1]
  for sibling in gone.parent.glob(gone.name.split(".")[0] + ".*"):
    sibling.unlink()
  r = run(beam_python, *ARGS, f"--workdir={beam}", BEAM)
  assert r.returncode == 0, r.stderr[-3000:]
  changed = [p for p, t in kept.items() if p.stat().st_mtime_ns != t]
  assert changed == [gone]
  assert shard_files(beam) == want
  # The local path (what train/eval run first) takes the Beam-built shards as they are.
  kept = {p: p.stat().st_mtime_ns for p in cache.rglob("shard-*")}
  r = run(sys.executable, *ARGS, f"--workdir={beam}")
  assert r.returncode == 0, r.stderr[-3000:]
  assert [p for p, t in kept.items() if p.stat().st_mtime_ns != t] == []
