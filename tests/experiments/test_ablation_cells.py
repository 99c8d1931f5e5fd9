"""experiments/ablations.sh builds the declared cells and settings of the CPU DREAM measurements.

A wrong cell or flag there costs hours of CPU before anyone sees it, and a flag that differs from
a measurement's finished runs makes the runner start them again. `table` builds each
measurement's runs without running them (`experiments/ablation.py --no_run`), so its
``ablation.json`` shows what `run` would do."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="ablations.sh needs bash")

POI = "model.head-poi__model.pos_embedding-true"
ENC = "model.head-none__model.pos_embedding-false"


def _table(tmp_path, what, **env_vars):
  """``ablations.sh table WHAT`` in a scratch tree of its own under ``tmp_path`` -> (exit code,
  stderr, ablation.json or None)."""
  tree = tmp_path / f"tree-{len(list(tmp_path.glob('tree-*')))}"
  tree.mkdir()
  (tree / "experiments").symlink_to(ROOT / "experiments")
  (tmp_path / "shared" / "dream").mkdir(parents=True, exist_ok=True)  # named, not read
  env = dict(os.environ, SHARED=str(tmp_path / "shared"), RECORDS=str(tmp_path / "records"),
             **env_vars)
  out = subprocess.run(["bash", "experiments/ablations.sh", "table", what], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=120)
  path = tree / "workdir-ablations" / what / "ablation.json"
  return out.returncode, out.stderr, (json.loads(path.read_text()) if path.exists() else None)


def _cells(ablation):
  return [c["cell"] for c in ablation["cells"]]


def test_the_diagnostics_screen_runs_each_option_at_poi_nets_rate_with_dreamcpubests_flags(
    tmp_path):
  _, err, why = _table(tmp_path, "dreamcpuwhy")
  assert why is not None, err
  assert _cells(why) == [
      f"{POI}__model.coattention.score_gradient-stop__optim.lr-5e-5",
      f"{POI}__model.coattention.output-add__optim.lr-5e-5",
      f"{POI}__model.coattention.output-concat__optim.lr-5e-5",
      f"{POI}__model.coattention.pos_init-zeros__optim.lr-5e-5",
      f"{POI}__optim.new_params_lr_scale-10__optim.lr-5e-5"]
  # Paired with dreamcpubest's POI-Net: the same settings, its memory setting included.
  _, err, best = _table(tmp_path, "dreamcpubest", POI_LR="5e-5")
  assert best is not None, err
  assert _cells(best) == [f"{POI}__optim.lr-5e-5"]
  assert why["extra"] == best["extra"]
  assert "--config.runtime.cpu_malloc=system" in why["extra"]


def test_dumas_own_settings_for_both_arms_with_the_default_memory_setting(tmp_path):
  _, err, duma = _table(tmp_path, "dumacpupaper")
  assert duma is not None, err
  assert _cells(duma) == [ENC, "model.head-duma__model.pos_embedding-false"]
  for flag in ("--config.train.epochs=2", "--config.train.batch_size=8",
               "--config.optim.lr=1e-5", "--config.optim.warmup_steps=100",
               "--config.data.max_seq_length=128"):
    assert flag in duma["extra"], (flag, duma["extra"])
  assert not any("cpu_malloc" in f for f in duma["extra"]), duma["extra"]


def test_the_two_by_two_arms_join_the_paper_settings_and_the_best_stage(tmp_path):
  _, err, paper = _table(tmp_path, "dreamcpupaper", ARMS="nopos pos")
  assert paper is not None, err
  assert _cells(paper) == ["model.head-poi__model.pos_embedding-false",
                           "model.head-none__model.pos_embedding-true"]
  assert "--config.train.batch_size=24" in paper["extra"]
  _, err, best = _table(tmp_path, "dreamcpubest", NOPOS_LR="1e-4", DUMA_LR="2e-5")
  assert best is not None, err
  assert _cells(best) == ["model.head-poi__model.pos_embedding-false__optim.lr-1e-4",
                          "model.head-duma__model.pos_embedding-false__optim.lr-2e-5"]


@pytest.mark.parametrize("what, env, named", [
    ("dreamcpupaper", {"ARMS": "enc bogus"}, "no arm 'bogus'"),
    ("dreamcpuwhy", {"WHY": "stop bogus"}, "no option 'bogus'"),
    ("dreamcpubest", {}, "set ENC_LR"),
])
def test_an_unknown_arm_or_option_or_no_rate_is_refused_before_anything_runs(tmp_path, what, env,
                                                                              named):
  code, err, ablation = _table(tmp_path, what, **env)
  assert code == 2 and named in err, (code, err)
  assert ablation is None
