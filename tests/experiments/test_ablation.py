"""experiments/ablation.py: the grid x seeds runner (table, resume, failures) and
experiments/holdout.py."""
import json
import os
import pathlib
import signal
import statistics
import threading

import pytest

from experiments import ablation, holdout

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _stub_sweep(workdir, *extra):
  return ablation.main(["--config=configs/dream.py:tiny", "--grid", "model.head=none,poi",
                        "--grid", "optim.lr=0.5,1.5", "--seeds=2", f"--workdir={workdir}",
                        "--parallel=3", "--metrics=accuracy,f1",
                        "--module=tests.experiments.stub_main", *extra])


def _expected(workdir, row, metric):
  """The per-seed values read back from the runs' own eval_results.json."""
  cell = workdir / row["cell"]
  return {int(d.name.split("-")[1]): json.loads((d / "eval_results.json").read_text())[metric]
          for d in sorted(cell.glob("seed-*"))}


def test_table_matches_the_runs_and_a_second_invocation_resumes(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  monkeypatch.setenv("STUB_FAIL", "optim.lr=1.5")  # both lr=1.5 cells stop after step 1
  assert _stub_sweep(tmp_path, "--", "--config.train.max_steps=2") == 1
  out = json.loads((tmp_path / "ablation.json").read_text())
  assert out["metrics"] == ["accuracy", "f1"]
  rows = {r["cell"]: r for r in out["cells"]}
  assert sorted(rows) == ["model.head-none__optim.lr-0.5", "model.head-none__optim.lr-1.5",
                          "model.head-poi__optim.lr-0.5", "model.head-poi__optim.lr-1.5"]
  failed = rows["model.head-poi__optim.lr-1.5"]
  assert failed["seeds"] == [] and [f["seed"] for f in failed["failed"]] == [0, 1]
  assert pathlib.Path(failed["failed"][0]["log"]).is_file()
  assert failed["accuracy"]["mean"] is None
  assert failed["failed"][0]["status"] == "failed"
  assert failed["failed"][0]["log"] in (tmp_path / "ablation.md").read_text()
  ok = rows["model.head-poi__optim.lr-0.5"]
  assert ok["overrides"] == ["--config.model.head=poi", "--config.optim.lr=0.5"]
  vals = _expected(tmp_path, ok, "accuracy")
  assert vals == {0: 56.0, 1: 57.0}  # the stub: 50 + 10 lr + 1 (poi) + seed
  assert ok["accuracy"]["values"] == [56.0, 57.0]
  assert ok["accuracy"]["mean"] == pytest.approx(56.5)
  assert ok["accuracy"]["std"] == pytest.approx(statistics.stdev([56.0, 57.0]))
  assert ok["f1"]["values"] == [28.0, 28.5]
  assert [s["step"] for s in ok["seeds"]] == [2, 2]
  md = (tmp_path / "ablation.md").read_text()
  assert "| model.head=poi optim.lr=0.5 | 56.50 ± 0.71 |" in md

  # --no_run: the table of what is there, nothing started; the stopped runs are "not run".
  n_calls = lambda: sum(len(p.read_text().splitlines()) for p in tmp_path.glob("*/*/calls.txt"))
  before = n_calls()
  assert _stub_sweep(tmp_path, "--no_run", "--", "--config.train.max_steps=2") == 1
  assert n_calls() == before == 8
  assert "seed 0 not run" in (tmp_path / "ablation.md").read_text()

  # Resume: the finished runs are skipped; the stopped ones (an intermediate eval_results.json,
  # step 1, but no DONE marker) run again.
  monkeypatch.delenv("STUB_FAIL")
  assert _stub_sweep(tmp_path, "--", "--config.train.max_steps=2") == 0
  calls = {p.parent.relative_to(tmp_path).as_posix(): len(p.read_text().splitlines())
           for p in tmp_path.glob("*/seed-*/calls.txt")}
  assert len(calls) == 8
  assert all(n == (2 if "lr-1.5" in run else 1) for run, n in calls.items()), calls
  rows = {r["cell"]: r for r in json.loads((tmp_path / "ablation.json").read_text())["cells"]}
  for row in rows.values():
    assert not row["failed"]
    vals = _expected(tmp_path, row, "accuracy")
    assert row["accuracy"]["values"] == [vals[0], vals[1]]
    assert row["accuracy"]["mean"] == pytest.approx(statistics.fmean(vals.values()))
  assert rows["model.head-none__optim.lr-1.5"]["accuracy"]["values"] == [65.0, 66.0]

  # The same workdir with other extra flags: an error, not a silent mix of two settings.
  with pytest.raises(SystemExit, match="another command"):
    _stub_sweep(tmp_path, "--", "--config.train.max_steps=3")


def test_cell_names_are_filesystem_safe_stable_and_distinct():
  assert ablation.cell_name([("model.head", "duma"), ("model.pos_embedding", "false")]) == (
      "model.head-duma__model.pos_embedding-false")
  assert ablation.cell_name([]) == "default"
  a = ablation.cell_name([("data.train_file", "/x/a b.json")])
  b = ablation.cell_name([("data.train_file", "/x/a_b.json")])
  assert a != b and "/" not in a and " " not in a
  assert a == ablation.cell_name([("data.train_file", "/x/a b.json")])
  with pytest.raises(SystemExit, match="KEY=V1"):
    ablation.parse_grid(["model.head"])


def test_listed_cells_instead_of_a_product(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  assert ablation.main(["--config=configs/dream.py:tiny", "--cell", "model.head=none",
                        "--cell", "model.head=poi optim.lr=0.5", "--seeds=1",
                        f"--workdir={tmp_path}", "--metrics=accuracy",
                        "--module=tests.experiments.stub_main"]) == 0
  rows = json.loads((tmp_path / "ablation.json").read_text())["cells"]
  assert [r["cell"] for r in rows] == ["model.head-none", "model.head-poi__optim.lr-0.5"]
  assert [r["accuracy"]["values"] for r in rows] == [[60.0], [56.0]]
  with pytest.raises(SystemExit, match="not both"):
    ablation.main(["--config=configs/dream.py:tiny", "--cell", "model.head=none", "--grid",
                   "optim.lr=1", f"--workdir={tmp_path}", "--metrics=accuracy"])
  # a key set by a cell and again by the flags after --: the later flag would win in every run
  with pytest.raises(SystemExit, match=r"cell 'model.head=poi optim.lr=0.5' sets what the flags "
                     r"after -- set again \(--config.optim.lr=1e-4\)"):
    ablation.main(["--config=configs/dream.py:tiny", "--cell", "model.head=none",
                   "--cell", "model.head=poi optim.lr=0.5", f"--workdir={tmp_path / 'x'}",
                   "--metrics=accuracy", "--no_run", "--", "--config.optim.lr=1e-4"])


def test_a_run_stopped_by_sigterm_and_resumed_counts_both_segments(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  argv = ["--config=configs/dream.py:tiny", "--cell", "model.head=none", "--seeds=1",
          f"--workdir={tmp_path}", "--metrics=accuracy", "--module=tests.experiments.stub_main"]
  monkeypatch.setenv("STUB_SLEEP", "60")  # the run is still going when the SIGTERM comes
  previous = signal.getsignal(signal.SIGTERM)  # the runner installs its own handler
  timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
  timer.start()
  try:
    with pytest.raises(KeyboardInterrupt):
      ablation.main(argv)
  finally:
    timer.cancel()
    signal.signal(signal.SIGTERM, previous)
  run = tmp_path / "model.head-none" / "seed-0"
  assert not (run / ablation.DONE).exists()
  stopped = json.loads((run / ablation.WALL_EARLIER).read_text())
  assert stopped["segments"] == 1 and stopped["wall_s"] >= 1.4

  monkeypatch.setenv("STUB_SLEEP", "0.5")
  assert ablation.main(argv) == 0
  done = json.loads((run / ablation.DONE).read_text())
  assert done["segments"] == 2
  assert done["wall_s"] >= stopped["wall_s"] + 0.5
  row = json.loads((tmp_path / "ablation.json").read_text())["cells"][0]
  assert row["seeds"][0]["wall_s"] == round(done["wall_s"], 1)


def test_runs_carry_their_device_and_software_to_the_claims(tmp_path, monkeypatch):
  # The engine's environment.json -> DONE.json and ablation.json -> claims.py merge without
  # --device / --software.
  from experiments import claims
  monkeypatch.chdir(ROOT)
  env = {"device": "NVIDIA H100 80GB HBM3", "platform": "gpu", "device_count": 1,
         "process_count": 1, "matmul_precision": "default",
         "versions": {"python": "3.12.3", "jax": "0.11.2", "jaxlib": "0.11.2", "flax": "0.12.10"}}
  monkeypatch.setenv("STUB_ENVIRONMENT", json.dumps(env))
  work = tmp_path / "sweep"
  assert ablation.main(["--config=configs/dream.py:tiny", "--cell", "model.head=none",
                        "--seeds=2", f"--workdir={work}", "--metrics=accuracy",
                        "--module=tests.experiments.stub_main"]) == 0
  assert json.loads((work / "model.head-none/seed-1/DONE.json").read_text())["environment"] == env
  seeds = json.loads((work / "ablation.json").read_text())["cells"][0]["seeds"]
  assert {(s["device"], s["software"]) for s in seeds} == {(
      "NVIDIA H100 80GB HBM3 x 1", "jax 0.11.2, jaxlib 0.11.2, flax 0.12.10; matmul precision "
      "default")}
  path = tmp_path / "claims.json"
  assert claims.main(["merge", f"--claims={path}", "--measurement=m", "--command=c",
                      f"--ablation={work / 'ablation.json'}", "--date=2026-11-26"]) == 0
  m = json.loads(path.read_text())["measurements"]["m"]
  assert m["device"] == "NVIDIA H100 80GB HBM3 x 1" and m["software"].startswith("jax 0.11.2,")
  assert set(m["cells"]["model.head-none"]["seeds"]["0"]) == {"accuracy", "step", "wall_s"}
  # The attention kernels a run recorded go with its seed, into the claims too.
  cpu = dict(env, device="AMD EPYC, 2 cores", platform="cpu", attention={
      "8x128x128x12x32 float32 dropout": {"kernel": "cpu_kernel"},
      "8x128x128x12x32 float32": {"kernel": "cpu_kernel"},
      "1x128x128x12x32 float32": {"kernel": "explicit_vjp"}})
  monkeypatch.setenv("STUB_ENVIRONMENT", json.dumps(cpu))
  assert ablation.main(["--config=configs/dream.py:tiny", "--cell", "model.head=poi",
                        "--seeds=1", f"--workdir={work}", "--metrics=accuracy",
                        "--module=tests.experiments.stub_main"]) == 0
  seed = json.loads((work / "ablation.json").read_text())["cells"][0]["seeds"][0]
  assert seed["attention"] == "cpu_kernel, explicit_vjp" and seed["device"] == "AMD EPYC, 2 cores"
  assert claims.main(["merge", f"--claims={path}", "--measurement=cpu", "--command=c",
                      f"--ablation={work / 'ablation.json'}", "--date=2026-11-28"]) == 0
  cell = json.loads(path.read_text())["measurements"]["cpu"]["cells"]["model.head-poi"]
  assert cell["seeds"]["0"]["attention"] == "cpu_kernel, explicit_vjp"
  # Runs that recorded nothing (an older engine): the device must be given.
  monkeypatch.delenv("STUB_ENVIRONMENT")
  old = tmp_path / "old"
  assert ablation.main(["--config=configs/dream.py:tiny", "--cell", "model.head=none",
                        "--seeds=1", f"--workdir={old}", "--metrics=accuracy",
                        "--module=tests.experiments.stub_main"]) == 0
  with pytest.raises(SystemExit):
    claims.main(["merge", f"--claims={path}", "--measurement=o", "--command=c",
                 f"--ablation={old / 'ablation.json'}", "--date=2026-11-26"])


def _squad(n_articles):
  return {"version": "v2.0", "data": [
      {"title": f"A{i}", "paragraphs": [{"context": "c", "qas": [{"id": f"{i}-{j}"}
                                                                for j in range(i + 1)]}]}
      for i in range(n_articles)]}


def test_holdout_groups_whole_passages_deterministically(tmp_path):
  src = tmp_path / "squad.json"
  src.write_text(json.dumps(_squad(10)))
  train, held = holdout.carve(str(src), str(tmp_path / "h"), 0.3)
  t, h = (json.loads(pathlib.Path(p).read_text())["data"] for p in (train, held))
  assert len(h) == 3 and len(t) == 7
  assert sorted(a["title"] for a in t + h) == sorted(f"A{i}" for i in range(10))
  # A question id belongs to one article: no passage or question on both sides.
  ids = lambda arts: {q["id"] for a in arts for p in a["paragraphs"] for q in p["qas"]}
  assert not ids(t) & ids(h)
  again = holdout.carve(str(src), str(tmp_path / "h2"), 0.3)
  assert pathlib.Path(again[1]).read_text() == pathlib.Path(held).read_text()
  other = json.loads(pathlib.Path(holdout.carve(str(src), str(tmp_path / "h3"), 0.3,
                                                seed=1)[1]).read_text())["data"]
  assert len(other) == 3  # another seed: another (deterministic) choice of the same size

  dream = tmp_path / "dream.json"
  dream.write_text(json.dumps([[["M: hi"], [{"question": "q"}], f"d{i}"] for i in range(5)]))
  t, h = (json.loads(pathlib.Path(p).read_text())
          for p in holdout.carve(str(dream), str(tmp_path / "d"), 0.2))
  assert len(h) == 1 and len(t) == 4 and {d[2] for d in t + h} == {f"d{i}" for i in range(5)}

  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps({"rows": []}))
  with pytest.raises(ValueError, match="bad.json: neither SQuAD format"):
    holdout.carve(str(bad), str(tmp_path / "b"), 0.1)
  one = tmp_path / "one.json"
  one.write_text(json.dumps(_squad(1)))
  with pytest.raises(ValueError, match="at least 2"):
    holdout.carve(str(one), str(tmp_path / "o"), 0.5)


def test_holdout_splits_a_newsqa_file_as_the_same_passages_in_squad_format(tmp_path):
  # QOPN reads NewsQA's format, its sliding-window baseline SQuAD's (experiments/ablation_data.py
  # writes both of one set of passages): a held-out split must hold out the same passages in both
  from tests.data import qopn_fixtures
  articles = [(f"Story-{i}", f"text {i} answer", [(f"q{i}?", [(7, 13)], f"id{i}")])
              for i in range(12)]
  news = qopn_fixtures.write_newsqa(tmp_path / "newsqa.json", articles)
  squad = qopn_fixtures.write_nlquad(tmp_path / "squad.json", articles)
  n_train, n_held = (json.loads(pathlib.Path(p).read_text())["data"]
                     for p in holdout.carve(str(news), str(tmp_path / "n"), 0.25))
  s_train, s_held = (json.loads(pathlib.Path(p).read_text())["data"]
                     for p in holdout.carve(str(squad), str(tmp_path / "s"), 0.25))
  assert len(n_held) == 3 and len(n_train) == 9
  assert [a["storyId"] for a in n_held] == [a["title"] for a in s_held]
  assert [a["storyId"] for a in n_train] == [a["title"] for a in s_train]


def test_holdout_jsonl_by_line(tmp_path):
  src = tmp_path / "nq.jsonl"
  src.write_text("".join(json.dumps({"example_id": i}) + "\n" for i in range(20)))
  train, held = holdout.carve(str(src), str(tmp_path / "h"), 0.25)
  t = [json.loads(l)["example_id"] for l in pathlib.Path(train).read_text().splitlines()]
  h = [json.loads(l)["example_id"] for l in pathlib.Path(held).read_text().splitlines()]
  assert len(h) == 5 and sorted(t + h) == list(range(20))


def _real_sweep(tmp_path, data_dir, grid, seeds):
  dream = data_dir / "dream"
  argv = ["--config=configs/dream.py:tiny", *grid, f"--seeds={seeds}",
          f"--workdir={tmp_path / 'w'}", "--parallel=2", "--",
          f"--config.data.train_file={dream / 'train.json'}",
          f"--config.data.eval_file={dream / 'dev.json'}", "--config.train.max_steps=2",
          "--config.data.num_workers=0", "--config.train.export_best=false",
          "--config.train.eval_every=1000", "--config.train.save_every=1000"]
  assert ablation.main(argv) == 0
  out = json.loads((tmp_path / "w" / "ablation.json").read_text())
  assert out["metrics"] == ["accuracy"]  # the DREAM task's metric, read from the task
  for row in out["cells"]:
    finals = [json.loads((tmp_path / "w" / row["cell"] / f"seed-{s}" / "eval_results.json")
                         .read_text()) for s in range(seeds)]
    assert [f["step"] for f in finals] == [2] * seeds
    assert row["accuracy"]["values"] == [f["accuracy"] for f in finals]
    assert row["accuracy"]["mean"] == pytest.approx(statistics.fmean(row["accuracy"]["values"]))
    n_eval = int(row["cell"].rsplit("-", 1)[1])
    assert {f["total"] for f in finals} == {n_eval}
  logs = {p: p.stat().st_mtime for p in (tmp_path / "w").glob("*/seed-*/log.txt")}
  assert ablation.main(argv) == 0  # resume: everything finished, nothing runs again
  assert {p: p.stat().st_mtime for p in logs} == logs
  return out, logs


def test_real_engine_run_through_the_runner(tmp_path, monkeypatch, data_dir):
  """One run of ``configs/dream.py:tiny`` (2 steps) through ``poi_jax.main``: the table holds
  the workdir's final eval_results.json, and a second invocation starts nothing."""
  monkeypatch.chdir(ROOT)
  out, logs = _real_sweep(tmp_path, data_dir, ["--grid", "data.max_eval_examples=8"], 1)
  assert len(out["cells"]) == 1 and len(logs) == 1


@pytest.mark.slow  # 8 engine processes: 2-3 minutes on 2 idle CPU cores (12 under heavy load)
def test_real_engine_2x2_grid_2_seeds(tmp_path, monkeypatch, data_dir):
  """2 x 2 cells x 2 seeds of ``configs/dream.py:tiny`` through ``poi_jax.main``, 2 steps each.
  The grid's values change the data, not the compiled programs, so that with JAX's persistent
  compilation cache the 8 runs compile once."""
  monkeypatch.chdir(ROOT)
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax-cache"))
  monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  out, logs = _real_sweep(tmp_path, data_dir, ["--grid", "data.max_train_examples=8,16",
                                               "--grid", "data.max_eval_examples=8,12"], 2)
  assert len(out["cells"]) == 4 and len(logs) == 8


def test_holdout_runs_train_and_evaluate_on_the_carved_split(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  src = tmp_path / "dream.json"
  src.write_text(json.dumps([[["M: hi"], [{"question": "q"}], f"d{i}"] for i in range(8)]))
  assert ablation.main(["--config=configs/dream.py:tiny", "--grid", "optim.lr=0.5", "--seeds=1",
                        f"--workdir={tmp_path / 'w'}", "--metrics=accuracy", "--holdout=0.25",
                        "--module=tests.experiments.stub_main", "--",
                        f"--config.data.train_file={src}"]) == 0
  call = (tmp_path / "w" / "optim.lr-0.5" / "seed-0" / "calls.txt").read_text().split()
  files = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in call if "_file=" in a}
  assert files["--config.data.train_file"] == str(tmp_path / "w" / "holdout" / "train.json")
  assert files["--config.data.eval_file"] == str(tmp_path / "w" / "holdout" / "holdout.json")
  held = json.loads(pathlib.Path(files["--config.data.eval_file"]).read_text())
  train = json.loads(pathlib.Path(files["--config.data.train_file"]).read_text())
  assert len(held) == 2 and len(train) == 6


def test_qopncpu_selection_data_holds_out_squad1cpusels_articles(tmp_path, data_dir):
  # qopncpusel: qopncpu's training articles, less the two squad1cpusel held out, scored on those
  # two; the evaluation articles 9-11 never appear
  from experiments import ablation_data
  squad = data_dir / "squad2" / "squad2-dev-subset.json"
  titles = [a["title"] for a in json.loads(squad.read_text())["data"]]
  squad1 = json.loads(squad.read_text())
  squad1["data"] = squad1["data"][:9]
  (tmp_path / "squad1.json").write_text(json.dumps(squad1))
  _, held = holdout.carve(str(tmp_path / "squad1.json"), str(tmp_path / "h"), 0.2)
  held_titles = sorted(a["title"] for a in json.loads(pathlib.Path(held).read_text())["data"])
  assert [titles[i] for i in ablation_data.selection_articles(squad)] == held_titles

  ablation_data.write(tmp_path / "out", data_dir, {"qopncpu", "qopncpusel"})
  read = lambda name, f: json.loads((tmp_path / "out" / name / f).read_text())["data"]
  source = lambda arts, key: {a[key].rsplit("-", 1)[0] for a in arts}
  for fmt, key in (("newsqa", "storyId"), ("squad", "title")):
    train, dev = read("qopncpusel", f"{fmt}-train.json"), read("qopncpusel", f"{fmt}-dev.json")
    assert sorted(source(dev, key)) == held_titles
    assert source(train, key) == set(titles[:7]) - set(held_titles)
    # the passages of qopncpu's training file, split in two, none on both sides
    assert sorted(a[key] for a in train + dev) == sorted(
        a[key] for a in read("qopncpu", f"{fmt}-train.json"))
