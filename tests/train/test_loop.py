"""The engine end to end through the CLI, offline: train, evaluate, write predictions."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import transformers

from tests.required_checks import import_or_skip

from tests.train import engine_runs as er

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _main(tmp_path, config, *overrides):
  env = dict(os.environ)
  return subprocess.run([sys.executable, "-m", "poi_jax.main", f"--config={config}",
                         f"--workdir={tmp_path}", "--mode=train_and_eval", *overrides],
                        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


def test_squad2_tiny_end_to_end(tmp_path):
  """The plain `--config=configs/squad2.py:tiny` runs offline: train, eval, predictions."""
  r = _main(tmp_path, "configs/squad2.py:tiny", "--config.train.log_every=5")
  assert r.returncode == 0, r.stderr[-3000:]
  results = json.loads((tmp_path / "eval_results.json").read_text())
  assert results["total"] == 80
  preds = json.loads((tmp_path / "predictions.json").read_text())
  assert len(preds) == 80 and all(isinstance(v, str) for v in preds.values())
  lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  losses = [x["loss"] for x in lines if "loss" in x]
  assert len(losses) == 4 and all(np.isfinite(losses))  # 20 steps, one record every 5
  assert {"lr", "grad_norm", "examples_per_s"} <= set(lines[0])


def test_squad2_tiny_memorises_a_small_fixed_set(tmp_path):
  """A loop that trains lowers the loss on 8 questions it sees 20 times: from the first step's
  (the untrained model) by over a quarter by steps 36-40, step after step (measured: 4.86 ->
  3.08, falling from each 10-step stretch to the next). A step that drops its update, a wrong gradient or a
  zero learning rate leaves it flat (warmup off: lr > 0 from the first step)."""
  r = _main(tmp_path, "configs/squad2.py:tiny", "--config.data.max_train_examples=8",
            "--config.data.max_eval_examples=8", "--config.train.max_steps=40",
            "--config.train.log_every=1", "--config.train.save_every=1000",
            "--config.optim.warmup_steps=0")
  assert r.returncode == 0, r.stderr[-3000:]
  lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  losses = {x["step"]: x["loss"] for x in lines if "loss" in x}
  assert sorted(losses) == list(range(1, 41))
  # 10-step means: each holds both batches of the 16 windows 5 times
  means = [np.mean([losses[s] for s in range(a, a + 10)]) for a in range(1, 41, 10)]
  assert all(b < a for a, b in zip(means, means[1:])), means
  assert means[-1] < 0.75 * losses[1], (losses[1], means)


def test_dream_tiny_duma_end_to_end(tmp_path, data_dir):
  r = _main(tmp_path, "configs/dream.py:tiny", "--config.model.head=duma",
            f"--config.data.train_file={data_dir / 'dream' / 'train.json'}",
            f"--config.data.eval_file={data_dir / 'dream' / 'dev.json'}",
            "--config.data.max_train_examples=32", "--config.data.max_eval_examples=16",
            "--config.train.max_steps=4", "--config.data.max_seq_length=64")
  assert r.returncode == 0, r.stderr[-3000:]
  results = json.loads((tmp_path / "eval_results.json").read_text())
  assert results["total"] == 16


def test_tfds_source_offline_is_one_clear_line(tmp_path):
  r = _main(tmp_path, "configs/squad2.py:tiny", "--config.data.train_file=tfds:squad/v2.0:train")
  assert r.returncode == 1
  last = r.stderr.strip().splitlines()[-1]
  # Without the [tfds] extra the engine says so; with it, TFDS finds no prepared data and no
  # network. Either way: one line naming the source and how to pass a local file.
  assert last.startswith("error: ") and "tfds:squad/v2.0:train" in last and "local" in last


@pytest.mark.required
def test_checkpoints_eval_predict_export_and_workdir_guard(tmp_path, squad_file):
  """One tiny run, then in the same workdir: eval restores the best checkpoint and reproduces
  the end-of-training scores; predict on a copy without answers writes the same predictions; the
  exported encoder loads in transformers; a different model is refused before compiling."""
  squad = squad_file
  common = [f"--config.data.train_file={squad}", f"--config.data.eval_file={squad}",
            "--config.data.max_train_examples=64", "--config.data.max_eval_examples=40",
            "--config.train.max_steps=6", "--config.train.save_every=2",
            "--config.train.keep_checkpoints=2"]
  r = _main(tmp_path, "configs/squad2.py:tiny", *common)
  assert r.returncode == 0, r.stderr[-3000:]
  trained = json.loads((tmp_path / "eval_results.json").read_text())
  preds = json.loads((tmp_path / "predictions.json").read_text())
  steps = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
  assert steps == [4, 6]  # the last 2 (the best, 6, is among them)

  r = _main(tmp_path, "configs/squad2.py:tiny", *common, "--mode=eval")
  assert r.returncode == 0, r.stderr[-3000:]
  assert "evaluating checkpoint 6" in r.stdout
  # eval writes into a directory of its own (issue 17), never over the training run's files.
  again = json.loads((tmp_path / "eval" / "squad2-dev-subset-6" / "eval_results.json")
                     .read_text())
  assert again["f1"] == pytest.approx(trained["f1"], abs=1e-9)

  unlabelled = er.unlabelled_squad(tmp_path / "unlabelled.json")
  r = _main(tmp_path, "configs/squad2.py:tiny", *common, "--mode=predict",
            f"--config.data.predict_file={unlabelled}",
            # another file: the variant's eval skip is lifted unless given (issue 26)
            "--config.data.skip_eval_examples=208")
  assert r.returncode == 0, r.stderr[-3000:]
  assert json.loads((tmp_path / "predict" / "unlabelled-6" / "predictions.json").read_text()) \
      == preds
  assert json.loads((tmp_path / "predictions.json").read_text()) == preds  # untouched

  # transformers' PyTorch model reads the export back (torch: the [test] extra).
  import_or_skip("torch", "test dependency: pip install torch==2.13.0")
  exported = transformers.AutoModel.from_pretrained(tmp_path / "export")
  assert exported.config.hidden_size == 64

  r = _main(tmp_path, "configs/squad2.py:tiny", *common, "--config.model.head=none")
  assert r.returncode == 1
  assert "holds checkpoints of another model" in r.stderr
  assert "train:" not in r.stderr  # refused before the training loop started
