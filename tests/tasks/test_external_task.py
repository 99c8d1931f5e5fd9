"""Adding a task edits no list (issue 48): a throwaway task defined in a temporary module outside
the package, named in ``POI_JAX_TASK_MODULES``, trains with `python -m poi_jax.main`, gets the
Reader's files beside its export (it declares ``answers="span"``) and loads into the Reader,
which answers through the Task's own featurizer and decoder settings."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from poi_jax import tasks
from tests.conftest import ROOT

MODULE = textwrap.dedent('''
    """A throwaway extractive task: SQuAD 2.0's pieces under another name, its own Reader
    featurizer counting its calls."""
    import dataclasses

    from poi_jax.tasks import squad

    CALLS = []


    def reader_featurize(records, tokenizer, config, passages):
      CALLS.append(len(records))
      return squad.reader_featurize(records, tokenizer, config, passages)


    TASKS = {"throwaway_qa": dataclasses.replace(
        squad.TASKS["squad2"], name="throwaway_qa", reader_featurize=reader_featurize)}
''')


@pytest.fixture
def throwaway(tmp_path, monkeypatch):
  (tmp_path / "throwaway_task.py").write_text(MODULE)
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setenv(tasks.MODULES_ENV, "throwaway_task")
  monkeypatch.setattr(tasks, "_registry", None)  # found again, with the new module
  yield tmp_path
  monkeypatch.setattr(tasks, "_registry", None)


def test_a_task_from_another_module_trains_exports_and_answers_in_the_reader(throwaway):
  assert "throwaway_qa" in tasks.names()
  workdir = throwaway / "run"
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(throwaway), str(ROOT)]))
  r = subprocess.run([sys.executable, "-m", "poi_jax.main", "--config=configs/squad2.py:tiny",
                      "--config.task=throwaway_qa", "--config.train.max_steps=2",
                      f"--workdir={workdir}", "--mode=train_and_eval"],
                     capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
  assert r.returncode == 0, r.stderr[-3000:]
  saved = json.loads((workdir / "export" / "poi_jax_config.json").read_text())
  assert saved["task"] == "throwaway_qa"
  from poi_jax import Reader
  import throwaway_task  # noqa: E402  (the module the registry imported)
  reader = Reader.load(workdir / "export")
  assert reader.is_extractive and reader.task.name == "throwaway_qa"
  answer = reader.answer("The Normans gave their name to Normandy, a region in France.",
                         "Where is Normandy?")
  assert throwaway_task.CALLS == [1]
  assert answer.text == "" or answer.text in "The Normans gave their name to Normandy, a " \
                                              "region in France."


def test_a_task_module_that_cannot_be_imported_is_named(monkeypatch):
  monkeypatch.setenv(tasks.MODULES_ENV, "no_such_task_module")
  monkeypatch.setattr(tasks, "_registry", None)
  with pytest.raises(ImportError, match=f"{tasks.MODULES_ENV} names 'no_such_task_module'"):
    tasks.names()
  monkeypatch.setattr(tasks, "_registry", None)
