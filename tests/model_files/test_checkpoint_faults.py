"""Checkpoint faults, in-process (no engine run): a save that fails with ENOSPC / EIO leaves the
previous checkpoint restorable and says which path failed and why; a damaged newest checkpoint
(a file truncated or deleted, an item missing) is named and the newest intact one is
restored; with none intact, one clear error."""
import errno
import os
import pathlib

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from poi_jax import faults
from poi_jax.model_files.checkpoint import Checkpointer


class _Tiny(nnx.Module):

  def __init__(self, seed):
    self.w = nnx.Param(jax.random.normal(jax.random.key(seed), (64, 32)))


def _state(seed):
  return nnx.state(_Tiny(seed))


def _w(state):
  return np.asarray(nnx.to_pure_dict(state)["w"])


def _saved(tmp_path, steps=(1, 2, 3)):
  ck = Checkpointer(str(tmp_path), keep=5)
  for step in steps:
    ck.save(step, _state(step), {"step": step})
  return ck


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_failed_save_names_the_path_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch,
                                                                        code):
  ck = _saved(tmp_path, steps=(1,))

  def full_disk(self, *args, **kwargs):  # the JSON item is written after the arrays began
    raise OSError(code, os.strerror(code), str(tmp_path / "checkpoints"))

  for name in ("save", "async_save"):
    if hasattr(ocp.handlers.JsonCheckpointHandler, name):
      monkeypatch.setattr(ocp.handlers.JsonCheckpointHandler, name, full_disk)
  with pytest.raises(faults.WriteFailed) as e:
    ck.save(2, _state(2), {"step": 2})
  line = str(e.value)
  assert "\n" not in line
  assert str(tmp_path / "checkpoints" / "2") in line
  assert f"{errno.errorcode[code]}: {os.strerror(code)}" in line
  assert "checkpoint 1 is intact" in line
  monkeypatch.undo()
  ck.close()

  again = Checkpointer(str(tmp_path), keep=5)  # the next run: the half-written step is not seen
  assert again.manager.all_steps() == [1]
  step, state, meta = again.restore_latest_intact(_state(0))
  assert (step, meta) == (1, {"step": 1})
  np.testing.assert_array_equal(_w(state), _w(_state(1)))
  leftovers = [p for p in (tmp_path / "checkpoints").iterdir() if p.name != "1"]
  assert leftovers == []  # orbax's temporary directory of the failed save is gone
  again.close()


def _array_files(step_dir: pathlib.Path):
  return sorted(p for p in (step_dir / "state").rglob("*") if p.is_file()
                and p.stat().st_size > 0 and "d" in p.parent.name)


@pytest.mark.parametrize("damage", ["truncate", "delete_arrays", "delete_meta", "delete_state_dir"])
def test_a_damaged_newest_checkpoint_is_named_and_the_one_before_restored(tmp_path, capsys,
                                                                          damage):
  _saved(tmp_path).close()
  newest = tmp_path / "checkpoints" / "3"
  if damage == "truncate":
    files = _array_files(newest)
    assert files, sorted(newest.rglob("*"))
    for f in files:
      f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
  elif damage == "delete_arrays":
    for f in _array_files(newest):
      f.unlink()
  elif damage == "delete_meta":
    for f in (newest / "meta").iterdir():
      f.unlink()
  else:
    import shutil
    shutil.rmtree(newest / "state")
  ck = Checkpointer(str(tmp_path), keep=5)
  step, state, meta = ck.restore_latest_intact(_state(0))
  out = capsys.readouterr().out
  assert (step, meta["step"]) == (2, 2)
  np.testing.assert_array_equal(_w(state), _w(_state(2)))
  assert f"checkpoint 3 in {tmp_path / 'checkpoints'} is damaged" in out
  assert "Traceback" not in out
  # set aside, so the resumed run writes step 3 anew
  assert ck.manager.all_steps() == [1, 2] and (tmp_path / "checkpoints-damaged" / "3").is_dir()
  ck.save(3, _state(3), {"step": 3})
  assert ck.restore_latest_intact(_state(0))[0] == 3
  ck.close()


def test_no_intact_checkpoint_is_one_line_not_a_fresh_start(tmp_path, capsys):
  _saved(tmp_path, steps=(1, 2)).close()
  for step in (1, 2):
    for f in _array_files(tmp_path / "checkpoints" / str(step)):
      f.unlink()
  ck = Checkpointer(str(tmp_path), keep=5)
  with pytest.raises(faults.NoIntactCheckpoint) as e:
    ck.restore_latest_intact(_state(0))
  assert "steps 2, 1 are all damaged" in str(e.value) and "\n" not in str(e.value)
  assert Checkpointer(str(tmp_path / "empty"), keep=1).restore_latest_intact(_state(0)) is None


@pytest.mark.parametrize("killed", ["before the new save", "after the new save"])
def test_a_step_saved_again_with_its_scores_is_never_lost(tmp_path, capsys, killed):
  # A step whose evaluation was stopped is saved without scores; saving it again with them moves
  # the first save aside until the second is committed. A process killed in between leaves
  # one of them: the next start keeps the committed one and never loses the step.
  ck = Checkpointer(str(tmp_path), keep=1, best_metric="f1")
  ck.save(2, _state(2), {"step": 2, "eval_pending": True})
  ck.save(2, _state(2), {"step": 2}, metrics={"f1": 50.0})  # the resumed run's evaluation
  assert ck.manager.metrics(2) == {"f1": 50.0} and ck.best_step() == 2
  assert not (tmp_path / "checkpoints-rescoring").exists()

  ck.save(4, _state(4), {"step": 4, "eval_pending": True})
  first = tmp_path / "checkpoints" / "4"
  aside = tmp_path / "checkpoints-rescoring" / "4"
  if killed == "before the new save":  # the first save moved aside, the new one never written
    aside.parent.mkdir()
    os.replace(first, aside)
  else:  # the new save committed, the first save not yet deleted
    ck.save(4, _state(40), {"step": 4}, metrics={"f1": 60.0})
    aside.parent.mkdir()
    ck2 = Checkpointer(str(tmp_path / "copy"), keep=1)
    ck2.save(4, _state(4), {"step": 4, "eval_pending": True})
    os.replace(tmp_path / "copy" / "checkpoints" / "4", aside)
  step, state, meta = Checkpointer(str(tmp_path), keep=1, best_metric="f1").restore_latest_intact(
      _state(0))
  assert step == 4 and not aside.parent.exists()
  if killed == "before the new save":
    assert meta["eval_pending"] and np.array_equal(_w(state), _w(_state(4)))
    assert "checkpoint 4 restored from" in capsys.readouterr().out
  else:
    assert "eval_pending" not in meta and np.array_equal(_w(state), _w(_state(40)))
