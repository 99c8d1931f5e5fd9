"""experiments/records.py: finished runs kept in the repository and put back on another machine,
where the runner skips them and tables them with the rest."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from experiments import ablation, records

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _git_tree(path: pathlib.Path) -> str:
  """A git work tree at ``path`` with one commit; returns the commit."""
  path.mkdir(parents=True, exist_ok=True)
  env = ["-c", "user.name=t", "-c", "user.email=t@t"]
  subprocess.run(["git", "init", "-q", str(path)], check=True)
  subprocess.run(["git", *env, "-C", str(path), "commit", "-q", "--allow-empty", "-m", "x"],
                 check=True)
  return records.head_commit(path)


def _sweep(workdir, *extra):
  return ablation.main([f"--config={ROOT}/configs/dream.py:tiny", "--grid", "optim.lr=0.5,1.0",
                        "--seeds=2", f"--workdir={workdir}", "--parallel=2",
                        "--metrics=accuracy", "--module=tests.experiments.stub_main", *extra,
                        "--", "--config.train.max_steps=2"])


def test_kept_runs_are_restored_skipped_and_tabled_on_a_fresh_machine(tmp_path, monkeypatch):
  commit = _git_tree(tmp_path / "tree")
  # The runs' work directory is relative, as ablations.sh's: the same command on both machines.
  (tmp_path / "machine1").mkdir()
  monkeypatch.chdir(tmp_path / "machine1")
  work = pathlib.Path("sel")
  assert _sweep(work) == 0
  first = json.loads((work / "ablation.json").read_text())

  kept = records.keep(work, tmp_path / "records", commit)
  assert len(kept) == 4  # 2 cells x 2 seeds
  for path in kept:
    record = json.loads(path.read_text())
    assert record["commit"] == commit
    original = json.loads((work / path.relative_to(tmp_path / "records" / "sel")).read_text())
    assert {k: v for k, v in record.items() if k != "commit"} == original

  # Another machine: the same relative work directory, nothing in it but the records.
  (tmp_path / "machine2").mkdir()
  monkeypatch.chdir(tmp_path / "machine2")
  fresh = pathlib.Path("sel")
  assert len(records.restore(tmp_path / "records", fresh, commit)) == 4
  calls = lambda d: sum(len(p.read_text().splitlines()) for p in d.glob("*/*/calls.txt"))
  assert _sweep(fresh) == 0
  assert calls(fresh) == 0  # every run was skipped: its marker came back
  again = json.loads((fresh / "ablation.json").read_text())
  assert [c["accuracy"] for c in again["cells"]] == [c["accuracy"] for c in first["cells"]]
  # A second restore leaves the markers there alone.
  assert records.restore(tmp_path / "records", fresh, commit) == []


def test_a_record_from_another_commit_is_refused_naming_both(tmp_path):
  record = tmp_path / "records" / "sel" / "cell" / "seed-0" / "DONE.json"
  record.parent.mkdir(parents=True)
  record.write_text(json.dumps({"argv": ["py", "-m", "x"], "wall_s": 1.0,
                                "results": {"accuracy": 1.0}, "commit": "a" * 40}))
  with pytest.raises(SystemExit, match=f"{record}.*{'a' * 40}.*{'b' * 40}"):
    records.restore(tmp_path / "records", tmp_path / "work" / "sel", "b" * 40)
  assert not (tmp_path / "work").exists()


def test_keeping_a_different_run_over_a_record_is_refused(tmp_path):
  marker = tmp_path / "work" / "sel" / "cell" / "seed-0" / "DONE.json"
  marker.parent.mkdir(parents=True)
  marker.write_text(json.dumps({"argv": ["py", "-m", "x", "--lr=1"], "wall_s": 1.0,
                                "results": {"accuracy": 1.0}}))
  records.keep(tmp_path / "work" / "sel", tmp_path / "records", "a" * 40)
  records.keep(tmp_path / "work" / "sel", tmp_path / "records", "a" * 40)  # the same: fine
  marker.write_text(json.dumps({"argv": ["py", "-m", "x", "--lr=2"], "wall_s": 1.0,
                                "results": {"accuracy": 2.0}}))
  with pytest.raises(SystemExit, match="records another run"):
    records.keep(tmp_path / "work" / "sel", tmp_path / "records", "a" * 40)


def test_a_marker_without_results_is_named_with_its_field(tmp_path):
  marker = tmp_path / "sel" / "cell" / "seed-0" / "DONE.json"
  marker.parent.mkdir(parents=True)
  marker.write_text(json.dumps({"argv": ["py"], "wall_s": 1.0}))
  with pytest.raises(SystemExit, match=f"{marker}: no 'results' field"):
    records.keep(tmp_path / "sel", tmp_path / "records", "a" * 40)


@pytest.mark.skipif(shutil.which("bash") is None, reason="ablations.sh needs bash")
def test_ablations_sh_restores_from_the_scripts_checkout(tmp_path):
  """``ablations.sh restore`` run in a worktree puts the records of RECORDS into its work
  directory; a measurement without records is a no-op (no git needed, as on a device)."""
  tree = tmp_path / "tree"
  commit = _git_tree(tree)
  rec = tmp_path / "records" / "dreamcpusel" / "cell" / "seed-0" / "DONE.json"
  rec.parent.mkdir(parents=True)
  rec.write_text(json.dumps({"argv": ["py"], "wall_s": 1.0, "results": {"accuracy": 1.0},
                             "commit": commit}))
  script = ROOT / "experiments" / "ablations.sh"
  env = dict(os.environ, RECORDS=str(tmp_path / "records"))
  out = subprocess.run(["bash", str(script), "restore", "dreamcpusel"], cwd=tree, env=env,
                       capture_output=True, text=True)
  assert out.returncode == 0, out.stderr
  assert (tree / "workdir-ablations" / "dreamcpusel" / "cell" / "seed-0" / "DONE.json").is_file()
  none = subprocess.run(["bash", str(script), "restore", "squad1cpusel"], cwd=tmp_path, env=env,
                        capture_output=True, text=True)
  assert none.returncode == 0 and none.stdout == "", none.stderr
