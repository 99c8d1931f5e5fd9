"""The install is reproducible: every dependency that setup.py names is pinned in
constraints.txt (README: Install; `.ci/run` installs with it), and under CI the installed versions
are the pinned ones, so an upstream release cannot change what CI tests without a commit.

`POI_JAX_UNPINNED=1 bash .ci/run` installs the newest releases instead (the check that a refresh
of the pins is due); then the versions differ on purpose and the second test says so by skipping.
"""
from __future__ import annotations

import ast
import importlib.metadata
import os
import pathlib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Beam pins its own protobuf and pyarrow and installs in its own environment (setup.py).
UNPINNED_EXTRAS = {"beam"}


def _setup_requirements() -> list[Requirement]:
  """install_requires and every extra's requirements but UNPINNED_EXTRAS, read from setup.py's
  literals (not from installed metadata, which may belong to another checkout)."""
  tree = ast.parse((ROOT / "setup.py").read_text())
  call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
              and getattr(n.func, "id", getattr(n.func, "attr", None)) == "setup")
  kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords
        if k.arg in ("install_requires", "extras_require")}
  names = list(kw["install_requires"])
  for extra, reqs in kw["extras_require"].items():
    if extra not in UNPINNED_EXTRAS:
      names += reqs
  return [Requirement(r) for r in names]


def _pins() -> dict[str, str]:
  pins = {}
  for n, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
    line = line.split("#", 1)[0].strip()
    if not line:
      continue
    req = Requirement(line)
    spec = list(req.specifier)
    assert len(spec) == 1 and spec[0].operator == "==", f"constraints.txt:{n}: {line!r} is not a pin"
    name = canonicalize_name(req.name)
    assert name not in pins, f"constraints.txt:{n}: {req.name} pinned twice"
    pins[name] = spec[0].version
  return pins


def test_every_dependency_is_pinned_and_satisfies_setup_py():
  pins = _pins()
  for req in _setup_requirements():
    name = canonicalize_name(req.name)
    assert name in pins, f"setup.py needs {req.name} but constraints.txt does not pin it"
    # The pin must satisfy setup.py's own range, or the two files contradict each other.
    assert req.specifier.contains(Version(pins[name]), prereleases=True), (
        f"constraints.txt pins {req.name}=={pins[name]}, outside setup.py's {req}")


@pytest.mark.skipif(os.environ.get("POI_JAX_UNPINNED") == "1",
                    reason="POI_JAX_UNPINNED=1: the newest releases are installed on purpose")
@pytest.mark.skipif(os.environ.get("CI") != "true",
                    reason="a developer's environment may hold other versions; CI installs the pins")
def test_ci_runs_the_pinned_versions():
  pins = _pins()
  moved = []
  for name, pinned in pins.items():
    try:
      installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue  # pinned for an extra this install did not ask for
    if Version(installed).public != Version(pinned).public:  # torch's "+cpu" label aside
      moved.append(f"{name}: installed {installed}, pinned {pinned}")
  assert not moved, "installed versions differ from constraints.txt:\n" + "\n".join(moved)
