"""A user's first hour (issue 26): the repository alone holds what its tests and quickstarts read,
stays small, and a variant's data caps stay with the variant's own files."""
import ast
import gzip
import json
import lzma
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from configs import squad1 as squad1_config
from configs import squad2 as squad2_config
from poi_jax import sample_data, tasks
from poi_jax.data.json_stream import load_json
from poi_jax.data.readers import read_squad
from poi_jax.data.records import DataError
from poi_jax.train import config_checks
from tests import conftest
from tests.conftest import PARITY, ROOT, SQUAD

# GPU runs carry the working tree plus ~56 MiB of packed weights, wheels and data under a 64 MiB
# limit (issue 26), so the tracked files must stay under this.
TRACKED_BUDGET = 8 * 2**20


def _git(*args) -> str:
  return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                        check=True).stdout


def test_tracked_files_stay_under_the_size_budget():
  if not (ROOT / ".git").exists():
    pytest.skip(f"{ROOT} is not a git checkout: no tracked files to measure")
  files = [f for f in _git("ls-files", "-z").split("\0") if f]
  sizes = {f: os.path.getsize(ROOT / f) for f in files if (ROOT / f).is_file()}
  total = sum(sizes.values())
  largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
  assert total < TRACKED_BUDGET, (f"tracked files hold {total / 2**20:.2f} MiB, over the "
                                  f"{TRACKED_BUDGET / 2**20:.0f} MiB budget; largest: {largest}")
  # What moved in is counted (a budget test that measures nothing cannot fail).
  assert "poi_jax/sample_data/squad2-dev-subset.json.xz" in sizes
  assert "tests/fixtures/parity/nq_graph_encoder.public.safetensors.xz" in sizes


def test_every_public_parity_fixture_is_in_the_repository():
  names = {conftest.fixture_id(p) for p in PARITY.iterdir() if p.name != "SPEC.md"}
  assert {"dassa_attention.public", "duma_coattention.public", "nq_graph_encoder.public",
          "poi_coattention_edge.public", "poi_coattention_released.public",
          "poi_pos_alignment.json"} == names
  assert (PARITY / "SPEC.md").read_text().startswith("# Golden numerical fixtures")
  for prefix in ("dassa_attention", "duma_coattention", "nq_graph_encoder", "poi_coattention_"):
    found = conftest.parity_fixtures(prefix)
    assert any(p.parent == PARITY and conftest.fixture_id(p).endswith(".public") for p in found)


def test_a_compressed_fixture_reads_as_the_raw_one(tmp_path):
  from safetensors.numpy import load_file
  xz = PARITY / "nq_graph_encoder.public.safetensors.xz"
  raw = tmp_path / "nq_graph_encoder.public.safetensors"
  raw.write_bytes(lzma.decompress(xz.read_bytes()))
  want, got = load_file(raw), conftest.load_fixture(xz)
  assert sorted(want) == sorted(got) and len(got) > 10
  assert all((want[k] == got[k]).all() for k in want)
  assert conftest.fixture_id(xz) == conftest.fixture_id(raw) == "nq_graph_encoder.public"


def test_extra_fixtures_are_found_and_the_repositorys_copy_wins(tmp_path, monkeypatch):
  """Holdout fixtures of the same format dropped in $POI_JAX_PARITY run too; a name the
  repository holds is read from the repository."""
  extra = tmp_path / "parity"
  extra.mkdir()
  shutil.copy(PARITY / "duma_coattention.public.safetensors",
              extra / "duma_coattention.holdout.safetensors")
  shutil.copy(PARITY / "duma_coattention.public.safetensors", extra)
  monkeypatch.setattr(conftest, "EXTRA_PARITY", extra)
  found = conftest.parity_fixtures("duma_coattention")
  assert [(conftest.fixture_id(p), p.parent) for p in found] == [
      ("duma_coattention.holdout", extra), ("duma_coattention.public", PARITY)]


def test_the_squad_sample_is_package_data_with_its_licence():
  assert pathlib.Path(sample_data.SQUAD2_SUBSET) == SQUAD and SQUAD.is_file()
  notice = pathlib.Path(sample_data.path("NOTICE")).read_text()
  assert "CC BY-SA 4.0" in notice and "Rajpurkar" in notice
  # setup.py ships both files (a plain, non-editable install has them).
  tree = ast.parse((ROOT / "setup.py").read_text())
  call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
              and getattr(n.func, "id", "") == "setup")
  package_data = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "package_data"))
  assert set(package_data["poi_jax.sample_data"]) == {SQUAD.name, "NOTICE"}
  records = list(read_squad(SQUAD))
  per_article = [(t, n) for t, n, _ in sample_data.SQUAD2_ARTICLES]
  assert len(records) == sum(n for _, n in per_article) == 4449
  assert sum(not r.is_impossible for r in records) == sum(
      a for _, _, a in sample_data.SQUAD2_ARTICLES) == 2107
  titles = [r.title for r in records]
  assert [(t, titles.count(t)) for t in dict.fromkeys(titles)] == per_article


@pytest.mark.parametrize("suffix,compress", [(".xz", lzma.compress), (".gz", gzip.compress)])
def test_compressed_json_reads_as_written_and_corruption_names_the_file(tmp_path, suffix,
                                                                       compress):
  obj = {"version": "v2.0", "data": [{"title": "é", "paragraphs": []}]}
  good = tmp_path / f"good.json{suffix}"
  good.write_bytes(compress(json.dumps(obj).encode()))
  assert load_json(str(good)) == obj
  bad = tmp_path / f"bad.json{suffix}"
  bad.write_bytes(b"not compressed")
  with pytest.raises(DataError, match=rf"bad\.json\{suffix}.*cannot (read|decompress) it"):
    load_json(str(bad))
  cut = tmp_path / f"cut.json{suffix}"
  cut.write_bytes(compress(json.dumps(obj).encode())[:-8])
  with pytest.raises(DataError, match=r"cut\.json"):
    load_json(str(cut))


# ---- a variant's caps stay with its own files -----------------------------------------------

def test_caps_are_lifted_when_the_files_change_and_kept_when_given():
  c = squad2_config.get_config("tiny")
  assert (c.data.max_train_examples, c.data.max_eval_examples,
          c.data.skip_eval_examples) == (160, 80, 208)
  assert config_checks.lift_variant_caps(c) == []  # its own file: kept
  assert c.data.skip_eval_examples == 208
  c.data.eval_file = "/data/other.json"
  notes = config_checks.lift_variant_caps(c, {"data.eval_file": "/data/other.json",
                                              "data.max_eval_examples": 80})
  assert (c.data.max_train_examples, c.data.max_eval_examples,
          c.data.skip_eval_examples) == (160, 80, 0)
  assert notes == [
      f"eval data /data/other.json is not the file the config's variant capped "
      f"({SQUAD}): data.skip_eval_examples=208 lifted to 0; to keep it, pass "
      f"--config.data.skip_eval_examples=208"]


def test_predict_mode_lifts_the_eval_caps_for_another_predict_file():
  c = squad2_config.get_config("tiny")
  c.data.predict_file = "/data/questions.json"
  assert config_checks.lift_variant_caps(c, mode="eval") == []
  notes = config_checks.lift_variant_caps(c, mode="predict")
  assert len(notes) == 1 and notes[0].startswith("eval data /data/questions.json")
  assert (c.data.max_eval_examples, c.data.skip_eval_examples) == (-1, 0)
  assert c.data.max_train_examples == 160


def test_the_same_file_by_another_name_keeps_the_caps(tmp_path):
  link = tmp_path / "sample.json.xz"
  link.symlink_to(SQUAD)
  c = squad2_config.get_config("tiny")
  c.data.train_file = c.data.eval_file = str(link)
  assert config_checks.lift_variant_caps(c) == []
  assert c.data.skip_eval_examples == 208


def test_the_run_says_it_and_records_it_before_any_compute(tmp_path):
  """The issue's case: after the tiny quickstart, another eval file with max_eval_examples=-1
  is scored whole (describe mode: the line comes before data is read or anything compiles)."""
  other = tmp_path / "other.json"
  other.write_text(json.dumps({"version": "v2.0", "data": []}))
  r = subprocess.run(
      [sys.executable, "-m", "poi_jax.main", "--config=configs/squad2.py:tiny",
       f"--workdir={tmp_path / 'w'}", f"--config.data.eval_file={other}",
       "--config.data.max_eval_examples=-1"],
      capture_output=True, text=True, timeout=300, cwd=ROOT,
      env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.splitlines()[0].startswith(f"eval data {other} is not the file")
  assert "data.skip_eval_examples=208 lifted to 0" in r.stdout
  data = json.loads((tmp_path / "w" / "config.json").read_text())["data"]
  assert (data["skip_eval_examples"], data["max_eval_examples"], data["max_train_examples"]) \
      == (0, -1, 160)


# ---- the CPU quickstart's data --------------------------------------------------------------

def test_minilm_cpu_trains_and_scores_answerable_questions_of_different_articles():
  c = squad1_config.get_config("minilm_cpu")
  task = tasks.get_task(c.task)
  train = tasks.cap(task.read(c, "train"), c.data.max_train_examples)
  evaluation = tasks.cap(task.read(c, "eval"), c.data.max_eval_examples,
                         c.data.skip_eval_examples)
  assert (len(train), len(evaluation)) == (1506, 601)
  assert all(not r.is_impossible and r.answers for r in train + evaluation)
  first_9 = [t for t, _, _ in sample_data.SQUAD2_ARTICLES[:9]]
  assert {r.title for r in train} == set(first_9)
  assert not {r.title for r in train} & {r.title for r in evaluation}
  assert not {r.context for r in train} & {r.context for r in evaluation}


def test_answerable_only_is_off_by_default():
  c = squad2_config.get_config("tiny")
  assert not c.data.answerable_only
  records = tasks.get_task("squad2").read(c, "eval")
  assert sum(r.is_impossible for r in records) == 2342
