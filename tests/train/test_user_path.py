"""The paths a user walks after the quickstart (issue 17): eval / predict in their own directory,
caps said out loud, Ctrl-C and SIGKILL safe, bad values and files refused in one line."""
import hashlib
import json
import os
import signal
import time

import jax
import pytest

from poi_jax.eval import squad as squad_metrics
from tests.train import engine_runs as er

STEPS = 6


def _common(*extra):
  return er.tiny_args(*extra)


def _digest(workdir) -> dict:
  """Every file of a run (but the checkpoints and the eval/predict directories) -> its hash."""
  out = {}
  for root, dirs, files in os.walk(workdir):
    dirs[:] = [d for d in dirs if d not in ("checkpoints", "eval", "predict", "cache")]
    for name in files:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, workdir)] = hashlib.sha256(f.read()).hexdigest()
  return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  work = tmp_path_factory.mktemp("run")
  r = er.run_main(*er.tiny_args(work, f"--config.train.max_steps={STEPS}",
                                "--config.train.save_every=3", "--mode=train_and_eval"))
  assert r.returncode == 0, r.stderr[-3000:]
  return work, r


def test_training_output_is_short_and_quiet(trained):
  work, r = trained
  assert "doc_stride" not in r.stdout  # no config dump: a one-line summary and config.json
  assert r.stdout.splitlines()[0].startswith("squad2: random albert + poi (float32)")
  assert "did not provide metrics" not in r.stderr  # orbax's periodic-save warning
  assert "scoring 40 of 4449 questions" in r.stdout
  assert any(line.startswith("eval @ step 6 (40 of 4449 questions)")
             for line in r.stdout.splitlines())
  rows = [json.loads(l) for l in (work / "metrics.jsonl").read_text().splitlines()]
  train_rows = [row for row in rows if "loss" in row]
  # The first step compiles: no throughput for it; the others have one.
  assert "examples_per_s" not in train_rows[0]
  assert all("examples_per_s" in row for row in train_rows[1:])
  # Where it ran, recorded beside the config (poi_jax.train.environment) and printed.
  env = json.loads((work / "environment.json").read_text())
  assert env["platform"] == "cpu" and env["versions"]["jax"] == jax.__version__
  assert f"device {env['device']}; jax {jax.__version__}," in r.stdout
  # A training run keeps its freed memory for the next step (runtime.cpu_malloc=auto).
  assert env["cpu_malloc"] in ("reuse", "system (not glibc)"), env
  # And which attention kernel each traced problem ran (`auto` chooses per machine): the
  # training step's (attention dropout on) and the evaluation's (off).
  kernels = env["attention"]
  assert any(k.endswith(" dropout") for k in kernels), kernels
  assert any(not k.endswith(" dropout") for k in kernels), kernels
  assert all(v["kernel"] in ("cpu_kernel", "explicit_vjp") and v["model.attention"] == "auto"
             for v in kernels.values()), kernels


def test_capped_eval_says_so_and_writes_its_gold_file(trained):
  work, _ = trained
  results = json.loads((work / "eval_results.json").read_text())
  assert results["num_questions"] == 40 and results["num_questions_in_source"] == 4449
  gold = json.loads((work / "gold.json").read_text())["data"]
  preds = json.loads((work / "predictions.json").read_text())
  odds = json.loads((work / "null_odds.json").read_text())
  assert sum(len(p["qas"]) for a in gold for p in a["paragraphs"]) == 40 == len(preds)
  # The official metric on the written gold file reproduces the run's score.
  again = squad_metrics.squad_v2_evaluate(gold, preds, odds)
  assert again["f1"] == pytest.approx(results["f1"], abs=1e-9)


def test_eval_and_predict_leave_the_training_run_untouched(trained, tmp_path):
  work, _ = trained
  before = _digest(work)
  r = er.run_main(*er.tiny_args(work, "--mode=eval"))
  assert r.returncode == 0, r.stderr[-3000:]
  out = work / "eval" / "squad2-dev-subset-6"
  assert "evaluating checkpoint 6" in r.stdout and str(out) in r.stdout
  assert _digest(work) == before  # predictions, scores, config, metrics, TensorBoard: unchanged
  assert {"predictions.json", "nbest_predictions.json", "null_odds.json", "gold.json",
          "eval_results.json", "config.json"} <= {p.name for p in out.iterdir()}
  trained_f1 = json.loads((work / "eval_results.json").read_text())["f1"]
  assert json.loads((out / "eval_results.json").read_text())["f1"] == pytest.approx(trained_f1)
  assert not list(out.parent.glob(".staging-*"))

  unlabelled = er.unlabelled_squad(tmp_path / "unlabelled.json")
  mine = tmp_path / "mine"
  # another file: the variant's eval skip is lifted unless given (issue 26)
  r = er.run_main(*er.tiny_args(work, "--mode=predict", f"--config.data.predict_file={unlabelled}",
                                "--config.data.skip_eval_examples=208", f"--output_dir={mine}"))
  assert r.returncode == 0, r.stderr[-3000:]
  assert _digest(work) == before
  assert json.loads((mine / "predictions.json").read_text()) == \
      json.loads((out / "predictions.json").read_text())
  odds = json.loads((mine / "null_odds.json").read_text())
  assert set(odds) == set(json.loads((mine / "predictions.json").read_text()))
  assert not (mine / "gold.json").exists()  # nothing to score against


def test_eval_without_checkpoint_or_weights_is_an_error(tmp_path):
  r = er.run_main(*er.tiny_args(tmp_path, "--mode=eval"))
  assert r.returncode == 1
  assert "no checkpoint" in r.stderr and "model.init_from" in r.stderr
  assert "Traceback" not in r.stderr and not (tmp_path / "eval").exists()


@pytest.mark.parametrize("override,field", [
    ("--config.optim.lr=0", "optim.lr"), ("--config.optim.lr=-1e-5", "optim.lr"),
    ("--config.optim.accum_steps=0", "optim.accum_steps"),
    ("--config.train.epochs=0", "train.epochs=0"),
    ("--config.data.doc_stride=0", "data.doc_stride"),
    ("--config.data.length_buckets=fast", "data.length_buckets"),
    ("--config.data.bucket_window_batches=0", "data.bucket_window_batches"),
    ("--config.optim.warmup_ratio=1.5", "optim.warmup_ratio"),
    ("--config.train.steps_in_flight=0", "train.steps_in_flight")])
def test_values_outside_their_domain_are_refused_before_anything(tmp_path, override, field):
  extra = [override] + (["--config.train.max_steps=0"] if "epochs" in override else [])
  r = er.run_main(*er.tiny_args(tmp_path / "w", "--mode=train", *extra))
  assert r.returncode == 1
  lines = r.stderr.strip().splitlines()
  assert lines[-1].startswith("error: ") and field in lines[-1] and "Traceback" not in r.stderr
  assert not (tmp_path / "w" / "config.json").exists()  # nothing written for a refused run


def test_a_workdir_under_a_file_is_one_line(tmp_path):
  (tmp_path / "afile").write_text("x")
  r = er.run_main(*er.tiny_args(tmp_path / "afile" / "run", "--mode=train"))
  assert r.returncode == 1 and "Traceback" not in r.stderr
  assert r.stderr.strip().splitlines()[-1].startswith("error: --workdir=") and \
      "not a directory" in r.stderr


def _wait_for_rows(proc, metrics, n, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline and proc.poll() is None:
    if metrics.exists() and len(metrics.read_text().splitlines()) >= n:
      return
    time.sleep(0.02)


def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path):
  work = tmp_path / "w"
  args = er.tiny_args(work, "--config.train.max_steps=150", "--mode=train",
                      "--config.train.save_every=1000", "--config.train.export_best=false")
  proc = er.start_main(*args)
  _wait_for_rows(proc, work / "metrics.jsonl", 4)
  assert proc.poll() is None, "the run ended before it could be interrupted"
  proc.send_signal(signal.SIGINT)
  out, err = proc.communicate(timeout=300)
  assert proc.returncode == 130, err[-3000:]
  line = [l for l in err.replace("\r", "\n").splitlines() if l.strip()][-1]
  assert "Traceback" not in err and line.startswith("SIGINT: checkpoint "), err[-2000:]
  assert line.endswith("run the same command again to resume"), line
  stopped = max(er.losses(work))
  assert (work / "checkpoints" / str(stopped)).is_dir()


def test_a_second_ctrl_c_stops_at_once():
  from poi_jax.model_files.checkpoint import PreemptionWatcher
  # What was there before (Python's default handler, or SIG_IGN when pytest was started as a
  # background job of a non-interactive shell, which ignores SIGINT in its children).
  before = signal.getsignal(signal.SIGINT)
  with PreemptionWatcher() as watcher:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.01)  # the handler runs between bytecodes of the main thread
    assert watcher.requested() and watcher.signum == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.01)
  assert signal.getsignal(signal.SIGINT) is before  # restored


def test_restart_after_sigkill_logs_each_step_once(tmp_path):
  work = tmp_path / "w"
  args = er.tiny_args(work, "--config.train.max_steps=40", "--mode=train",
                      "--config.train.save_every=5", "--config.train.export_best=false")
  proc = er.start_main(*args)
  _wait_for_rows(proc, work / "metrics.jsonl", 13)
  assert proc.poll() is None, "the run ended before it could be killed"
  proc.kill()
  proc.communicate(timeout=60)
  logged = [json.loads(l)["step"] for l in (work / "metrics.jsonl").read_text().splitlines()
            if l.strip().endswith("}")]
  again = er.run_main(*args)
  assert again.returncode == 0, again.stderr[-3000:]
  resumed = int(again.stdout.split("resumed from checkpoint ")[1].split()[0])
  assert resumed < max(logged)  # the killed run had logged steps past its last checkpoint
  steps = [json.loads(l)["step"] for l in (work / "metrics.jsonl").read_text().splitlines()]
  assert steps == list(range(1, 41))  # each step once, in order
