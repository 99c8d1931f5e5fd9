"""The data pipeline stays below the model: no module under ``poi_jax/data`` imports
``poi_jax.layers``, ``poi_jax.models`` or Flax (data workers and the feature cache must not pull in
the model code, and a change to a layer must not change how features are built)."""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

DATA = pathlib.Path(__file__).resolve().parents[2] / "poi_jax" / "data"
FORBIDDEN = ("poi_jax.layers", "poi_jax.models", "flax")


def imported_modules(path: pathlib.Path) -> list[str]:
  """Every module an ``import`` or ``from ... import`` in ``path`` names (at any depth, so that
  imports inside functions count too); ``from pkg import name`` also yields ``pkg.name``."""
  out = []
  for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
    if isinstance(node, ast.Import):
      out.extend(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:  # relative: resolve against the module's package
        parts = path.relative_to(DATA.parent.parent).with_suffix("").parts[:-node.level]
        base = ".".join(parts + ((node.module,) if node.module else ()))
      else:
        base = node.module
      out.append(base)
      out.extend(f"{base}.{a.name}" for a in node.names)
  return out


def forbidden_imports(path: pathlib.Path) -> list[str]:
  return [m for m in imported_modules(path)
          if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]


def test_data_modules_exist():
  assert len(list(DATA.rglob("*.py"))) > 10


@pytest.mark.parametrize("path", sorted(DATA.rglob("*.py")), ids=lambda p: str(p.relative_to(DATA)))
def test_data_module_imports_no_model_code(path):
  assert forbidden_imports(path) == []


def test_detects_forbidden_imports(tmp_path):
  """The check itself can fail: each spelling of a forbidden import is caught."""
  bad = tmp_path / "bad.py"
  for src in ("from poi_jax.layers import graph as g\n", "import flax.nnx\n",
              "from poi_jax import models\n", "def f():\n  from flax import nnx\n"):
    bad.write_text(src)
    assert forbidden_imports(bad), src
  bad.write_text("from poi_jax.data.features import graph_layout\nimport numpy as np\n")
  assert forbidden_imports(bad) == []


def test_importing_every_data_module_loads_no_model_code():
  """Transitively too: importing all of ``poi_jax.data`` (in a fresh interpreter) loads neither
  Flax nor the layers or models."""
  code = ("import importlib, pkgutil, sys, poi_jax.data as d\n"
          "for m in pkgutil.walk_packages(d.__path__, 'poi_jax.data.'):\n"
          "  importlib.import_module(m.name)\n"
          f"print(sorted(m for m in sys.modules if m.startswith({FORBIDDEN!r})))\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=DATA.parent.parent)
  assert out.stdout.strip() == "[]"


READERS = DATA / "readers"


@pytest.mark.parametrize("path", sorted(READERS.glob("*.py")), ids=lambda p: p.name)
def test_readers_import_no_feature_code(path):
  """DESIGN.md "Data at scale": readers yield records (types in data/records.py) and build no
  features; featurizers consume records, never the other way round."""
  assert [m for m in imported_modules(path)
          if m == "poi_jax.data.features" or m.startswith("poi_jax.data.features.")] == []


def test_record_types_live_in_records():
  from poi_jax.data import records
  from poi_jax.data.features import nq_windows
  from poi_jax.data.readers import narrativeqa, nq
  assert nq.NqExample is records.NqExample and nq_windows.NqExample is records.NqExample
  assert narrativeqa.NarrativeExample is records.NarrativeExample
  assert records.NqExample.__module__ == records.Document.__module__ == "poi_jax.data.records"
