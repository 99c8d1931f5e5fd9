"""Under CI=true a skipped `required` test fails the run, naming the test and the missing module
(tests/required_checks.py); elsewhere it stays a skip. Checked on small suites run by pytester,
and on the real official-NQ-evaluator test with `six` made unimportable (a `-p` plugin), as on a
fresh machine where natural-questions' undeclared dependency is missing."""
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

SUITE = """
import pytest
from tests.required_checks import import_or_skip

@pytest.mark.required
def test_reference():
  import_or_skip("no_such_reference_module", "pip install no-such-reference")

@pytest.mark.required
@pytest.mark.skipif(True, reason="a skipif on a required check")
def test_reference_skipif():
  pass

@pytest.fixture(scope="module")
def data_source():
  return import_or_skip("no_such_data_source", "pip install no-such-source")

@pytest.mark.required
@pytest.mark.parametrize("i", [0, 1])
def test_reads(data_source, i):
  pass

def test_optional_extra():
  pytest.skip("an optional extra is not installed")

@pytest.mark.required
def test_passes():
  pass
"""
INI = """
[pytest]
markers =
    required: a reference check (see tests/required_checks.py)
"""
SKIPPED_SECTION = "required checks skipped under CI"


@pytest.fixture
def suite(pytester):
  pytester.makeini(INI)
  pytester.makepyfile(test_suite=SUITE)
  return pytester


def test_under_ci_a_skipped_required_test_fails_naming_test_and_module(suite, monkeypatch):
  monkeypatch.setenv("CI", "true")
  r = suite.runpytest("-p", "tests.required_checks")
  assert r.ret == pytest.ExitCode.TESTS_FAILED
  # the in-test skip fails the test; the skipif and the fixture's skip (both tests) fail set-up
  r.assert_outcomes(passed=1, skipped=1, failed=1, errors=3)
  r.stdout.fnmatch_lines([
      f"*{SKIPPED_SECTION}*",
      "test_suite.py::test_reference: could not import 'no_such_reference_module': "
      "No module named 'no_such_reference_module' (pip install no-such-reference)",
      "test_suite.py::test_reference_skipif: a skipif on a required check",
      "test_suite.py::test_reads[[]0[]]: could not import 'no_such_data_source': *",
      "test_suite.py::test_reads[[]1[]]: could not import 'no_such_data_source': *",
  ])
  assert "test_optional_extra" not in r.stdout.str().split(SKIPPED_SECTION)[1]


@pytest.mark.parametrize("ci", [None, "false"])
def test_without_ci_required_tests_still_skip_naming_why(suite, monkeypatch, ci):
  if ci is None:
    monkeypatch.delenv("CI", raising=False)
  else:
    monkeypatch.setenv("CI", ci)
  r = suite.runpytest("-p", "tests.required_checks", "-rs")
  assert r.ret == pytest.ExitCode.OK
  r.assert_outcomes(passed=1, skipped=5)
  r.stdout.fnmatch_lines(["SKIPPED*No module named 'no_such_reference_module'*"])
  assert "CI=" not in r.stdout.str()
  assert SKIPPED_SECTION not in r.stdout.str()


def test_under_ci_a_module_that_skips_at_import_fails_collection(pytester, monkeypatch):
  """Its markers cannot be read once its import stopped, so no module may skip whole on CI."""
  pytester.makepyfile(test_whole="""
import pytest
tfds = pytest.importorskip("no_such_tfds")

def test_never_collected():
  pass
""")
  monkeypatch.setenv("CI", "true")
  r = pytester.runpytest("-p", "tests.required_checks")
  assert r.ret == pytest.ExitCode.INTERRUPTED  # a collection error
  r.stdout.fnmatch_lines([f"*{SKIPPED_SECTION}*",
                          "test_whole.py: could not import 'no_such_tfds': *"])


BLOCK_SIX = """
import importlib.abc
import sys


class NoSix(importlib.abc.MetaPathFinder):
  \"\"\"`import six` fails as if the package were not installed.\"\"\"

  def find_spec(self, name, path=None, target=None):
    if name == "six" or name.startswith("six."):
      raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return None


for name in [m for m in sys.modules if m == "six" or m.startswith("six.")]:
  del sys.modules[name]
sys.meta_path.insert(0, NoSix())
"""


def test_without_six_ci_fails_on_the_official_nq_evaluator_test(pytester, monkeypatch):
  """The issue's fresh machine: natural-questions installed, its undeclared `six` missing. CI used
  to report 3 skips and pass; now it fails, with a line naming the test and `six`."""
  pytester.makepyfile(block_six=BLOCK_SIX)
  monkeypatch.setenv("CI", "true")
  test = ROOT / "tests" / "eval" / "test_nq_metrics.py"
  r = pytester.runpytest_subprocess(
      "-p", "block_six", "-p", "no:cacheprovider", "-c", str(ROOT / "pytest.ini"),
      "--rootdir", str(ROOT), f"{test}::test_metrics_equal_the_official_nq_eval")
  assert r.ret == pytest.ExitCode.TESTS_FAILED, r.stdout.str()
  r.assert_outcomes(failed=3)
  r.stdout.fnmatch_lines([
      f"*{SKIPPED_SECTION}*",
      "tests/eval/test_nq_metrics.py::test_metrics_equal_the_official_nq_eval[[]0[]]: "
      "could not import 'natural_questions.nq_eval': No module named 'six' *",
  ])
