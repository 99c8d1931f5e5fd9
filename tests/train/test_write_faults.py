"""A prediction write that fails (ENOSPC / EIO, injected) leaves the previous predictions in
place, leaves no staging files behind, and stops with one line naming the path and the cause
(the entry point prints every `RunFault` as its last line and exits 1:
tests/faults/test_nonfinite.py). Checkpoint writes: tests/model_files/test_checkpoint_faults.py."""
import errno
import json
import os
import types

import pytest

from poi_jax import faults
from poi_jax.tasks.base import Evaluator
from poi_jax.train import evaluate as eval_lib


def _run(tmp_path, evaluator, mode="train_and_eval", output_dir=None):
  split = types.SimpleNamespace(num_examples=2, num_in_source=2)
  writes = []
  return types.SimpleNamespace(
      config=types.SimpleNamespace(train=types.SimpleNamespace(eval_batch_size=2)),
      eval=split, mode=mode, is_chief=True, workdir=str(tmp_path), sharded=None,
      output_dir=output_dir or str(tmp_path), task=types.SimpleNamespace(evaluator=evaluator),
      writer=types.SimpleNamespace(write=lambda step, **kw: writes.append(step)))


def _writes(answer, fail_with=None):
  class Writes(Evaluator):
    def add(self, records, features, outputs):
      self.open_json("predictions.json").add("q1", answer)
      if fail_with is not None:  # the disk fills up at the second file
        raise OSError(fail_with, os.strerror(fail_with), os.path.join(self.out_dir, "nbest.json"))

    def scores(self):
      return {"f1": 50.0}
  return Writes


@pytest.fixture(autouse=True)
def _one_chunk(monkeypatch):
  """No model: the evaluation's data is one chunk of two records."""
  monkeypatch.setattr(eval_lib.eval_stream, "chunks", lambda *a, **k: iter([([1, 2], None, {})]))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_failed_prediction_write_keeps_the_previous_predictions(tmp_path, monkeypatch, code):
  eval_lib.evaluate(_run(tmp_path, _writes("first")), step=10, save=False)
  assert json.loads((tmp_path / "predictions.json").read_text()) == {"q1": "first"}

  with pytest.raises(faults.WriteFailed) as e:
    eval_lib.evaluate(_run(tmp_path, _writes("second", fail_with=code)), step=20, save=False)
  line = str(e.value)
  assert "\n" not in line and str(tmp_path) in line and "step 20" in line
  assert f"{errno.errorcode[code]}: {os.strerror(code)}" in line
  assert json.loads((tmp_path / "predictions.json").read_text()) == {"q1": "first"}
  assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_results.json",
                                                        "predictions.json"]  # no staging left


def test_failed_eval_mode_write_keeps_the_previous_output_dir(tmp_path, monkeypatch):
  monkeypatch.setattr(eval_lib, "config_dict", lambda c: {})
  out = tmp_path / "eval" / "dev-10"
  eval_lib.evaluate(_run(tmp_path, _writes("first"), "eval", str(out)), step=10, save=False)
  with pytest.raises(faults.WriteFailed):
    eval_lib.evaluate(_run(tmp_path, _writes("second", errno.ENOSPC), "eval", str(out)),
                      step=10, save=False)
  assert json.loads((out / "predictions.json").read_text()) == {"q1": "first"}
  assert [p.name for p in (tmp_path / "eval").iterdir()] == ["dev-10"]


def test_the_cause_is_found_inside_wrapping_errors():
  inner = OSError(errno.ENOSPC, "No space left on device")
  try:
    try:
      raise inner
    except OSError as e:
      raise RuntimeError("tensorstore write failed") from e
  except RuntimeError as wrapped:
    assert faults.is_os_failure(wrapped)
    assert faults.cause(wrapped) == "ENOSPC: No space left on device"
  text_only = ValueError("UNKNOWN: Error writing local file: No space left on device [28]")
  assert faults.is_os_failure(text_only) and faults.cause(text_only).startswith("ENOSPC")
  assert not faults.is_os_failure(ValueError("shape mismatch"))


def test_a_failed_metrics_write_is_one_line(tmp_path):
  from poi_jax.train.metrics import MetricWriter
  writer = MetricWriter(str(tmp_path))
  writer.write(1, loss=1.0)

  class _FullDisk:
    def write(self, text):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self):
      pass

  writer._jsonl = _FullDisk()
  with pytest.raises(faults.WriteFailed) as e:
    writer.write(2, loss=0.5)
  assert str(e.value).startswith(f"could not write {tmp_path / 'metrics.jsonl'}: ENOSPC")
  assert [json.loads(l)["step"] for l in (tmp_path / "metrics.jsonl").read_text().splitlines()] \
      == [1]
