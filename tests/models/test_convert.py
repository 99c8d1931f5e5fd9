"""`python -m poi_jax.convert` end to end (a subprocess, as a user runs it)."""
import subprocess
import sys

import numpy as np

from tests.models.encoder_utils import make_hf_model


def _run(*args):
  return subprocess.run([sys.executable, "-m", "poi_jax.convert", *args], capture_output=True,
                        text=True, timeout=300)


def test_convert_cli_round_trip_verifies(tmp_path):
  make_hf_model("albert", vocab_size=60, embedding_size=12, hidden_size=16, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=24).save_pretrained(tmp_path / "src")
  r = _run(f"--from={tmp_path / 'src'}", f"--to={tmp_path / 'out'}", "--verify")
  assert r.returncode == 0, r.stderr
  diff = float(r.stdout.split("max |flax - pytorch| on a probe batch:")[1].split()[0])
  assert diff <= 1e-5
  assert (tmp_path / "out" / "model.safetensors").exists()
  # absl's INFO default would show JAX probing for a TPU on every machine without one.
  assert "Unable to initialize backend" not in r.stderr, r.stderr


def test_convert_cli_bad_source_is_one_clear_line(tmp_path):
  (tmp_path / "empty").mkdir()
  r = _run(f"--from={tmp_path / 'empty'}", f"--to={tmp_path / 'out'}")
  assert r.returncode == 1
  assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "config.json" in r.stderr
  assert "Traceback" not in r.stderr
