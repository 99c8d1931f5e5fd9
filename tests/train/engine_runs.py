"""Helpers for the engine tests that run `poi_jax.main` in subprocesses."""
import json
import os
import pathlib
import subprocess
import sys

from poi_jax.data.json_stream import load_json
from tests.conftest import ROOT, SQUAD  # the SQuAD 2.0 sample shipped in the package


def tiny_args(workdir, *extra):
  return ["--config=configs/squad2.py:tiny", f"--workdir={workdir}",
          f"--config.data.train_file={SQUAD}", f"--config.data.eval_file={SQUAD}",
          "--config.data.max_train_examples=64", "--config.data.max_eval_examples=40",
          "--config.train.log_every=1", *extra]


def env(devices: int = 1) -> dict:
  # NLTK_DATA: inherited (tests/conftest.py sets it when an offline copy is beside the repo).
  return dict(os.environ, JAX_PLATFORMS="cpu",
              XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
              PYTHONPATH=str(ROOT))


def main_cmd(*args):
  return [sys.executable, "-m", "poi_jax.main", *args]


def run_main(*args, devices: int = 1, timeout: int = 600) -> subprocess.CompletedProcess:
  return subprocess.run(main_cmd(*args), cwd=ROOT, env=env(devices), capture_output=True,
                        text=True, timeout=timeout)


def losses(workdir) -> dict[int, float]:
  """step -> training loss from metrics.jsonl (the last record of a step wins: a resumed run
  appends)."""
  out = {}
  with open(pathlib.Path(workdir) / "metrics.jsonl") as f:
    for line in f:
      rec = json.loads(line)
      if "loss" in rec:
        out[rec["step"]] = rec["loss"]
  return out


def unlabelled_squad(path) -> pathlib.Path:
  """The SQuAD subset without answers (what --mode=predict reads), written to ``path``."""
  data = load_json(str(SQUAD))
  for article in data["data"]:
    for para in article["paragraphs"]:
      for qa in para["qas"]:
        qa.pop("answers", None), qa.pop("plausible_answers", None), qa.pop("is_impossible", None)
  path = pathlib.Path(path)
  path.write_text(json.dumps(data))
  return path


def start_main(*args) -> subprocess.Popen:
  """`poi_jax.main` in the background (to signal or kill it)."""
  return subprocess.Popen(main_cmd(*args), cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def rows(workdir) -> list[dict]:
  """The records of metrics.jsonl, in order."""
  with open(pathlib.Path(workdir) / "metrics.jsonl") as f:
    return [json.loads(line) for line in f if line.strip()]
