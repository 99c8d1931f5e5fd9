"""Required checks: under ``CI=true`` a skipped ``@pytest.mark.required`` test fails the run.

A reference or data-source check (the official NQ evaluator, pycocoevalcap, TFDS, the real
all-MiniLM-L6-v2 weights, transformers' PyTorch models, spaCy) skips, naming why, on a developer's
machine that lacks its extra. On CI, where every extra is installed, such a skip means the install
is broken (natural-questions' ``nq_eval.py`` imports ``six``, which its wheel does not declare),
and a skip would hide the check: so under CI the skipped test is reported as failed, and a section
"required checks skipped under CI" lists ``<test id>: <skip reason>`` (the reason names the module
that is missing, see ``import_or_skip``). A test module that skips as a whole (a module-level
``importorskip``) fails collection under CI: its markers cannot be read, so skip in a fixture or in
the test instead. Unmarked tests (optional extras) keep their skips.

Loaded by ``tests/conftest.py`` (``pytest_plugins``); ``-p tests.required_checks`` elsewhere.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

_SKIPPED = pytest.StashKey[list]()


def under_ci() -> bool:
  """``CI`` is set to anything but empty, ``0``, ``false`` or ``no`` (CI services set ``true``)."""
  return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def import_or_skip(modname: str, install: str) -> ModuleType:
  """``pytest.importorskip`` whose reason names the module that is actually missing, which may be
  a dependency of ``modname`` (``No module named 'six'``), and the install step. A module that is
  there but fails to import otherwise raises: a broken install is an error, not a skip."""
  try:
    return importlib.import_module(modname)
  except ModuleNotFoundError as e:
    pytest.skip(f"could not import {modname!r}: {e} ({install})")


def _reason(report) -> str:
  longrepr = report.longrepr
  if isinstance(longrepr, tuple):  # (path, line, "Skipped: <reason>")
    return longrepr[2].removeprefix("Skipped: ")
  return str(longrepr)


def _fail(report, config, what: str) -> None:
  reason = _reason(report)
  report.outcome = "failed"
  report.longrepr = f"CI={os.environ.get('CI')}: {what} skipped: {reason}"
  config.stash.setdefault(_SKIPPED, []).append(f"{report.nodeid}: {reason}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
  report = yield
  if (report.skipped and not hasattr(report, "wasxfail") and under_ci()
      and item.get_closest_marker("required") is not None):
    _fail(report, item.config, "required check")
  return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
  report = yield
  if report.skipped and under_ci():
    _fail(report, collector.config, "test module (skip inside a fixture or test, not at import)")
  return report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
  skipped = config.stash.get(_SKIPPED, [])
  if skipped:
    terminalreporter.section("required checks skipped under CI", sep="=", red=True, bold=True)
    for line in skipped:
      terminalreporter.line(line, red=True)
