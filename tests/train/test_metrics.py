"""The metrics writer's TensorBoard events, and that writing them does not import torch."""
import importlib.util
import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest

from poi_jax.train.metrics import MetricWriter


def _events(logdir: str) -> list[tuple[int, str, float]]:
  """(step, tag, value) of every scalar in the TFRecord event files under ``logdir``."""
  from tensorboardX.proto import event_pb2
  rows = []
  for name in sorted(os.listdir(logdir)):
    with open(os.path.join(logdir, name), "rb") as f:
      data = f.read()
    at = 0
    while at < len(data):  # TFRecord: length (u64), its crc (u32), record, its crc (u32)
      (length,) = struct.unpack("<Q", data[at:at + 8])
      event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
      at += 12 + length + 4
      rows += [(event.step, v.tag, v.simple_value) for v in event.summary.value]
  return rows


def test_scalars_reach_tensorboard_and_metrics_jsonl(tmp_path):
  writer = MetricWriter(str(tmp_path))
  writer.write(1, loss=2.5, lr=1e-5)
  writer.write(2, loss=1.25)
  writer.close()
  assert _events(str(tmp_path / "tensorboard")) == [
      (1, "loss", 2.5), (1, "lr", pytest.approx(1e-5)), (2, "loss", 1.25)]
  rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
  assert [(r["step"], r["loss"]) for r in rows] == [(1, 2.5), (2, 1.25)]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed, so there is no import of it to avoid")
def test_a_training_process_writes_tensorboard_without_importing_torch(tmp_path):
  # A fresh process: in this one, other tests may have imported torch already.
  script = textwrap.dedent(f"""
      import sys
      from poi_jax.train.metrics import MetricWriter
      writer = MetricWriter({str(tmp_path)!r})
      writer.write(1, loss=0.5)
      writer.close()
      print("torch loaded by the writer:", "torch" in sys.modules)
      import torch  # hidden only while tensorboardX loaded: a later import is the real one
      print("torch works after:", float(torch.ones(2).sum()))
      """)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  assert "torch loaded by the writer: False" in out.stdout
  assert "torch works after: 2.0" in out.stdout
  assert _events(str(tmp_path / "tensorboard")) == [(1, "loss", 0.5)]


def test_a_loaded_torch_is_left_alone(tmp_path):
  torch = pytest.importorskip("torch", reason="torch is not installed")
  writer = MetricWriter(str(tmp_path))
  writer.write(3, loss=1.0)
  writer.close()
  assert sys.modules["torch"] is torch
  assert _events(str(tmp_path / "tensorboard")) == [(3, "loss", 1.0)]
