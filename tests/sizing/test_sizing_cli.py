"""`bench/sizing.py`'s config overrides: ``--config.FIELD=VALUE`` as ``python -m poi_jax.main``
takes them (e.g. ``--config.model.remat=full`` to size a run with remat), each value read as the
field's type, an unknown field or an unreadable value an error that names it."""
import importlib.util
import pathlib

import ml_collections
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _cli():
  spec = importlib.util.spec_from_file_location("sizing_cli", ROOT / "bench" / "sizing.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _race():
  cli = _cli()
  return cli, ml_collections.ConfigDict(cli.load_config("configs/race.py").to_dict())


def test_overrides_take_the_fields_types():
  cli, config = _race()
  assert config.model.remat != "full" and config.model.scan_layers is False
  cli.apply_overrides(config, ["--config.model.remat=full", "--config.train.batch_size=16",
                               "--config.model.scan_layers=true", "--config.optim.lr=3e-5"])
  assert config.model.remat == "full"
  assert config.train.batch_size == 16 and isinstance(config.train.batch_size, int)
  assert config.model.scan_layers is True
  assert config.optim.lr == pytest.approx(3e-5)


@pytest.mark.parametrize("bad, says", [
    ("--config.model.no_such_field=1", "no field 'no_such_field'"),
    ("--config.train.batch_size=sixteen", "batch_size=sixteen: not a int"),
    ("--config.model.scan_layers=maybe", "expected true or false"),
    ("--remat=full", "expected --config.FIELD=VALUE"),
])
def test_bad_overrides_name_the_field(bad, says):
  cli, config = _race()
  with pytest.raises(SystemExit, match=says):
    cli.apply_overrides(config, [bad])


def test_a_tensorcore_device_gets_its_share_of_the_chip():
  """A v4 topology compiles per TensorCore (2 devices a chip): the projection gives each device
  half the chip's FLOP/s, memory and bandwidths, so a step that needs 20 GiB a device does not
  "fit" a 32 GiB chip; GPUs and one-core chips are unchanged."""
  import dataclasses
  from poi_jax.sizing import hlo_stats
  from poi_jax import sizing
  stats = hlo_stats.analyze("HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(0)\n}\n")
  stats = dataclasses.replace(stats, matmul_flops=1e12)
  size = sizing.StepSize(
      devices=8, device_kind="TPU v4", mesh=(1, 8, 1), batch={}, tokens=0, params=0,
      matmul_params=0, state_bytes=0, state_bytes_total=0, large_replicated=[],
      memory={"total": 20 * 2**30, "temp": 0}, cost_flops=None, cost_optimal_seconds=None,
      hlo=stats, estimate_flops=1.0, attention="xla", compile_seconds=0.0, encoder={},
      cores_per_chip=2)
  v4 = sizing.HARDWARE["v4"]
  p = sizing.project(size, v4, 0.5)
  assert p.hardware.memory == v4.memory / 2 and not p.fits
  assert p.compute_s == pytest.approx(1e12 / (v4.peak_flops / 2 * 0.5))
  whole = sizing.project(dataclasses.replace(size, cores_per_chip=1), v4, 0.5)
  assert whole.fits and whole.compute_s == pytest.approx(p.compute_s / 2)
  h100 = sizing.project(size, sizing.HARDWARE["H100"], 0.5)  # not the devices' kind: unchanged
  assert h100.hardware.memory == sizing.HARDWARE["H100"].memory
