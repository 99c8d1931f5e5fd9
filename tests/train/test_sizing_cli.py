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
