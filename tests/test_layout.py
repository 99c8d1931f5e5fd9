"""The package's shape (docs/architecture.md): no import-time side effects, one home per helper,
modules by concept (no line cap: issue 38), a registry that finds every task."""
import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "poi_jax"


def test_importing_poi_jax_changes_no_global_flax_or_jax_setting():
  # A fresh interpreter: import every module of the package and compare Flax's and JAX's
  # process-wide settings before and after.
  code = r"""
import importlib, pkgutil, jax
from flax import nnx
def settings():
  return {"eager_sharding": nnx.using_eager_sharding(),
          **{k: str(v) for k, v in sorted(jax.config.values.items())}}
before = settings()
import poi_jax
for info in pkgutil.walk_packages(poi_jax.__path__, "poi_jax."):
  if info.name.endswith(".__main__"):
    continue
  try:
    importlib.import_module(info.name)
  except ImportError as e:  # an optional extra that is not installed
    print("skipped", info.name, e)
after = settings()
changed = {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}
print("CHANGED", changed)
assert not changed, changed
"""
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                     timeout=600)
  assert r.returncode == 0, r.stdout + r.stderr
  assert "CHANGED {}" in r.stdout


def _modules():
  return sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("name", ["write_json_atomic"])
def test_shared_helpers_are_defined_once(name):
  where = [str(p.relative_to(ROOT)) for p in _modules()
           if any(isinstance(n, ast.FunctionDef) and n.name == name
                  for n in ast.walk(ast.parse(p.read_text())))]
  assert where == ["poi_jax/io.py"], where


def test_registry_finds_every_config_task():
  from poi_jax import tasks
  configs = [p.stem for p in (ROOT / "configs").glob("*.py")
             if p.stem != "__init__"]
  import importlib
  names = {importlib.import_module(f"configs.{c}").get_config("tiny").task for c in configs}
  assert names <= set(tasks.names()), names - set(tasks.names())
  with pytest.raises(ValueError, match="unknown task 'nope'"):
    tasks.get_task("nope")
