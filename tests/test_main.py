"""`python -m poi_jax.main` and the config files, run as a user runs them (subprocesses)."""
import json
import pathlib
import subprocess
import sys

import pytest
from ml_collections import config_flags  # noqa: F401  (the loader main uses)

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASKS = ["squad1", "squad2", "race", "dream"]


def _main(*args):
  return subprocess.run([sys.executable, "-m", "poi_jax.main", *args], capture_output=True,
                        text=True, timeout=300, cwd=ROOT)


def test_tiny_runs_offline_and_logs_the_resolved_config(tmp_path):
  r = _main("--config=configs/squad2.py:tiny", f"--workdir={tmp_path}", "--config.optim.lr=2e-5")
  assert r.returncode == 0, r.stderr
  logged = json.loads((tmp_path / "config.json").read_text())
  assert logged["task"] == "squad2" and logged["optim"]["lr"] == 2e-5
  assert logged["model"]["encoder"]["hidden_size"] == 64  # the tiny variant was applied
  count = int(r.stdout.split("parameters:")[1].split()[0].replace(",", ""))
  # Independent count of the tiny ALBERT from its architecture (HF AlbertModel's layout).
  e = logged["model"]["encoder"]
  E, D, I, V = e["embedding_size"], e["hidden_size"], e["intermediate_size"], e["vocab_size"]
  emb = (V + e["max_position_embeddings"] + e["type_vocab_size"]) * E + 2 * E
  layer = 4 * (D * D + D) + 2 * D + (D * I + I) + (I * D + D) + 2 * D
  encoder = emb + (E * D + D) + e["num_hidden_groups"] * e["inner_group_num"] * layer + D * D + D
  pos_table, qa_outputs = 40 * E, D * 2 + 2  # POI-Net adds only these
  assert count == encoder + pos_table + qa_outputs
  assert f"{pos_table + qa_outputs:,} parameters over the encoder" in r.stdout


def test_plain_encoder_head_adds_only_the_classifier(tmp_path):
  r = _main("--config=configs/dream.py:tiny", f"--workdir={tmp_path}", "--config.model.head=none")
  assert r.returncode == 0, r.stderr
  assert "65 parameters over the encoder" in r.stdout  # Linear 64 -> 1


def test_unknown_config_key_is_an_error(tmp_path):
  r = _main("--config=configs/squad2.py:tiny", f"--workdir={tmp_path}", "--config.optim.lrr=1")
  assert r.returncode != 0
  assert "unknown config key 'lrr'" in r.stderr and "Traceback" not in r.stderr


def test_unknown_variant_is_an_error(tmp_path):
  r = _main("--config=configs/squad2.py:huge", f"--workdir={tmp_path}")
  assert r.returncode != 0 and "unknown config variant 'huge'" in r.stderr


def test_paper_config_offline_fails_with_one_clear_line(tmp_path, monkeypatch):
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  r = subprocess.run([sys.executable, "-m", "poi_jax.main", "--config=configs/squad2.py",
                      f"--workdir={tmp_path}"], capture_output=True, text=True, timeout=300,
                     cwd=ROOT)
  assert r.returncode == 1
  assert r.stderr.strip().splitlines()[-1].startswith(
      "error: cannot fetch 'albert/albert-xxlarge-v2'")
  assert "Traceback" not in r.stderr


def test_the_designs_command_as_written_runs_without_workdir(tmp_path):
  """`python -m poi_jax.main --config=configs/squad2.py`, verbatim: the first line names the
  default run directory; offline it then ends in the one "cannot fetch" line."""
  import os
  env = dict(os.environ, HF_HUB_OFFLINE="1", POI_JAX_RUNS=str(tmp_path / "runs"))
  r = subprocess.run([sys.executable, "-m", "poi_jax.main", "--config=configs/squad2.py"],
                     capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
  assert r.returncode == 1, r.stderr
  assert r.stdout.splitlines()[0].startswith(f"workdir: {tmp_path / 'runs' / 'squad2'} ")
  assert r.stderr.strip().splitlines()[-1].startswith(
      "error: cannot fetch 'albert/albert-xxlarge-v2'")


def test_default_workdir_is_the_same_for_the_same_command_and_apart_for_other_settings(
    tmp_path, monkeypatch):
  from poi_jax import main
  monkeypatch.delenv(main.RUNS_ENV, raising=False)
  plain = main.default_workdir("configs/squad2.py:tiny", {})
  assert plain == "runs/squad2-tiny"
  lr = main.default_workdir("configs/squad2.py:tiny", {"optim.lr": 2e-5})
  assert lr.startswith("runs/squad2-tiny-") and lr == main.default_workdir(
      "configs/squad2.py:tiny", {"optim.lr": 2e-5})
  assert lr != main.default_workdir("configs/squad2.py:tiny", {"optim.lr": 3e-5})
  assert main.default_workdir("/x/configs/dream.py:minilm,bf16", {}) == "runs/dream-minilm_bf16"
  monkeypatch.setenv(main.RUNS_ENV, str(tmp_path))
  assert main.default_workdir("configs/squad2.py", {}) == str(tmp_path / "squad2")


def test_the_same_command_without_workdir_reuses_its_run(tmp_path):
  import os
  env = dict(os.environ, POI_JAX_RUNS=str(tmp_path))
  args = [sys.executable, "-m", "poi_jax.main", "--config=configs/squad2.py:tiny",
          "--config.optim.lr=2e-5"]
  first = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
  assert first.returncode == 0, first.stderr
  line = first.stdout.splitlines()[0]
  workdir = pathlib.Path(line.split()[1])
  assert workdir.parent == tmp_path and (workdir / "config.json").exists()
  again = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
  assert again.stdout.splitlines()[0] == line
  assert [p.name for p in tmp_path.iterdir()] == [workdir.name]


def test_hostile_data_files_end_in_one_error_line_naming_them(tmp_path):
  """Issue 35: 200 kB of nested arrays (ijson's prefixes took 18 GB: a MemoryError traceback)
  and a gzip file cut in its first bytes (a BadGzipFile traceback) end in one ``error:`` line
  naming the file, exit 1, before any compilation."""
  import gzip
  deep = tmp_path / "deep.json"
  deep.write_bytes(b'{"version": "v2.0", "data": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}")
  cut = tmp_path / "cut.json.gz"
  cut.write_bytes(gzip.compress(json.dumps({"version": "v2.0", "data": []}).encode())[:20])
  for path, why in ((deep, "record '#0': nested more than 128 levels deep"),
                    (cut, "cannot decompress it: the file is corrupt or truncated")):
    workdir = tmp_path / f"{path.name}-run"
    r = _main("--config=configs/squad2.py:tiny", f"--workdir={workdir}", "--mode=train",
              f"--config.data.train_file={path}")
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]  # (splitlines also ends the progress bar's \r)
    assert last.startswith(f"error: {path}: {why}"), last
    assert not list((workdir / "checkpoints").glob("*")), "no step may have run"


def test_running_out_of_memory_ends_in_one_error_line(tmp_path):
  """A MemoryError (here raised where the run starts) is one ``error:`` line, exit 1."""
  code = ("import sys; from absl import app; from poi_jax import main as m\n"
          "def boom(*a, **k): raise MemoryError()\n"
          "m.describe = boom\n"
          f"sys.argv = ['main', '--config=configs/squad2.py:tiny', '--workdir={tmp_path}', "
          f"'--mode=describe']\n"
          "app.run(m.main, flags_parser=m.parse_flags)\n")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                     cwd=ROOT)
  assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert r.stderr.strip().splitlines()[-1].startswith("error: out of memory (MemoryError)")


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("variant", [None, "tiny", "minilm", "albert_base"])
def test_every_config_variant_resolves_and_is_locked(task, variant):
  import importlib
  mod = importlib.import_module(f"configs.{task}")
  c = mod.get_config(variant)
  assert c.task == task
  with pytest.raises(AttributeError):
    c.optim.not_a_field = 1  # locked: new keys are refused
  if variant == "tiny":
    assert c.model.init_from == "" and c.train.max_steps > 0
  if variant == "minilm":
    assert c.model.init_from == "minilm"


def test_duma_head_count_is_printed(tmp_path):
  r = _main("--config=configs/dream.py:tiny", f"--workdir={tmp_path}", "--config.model.head=duma",
            "--config.model.pos_embedding=false")
  assert r.returncode == 0, r.stderr
  d = 64
  assert f"{4 * (d * d + d) + 2 * d + 1:,} parameters over the encoder" in r.stdout


@pytest.mark.parametrize("task,warmup,epochs", [("dream", 100, 2.0), ("race", 1000, 3.0)])
def test_duma_paper_variant_has_the_duma_papers_settings(task, warmup, epochs):
  import importlib
  c = importlib.import_module(f"configs.{task}").get_config("duma")
  # DUMA paper, Experimental Settings: ALBERT-xxlarge, k = 2 shared layers, lr 1e-5, batch 8.
  assert c.model.head == "duma" and c.model.init_from == "albert/albert-xxlarge-v2"
  assert c.model.duma.num_layers == 2 and c.model.duma.share_layers
  assert c.optim.lr == 1e-5 and c.train.batch_size == 8
  assert c.optim.warmup_steps == warmup and c.train.epochs == epochs


@pytest.mark.parametrize("task", ["squad2", "dream"])
def test_variants_combine_left_to_right(task):
  import importlib
  mod = importlib.import_module(f"configs.{task}")
  c = mod.get_config("minilm,bf16")
  assert c.model.init_from == "minilm" and c.model.dtype == "bfloat16"
  assert c.optim.lr == mod.get_config("minilm").optim.lr  # bf16 changes only the dtype
  tiny = mod.get_config("tiny,bf16")
  assert tiny.model.dtype == "bfloat16" and tiny.train.max_steps == mod.get_config("tiny").train.max_steps
  with pytest.raises(ValueError, match="unknown config variant 'huge'"):
    mod.get_config("minilm,huge")


def test_duma_variant_combines_with_bf16():
  import importlib
  c = importlib.import_module("configs.dream").get_config("duma,bf16")
  assert c.model.head == "duma" and c.optim.warmup_steps == 100 and c.model.dtype == "bfloat16"


def test_combined_variant_and_section_override_on_the_command_line(tmp_path):
  r = _main("--config=configs/squad2.py:tiny,bf16", f"--workdir={tmp_path}",
            "--config.model.coattention.turns=2")
  assert r.returncode == 0, r.stderr
  logged = json.loads((tmp_path / "config.json").read_text())
  assert logged["model"]["dtype"] == "bfloat16" and logged["model"]["coattention"]["turns"] == 2
  r = _main("--config=configs/squad2.py:tiny", f"--workdir={tmp_path}",
            "--config.model.coattention.turnz=2")
  assert r.returncode != 0 and "did you mean 'turns'" in r.stderr


@pytest.mark.parametrize("config,head", [("configs/nq.py:tiny", "head: graph (1 graph layer,"),
                                         ("configs/newsqa.py:tiny", "head: qopn (2 ")])
def test_each_task_describes_its_own_head(tmp_path, config, head):
  r = _main(f"--config={config}", f"--workdir={tmp_path}")
  assert r.returncode == 0, r.stderr
  assert head in r.stdout and "parameters over the encoder" in r.stdout


def test_squad2_tiny_evaluates_on_passages_it_did_not_train_on():
  _check_tiny_variant_split("squad2", "read_squad")


def test_race_tiny_evaluates_on_passages_it_did_not_train_on(data_dir):
  del data_dir  # research-only data: the variant reads $POI_JAX_DATA
  _check_tiny_variant_split("race", "read_race")


def _check_tiny_variant_split(task, read):
  import importlib
  from poi_jax import tasks
  from poi_jax.data import readers
  c = importlib.import_module(f"configs.{task}").get_config("tiny")
  load = getattr(readers, read)
  train = tasks.cap(list(load(c.data.train_file)), c.data.max_train_examples)
  evaluation = tasks.cap(list(load(c.data.eval_file)), c.data.max_eval_examples,
                         c.data.skip_eval_examples)
  text = (lambda r: r.context) if task == "squad2" else (lambda r: r.passage)
  assert len(evaluation) == c.data.max_eval_examples
  assert not {text(r) for r in train} & {text(r) for r in evaluation}
  assert not {r.qid for r in train} & {r.qid for r in evaluation}


# Issue 38 item 6: the config files import only poi_jax (their shared builders are
# `poi_jax.config`), so they load from any working directory, from a plain install, and as a copy
# a user edits elsewhere: never through the repository root on sys.path.
CONFIGS = ROOT / "configs"
_LOAD = r"""
import importlib.util, sys
from absl import flags
from ml_collections import config_flags
import poi_jax
# Neither the repository nor its configs/ package is importable here: as after a non-editable
# install, with the working directory elsewhere.
assert importlib.util.find_spec("configs") is None, "the repository is on sys.path"
for arg in sys.argv[1:]:
  fv = flags.FlagValues()  # main.py's --config, as main.py defines it
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv, lock_config=True)
  fv(["main", f"--config={arg}"])
  c = fv.config
  print(arg, c.task, c.train.epochs, c.train.max_steps, c.model.init_from or "-")
print("poi_jax from", poi_jax.__file__)
"""


def _elsewhere(tmp_path, *args, module=None):
  """Runs ``python -c _LOAD args`` (or ``python -m module args``) in ``tmp_path`` with a sys.path
  that holds poi_jax (a link to this checkout's package) and not the repository root."""
  import os
  site = tmp_path / "site"
  site.mkdir(exist_ok=True)
  if not (site / "poi_jax").exists():
    (site / "poi_jax").symlink_to(ROOT / "poi_jax", target_is_directory=True)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  env["PYTHONPATH"] = str(site)
  argv = ["-m", module] if module else ["-c", _LOAD]
  return subprocess.run([sys.executable, *argv, *args], capture_output=True, text=True,
                        timeout=300, cwd=tmp_path, env=env)


def test_every_config_file_loads_from_another_directory(tmp_path):
  files = sorted(p for p in CONFIGS.glob("*.py") if p.name != "__init__.py")
  r = _elsewhere(tmp_path, *(f"{p}:tiny" for p in files))
  assert r.returncode == 0, r.stderr[-3000:]
  loaded = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines()[:-1]}
  assert loaded == {f"{p}:tiny": p.stem for p in files}  # each file's own task
  assert f"poi_jax from {tmp_path / 'site' / 'poi_jax'}" in r.stdout  # not an installed copy


def test_main_runs_a_config_by_absolute_path_from_another_directory(tmp_path):
  r = _elsewhere(tmp_path, f"--config={CONFIGS / 'squad2.py'}:tiny",
                 f"--workdir={tmp_path / 'run'}", "--mode=describe", module="poi_jax.main")
  assert r.returncode == 0, r.stderr[-3000:]
  assert r.stdout.startswith("squad2: random albert + poi") and "parameters:" in r.stdout
  assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["max_steps"] == 20


def test_a_copied_and_edited_config_file_loads(tmp_path):
  text = (CONFIGS / "squad2.py").read_text()
  assert text.count("c.train.epochs = 2.0") == 1
  mine = tmp_path / "my_squad2.py"
  mine.write_text(text.replace("c.train.epochs = 2.0", "c.train.epochs = 3.5"))
  r = _elsewhere(tmp_path, f"{mine}:tiny", f"{mine}", "my_squad2.py:minilm")
  assert r.returncode == 0, r.stderr[-3000:]
  assert r.stdout.splitlines()[:3] == [
      f"{mine}:tiny squad2 3.5 20 -",  # the edit, with the tiny variant applied after it
      f"{mine} squad2 3.5 -1 albert/albert-xxlarge-v2",
      "my_squad2.py:minilm squad2 3.5 -1 minilm"]  # relative to the working directory
