"""``--beam_pipeline_options`` without Beam itself (cheap): the options' parsing, one clear error
when the ``[beam]`` extra is missing, and the flag refused outside ``--mode=prepare``. The
pipeline's shards against ``--mode=prepare``'s, byte for byte, are in
tests/slow/test_prepare_beam.py (it installs Apache Beam into a virtual environment)."""
from __future__ import annotations

import builtins

import pytest

from poi_jax.prepare import beam as prepare_beam
from tests.train import engine_runs as er


def test_options_become_beam_flags():
  assert prepare_beam.pipeline_options("runner=DirectRunner, direct_num_workers=2,") == [
      "--runner=DirectRunner", "--direct_num_workers=2"]
  assert prepare_beam.pipeline_options("") == []
  with pytest.raises(ValueError, match="without dashes"):
    prepare_beam.pipeline_options("--runner=DirectRunner")


def test_a_missing_beam_is_one_error_naming_the_extra(monkeypatch):
  real_import = builtins.__import__

  def no_beam(name, *args, **kwargs):
    if name == "apache_beam" or name.startswith("apache_beam."):
      raise ModuleNotFoundError("No module named 'apache_beam'", name="apache_beam")
    return real_import(name, *args, **kwargs)

  monkeypatch.setattr(builtins, "__import__", no_beam)
  with pytest.raises(ValueError, match=r"poi-jax\[beam\]"):
    prepare_beam.prepare_splits(None, None, ["train"], None, "runner=DirectRunner")


def test_the_flag_is_refused_outside_prepare(tmp_path):
  r = er.run_main("--config=configs/squad2.py:tiny", f"--workdir={tmp_path / 'w'}",
                  "--mode=train", "--beam_pipeline_options=runner=DirectRunner")
  assert r.returncode == 1, r.stderr[-2000:]
  assert r.stderr.strip().splitlines()[-1].startswith(
      "error: --beam_pipeline_options is for --mode=prepare"), r.stderr[-2000:]
