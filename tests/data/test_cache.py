"""On-disk feature cache: round trip, reuse, corrupt and stale entries rebuilt, atomic writes,
and the wiring into the SQuAD / multiple-choice tasks."""
import copy
import logging
import os

import numpy as np
import pytest
import transformers

from poi_jax.data import cache
from poi_jax.data.features.extractive import build_extractive_features
from poi_jax.data.readers import read_dream, read_squad

OPTS = dict(max_seq_length=64, doc_stride=24, max_query_length=16, is_training=False,
            with_pos=False)


# all-MiniLM-L6-v2's real vocabulary (minilm_dir: tests/conftest.py); under CI=true a skip for
# the lack of it fails the run.
pytestmark = pytest.mark.required


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
  return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def examples(squad_file):
  return read_squad(squad_file)[:12]


class Counter:
  def __init__(self, fn):
    self.fn, self.calls = fn, 0

  def __call__(self):
    self.calls += 1
    return self.fn()


def _equal(a, b):
  assert a.arrays.keys() == b.arrays.keys()
  for k in a.arrays:
    np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    assert a.arrays[k].dtype == b.arrays[k].dtype
  np.testing.assert_array_equal(a.meta["offsets"], b.meta["offsets"])
  assert a.meta["skipped_mismatch"] == b.meta["skipped_mismatch"]


def test_second_call_loads_the_cache_instead_of_building(tmp_path, tokenizer, examples):
  build = Counter(lambda: build_extractive_features(examples, tokenizer, **OPTS))
  first = cache.cached_features(str(tmp_path), "extractive", examples, tokenizer, OPTS, build)
  second = cache.cached_features(str(tmp_path), "extractive", examples, tokenizer, OPTS, build)
  assert build.calls == 1
  _equal(first, build_extractive_features(examples, tokenizer, **OPTS))
  _equal(second, first)
  entries = [p for p in os.listdir(tmp_path)]
  assert len(entries) == 1 and entries[0].startswith("extractive-") and entries[0].endswith(".npz")
  manifest = cache.describe(str(tmp_path / entries[0]))
  assert manifest["format"] == cache.CACHE_FORMAT_VERSION
  assert manifest["description"]["options"] == OPTS


def test_empty_cache_dir_means_no_cache(tmp_path, tokenizer, examples):
  build = Counter(lambda: build_extractive_features(examples, tokenizer, **OPTS))
  cache.cached_features("", "extractive", examples, tokenizer, OPTS, build)
  cache.cached_features("", "extractive", examples, tokenizer, OPTS, build)
  assert build.calls == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip_byte", "empty"])
def test_corrupt_entry_is_logged_and_rebuilt(tmp_path, tokenizer, examples, caplog, damage):
  build = Counter(lambda: build_extractive_features(examples, tokenizer, **OPTS))
  good = cache.cached_features(str(tmp_path), "extractive", examples, tokenizer, OPTS, build)
  (path,) = tmp_path.iterdir()
  raw = path.read_bytes()
  if damage == "truncate":
    path.write_bytes(raw[:len(raw) // 2])
  elif damage == "garbage":
    path.write_bytes(b"not a zip file at all")
  elif damage == "empty":
    path.write_bytes(b"")
  else:  # one byte inside the first array's data: only the zip CRC can tell
    i = raw.index(b"a/input_ids.npy") + 200
    path.write_bytes(raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:])
  with caplog.at_level(logging.WARNING, logger="poi_jax.data.cache"):
    again = cache.cached_features(str(tmp_path), "extractive", examples, tokenizer, OPTS, build)
  assert build.calls == 2
  assert "not usable" in caplog.text and "rebuilding" in caplog.text
  _equal(again, good)
  # The rebuilt entry is valid again.
  cache.cached_features(str(tmp_path), "extractive", examples, tokenizer, OPTS, build)
  assert build.calls == 2


def test_changed_data_makes_the_entry_stale_and_replaces_it(tmp_path, tokenizer, examples,
                                                            caplog):
  build = Counter(lambda: build_extractive_features(examples, tokenizer, **OPTS))
  cache.cached_features(str(tmp_path), "extractive", examples, tokenizer, OPTS, build)
  (path,) = tmp_path.iterdir()
  edited = copy.deepcopy(examples)
  edited[3].question = edited[3].question + " really?"
  build2 = Counter(lambda: build_extractive_features(edited, tokenizer, **OPTS))
  with caplog.at_level(logging.WARNING, logger="poi_jax.data.cache"):
    got = cache.cached_features(str(tmp_path), "extractive", edited, tokenizer, OPTS, build2)
  assert build2.calls == 1 and "stale" in caplog.text
  assert [p.name for p in tmp_path.iterdir()] == [path.name]  # replaced, not piled up
  _equal(got, build_extractive_features(edited, tokenizer, **OPTS))


def test_another_cap_is_another_entry_not_a_stale_one(tmp_path, tokenizer, examples, caplog):
  # Switching max_*_examples back and forth neither warns "stale" nor rebuilds.
  for subset in (examples, examples[:6], examples):
    build = Counter(lambda: build_extractive_features(subset, tokenizer, **OPTS))
    with caplog.at_level(logging.WARNING, logger="poi_jax.data.cache"):
      cache.cached_features(str(tmp_path), "extractive", subset, tokenizer, OPTS, build)
  assert "stale" not in caplog.text and "not usable" not in caplog.text
  assert build.calls == 0  # the third call found the first call's entry
  assert len(list(tmp_path.iterdir())) == 2


def test_every_option_and_the_tokenizer_are_in_the_key(tokenizer, examples):
  base = cache.make_key("extractive", examples, tokenizer, OPTS)
  for name, value in [("max_seq_length", 96), ("doc_stride", 16), ("max_query_length", 8),
                      ("is_training", True), ("with_pos", True)]:
    other = cache.make_key("extractive", examples, tokenizer, dict(OPTS, **{name: value}))
    assert other.slot != base.slot and other.key != base.key, name
  assert cache.make_key("extractive", examples[:5], tokenizer, OPTS).key != base.key
  cased = copy.deepcopy(tokenizer)
  cased.backend_tokenizer.normalizer = None
  assert cache.tokenizer_fingerprint(cased) != cache.tokenizer_fingerprint(tokenizer)
  # The truncation/padding of the last call is call state, not identity.
  before = cache.tokenizer_fingerprint(tokenizer)
  tokenizer("a b c", "d e", truncation="only_second", max_length=7, padding="max_length")
  assert cache.tokenizer_fingerprint(tokenizer) == before


def test_a_crash_while_writing_keeps_the_old_entry(tmp_path, tokenizer, examples, monkeypatch):
  build = lambda: build_extractive_features(examples, tokenizer, **OPTS)
  cache.cached_features(str(tmp_path), "extractive", examples, tokenizer, OPTS, build)
  (path,) = tmp_path.iterdir()
  before = path.read_bytes()

  def boom(*a, **k):
    raise RuntimeError("disk full mid-write")

  monkeypatch.setattr(np, "savez", boom)
  edited = copy.deepcopy(examples)
  edited[0].question = "changed?"
  with pytest.raises(RuntimeError, match="disk full"):
    cache.cached_features(str(tmp_path), "extractive", edited, tokenizer, OPTS,
                          lambda: build_extractive_features(edited, tokenizer, **OPTS))
  assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
  assert path.read_bytes() == before


def test_tasks_featurize_through_the_cache(tmp_path, tokenizer, data_dir, squad_file, monkeypatch):
  from configs import dream, squad2
  from poi_jax.data import parallel
  from poi_jax.tasks import choice as choice_task
  from poi_jax.tasks import squad as squad_task
  c = squad2.get_config("tiny")
  c.unlock()
  c.data.cache_dir = str(tmp_path / "squad")
  c.data.num_workers = 0
  c.data.max_seq_length, c.data.doc_stride, c.data.max_query_length = 64, 24, 16
  examples = read_squad(squad_file)[:8]
  first = squad_task.featurize(examples, tokenizer, c, is_training=True)
  d = dream.get_config("tiny")
  d.unlock()
  d.data.cache_dir = str(tmp_path / "dream")
  d.data.num_workers = 0
  d.data.max_seq_length = 64
  records = read_dream(data_dir / "dream" / "dev.json")[:6]
  first_mc = choice_task.featurize(records, tokenizer, d, is_training=False)

  def no_build(*a, **k):
    raise AssertionError("features rebuilt although cached")

  monkeypatch.setattr(parallel, "featurize", no_build)
  _equal(squad_task.featurize(examples, tokenizer, c, is_training=True), first)
  again = choice_task.featurize(records, tokenizer, d, is_training=False)
  for k in first_mc.arrays:
    np.testing.assert_array_equal(again.arrays[k], first_mc.arrays[k])
  assert again.meta["ids"] == first_mc.meta["ids"]
  assert first.arrays["pos_tags"].any()  # tiny configs tag (pos_embedding on)
