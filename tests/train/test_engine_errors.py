"""Bad engine input fails with one clear line before anything is compiled."""
import pytest

from tests.train import engine_runs as er


@pytest.mark.parametrize("overrides,devices,message", [
    (["--config.mesh.data=8", "--config.train.batch_size=6"], 8,
     "train.batch_size=6 is not divisible by the 8 data-parallel devices"),
    (["--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.train.eval_batch_size=6"], 4,
     "train.eval_batch_size=6 is not divisible by the 4 data-parallel devices"),
    (["--config.mesh.data=3"], 8, "mesh data=3 x fsdp=1 x tensor=1 = 3 devices, but 8"),
])
def test_bad_mesh_or_batch_is_one_line_before_compiling(tmp_path, overrides, devices, message):
  r = er.run_main(*er.tiny_args(tmp_path, "--mode=train", *overrides), devices=devices)
  assert r.returncode == 1, r.stderr[-2000:]
  last = r.stderr.strip().splitlines()[-1]
  assert last.startswith("error: ") and message in last
  assert not (tmp_path / "checkpoints").exists()
