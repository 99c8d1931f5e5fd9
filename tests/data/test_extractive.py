"""Extractive features and span decoding on the SQuAD 2.0 subset (MiniLM's WordPiece tokenizer)."""
import json

import numpy as np
import pytest
import transformers

from poi_jax.data import pos
from poi_jax.data.features.extractive import build_extractive_features
from poi_jax.data.json_stream import load_json
from poi_jax.data.readers import read_squad
from poi_jax.eval.spans import decode_squad
from poi_jax.eval.squad import squad_v2_evaluate
from poi_jax.io import write_json_atomic


# all-MiniLM-L6-v2's real vocabulary (minilm_dir: tests/conftest.py); under CI=true a skip for
# the lack of it fails the run.
pytestmark = pytest.mark.required


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
  return transformers.AutoTokenizer.from_pretrained(minilm_dir)


@pytest.fixture(scope="module")
def squad(squad_file):
  path = squad_file
  return list(read_squad(path)), load_json(str(path))["data"]


def test_gold_logits_decode_to_em_f1_100_on_the_whole_subset(tokenizer, squad):
  """Round trip: logits that put all mass on the labelled start/end decode back to the gold
  answers, unanswerable questions included. max_answer_length covers the longest gold span."""
  examples, dataset = squad
  f = build_extractive_features(examples, tokenizer, max_seq_length=128, doc_stride=64,
                                max_query_length=32, is_training=False, with_pos=False)
  n, length = f.arrays["input_ids"].shape
  s, e = np.zeros((n, length)), np.zeros((n, length))
  s[np.arange(n), f.arrays["start_positions"]] = 20.0
  e[np.arange(n), f.arrays["end_positions"]] = 20.0
  preds, nbest, odds = decode_squad(examples, f, s, e, max_answer_length=64)
  result = squad_v2_evaluate(dataset, preds, na_probs=None)
  assert result["total"] == 4449
  assert result["exact"] == 100.0 and result["f1"] == 100.0
  assert result["NoAns_total"] == 2342


def test_window_layout_and_labels(tokenizer, squad):
  examples, _ = squad
  f = build_extractive_features(examples[:40], tokenizer, max_seq_length=96, doc_stride=32,
                                max_query_length=16, is_training=True, with_pos=False)
  a = f.arrays
  sep, cls = tokenizer.sep_token_id, tokenizer.cls_token_id
  rows = np.arange(len(a["input_ids"]))
  assert (a["input_ids"][:, 0] == cls).all()
  assert (a["input_ids"][rows, a["con_start"]] == sep).all()  # first [SEP]
  assert (a["input_ids"][rows, a["con_end"]] == sep).all()  # final [SEP]
  assert (a["con_start"] <= 17).all()  # [CLS] + at most max_query_length question tokens
  assert (a["attention_mask"][rows, a["con_end"]] == 1).all()
  assert ((a["con_end"] + 1 == 96) | (a["attention_mask"][rows, np.minimum(a["con_end"] + 1, 95)]
                                      == 0)).all()
  # Labels lie inside the context domain, or on [CLS].
  for k in ("start_positions", "end_positions"):
    ok = (a[k] == 0) | ((a[k] > a["con_start"]) & (a[k] < a["con_end"]))
    assert ok.all()
  assert len(set(a["example_index"])) == 40 and len(rows) > 40  # several windows per example


def test_doc_stride_is_the_overlap_of_consecutive_windows(tokenizer, squad):
  """``data.doc_stride`` (SQuAD features) = the context tokens two consecutive windows share
  (the HuggingFace tokenizer's ``stride``), not the step of the released code / NQ
  (``data.nq.window_step``); together the windows cover the whole context, in order."""
  examples, _ = squad
  ex = max(examples[:300], key=lambda e: len(e.context))
  stride = 24
  f = build_extractive_features([ex], tokenizer, max_seq_length=96, doc_stride=stride,
                                max_query_length=16, is_training=False, with_pos=False)
  a, offs = f.arrays, f.meta["offsets"]
  windows = [[tuple(offs[r, i]) for i in range(a["con_start"][r] + 1, a["con_end"][r])]
             for r in range(len(a["input_ids"]))]
  assert len(windows) > 3
  for w0, w1 in zip(windows, windows[1:]):
    assert w0[-stride:] == w1[:stride]
    assert w0[-stride - 1] not in w1  # exactly ``stride`` shared, not more
  full = tokenizer(ex.context, add_special_tokens=False, return_offsets_mapping=True)
  covered = windows[0] + [t for w in windows[1:] for t in w[stride:]]
  assert covered == [tuple(o) for o in full["offset_mapping"]]


def test_offset_pos_tags(tokenizer, squad):
  examples, _ = squad
  f = build_extractive_features(examples[:3], tokenizer, max_seq_length=128, doc_stride=64,
                                max_query_length=32, is_training=False, with_pos=True)
  tags = f.arrays["pos_tags"]
  mask = f.arrays["attention_mask"]
  assert ((tags == 0) == (mask == 0)).all()  # 0 exactly on padding
  assert (tags[:, 0] == pos.SPECIAL_ID).all()
  assert tags.max() < pos.NUM_POS_IDS
  ids = f.arrays["input_ids"][0]
  toks = tokenizer.convert_ids_to_tokens(ids)
  # "In what country is Normandy located?": "normandy" is a proper noun or noun, "in" a preposition.
  assert tags[0, toks.index("in")] == pos.POS_TAG_MAP["IN"]


def test_mismatched_answer_text_is_counted(tokenizer, squad):
  ex = [e for e in squad[0] if not e.is_impossible][0]
  import copy
  bad = copy.deepcopy(ex)
  bad.answers[0]["answer_start"] += 1
  f = build_extractive_features([ex, bad], tokenizer, max_seq_length=128, doc_stride=64,
                                max_query_length=32, is_training=True, with_pos=False)
  assert f.meta["skipped_mismatch"] == [bad.qid]
  assert set(f.arrays["example_index"]) == {0}


def test_prediction_files_are_written_atomically(tmp_path, monkeypatch):
  path = tmp_path / "predictions.json"
  write_json_atomic(str(path), {"a": "x"})
  import json as json_lib

  def boom(*a, **k):
    raise RuntimeError("crash mid-write")

  monkeypatch.setattr(json_lib, "dump", boom)
  with pytest.raises(RuntimeError):
    write_json_atomic(str(path), {"a": "y"})
  assert json.loads(path.read_text()) == {"a": "x"}  # the old file is intact
  assert [p.name for p in tmp_path.iterdir()] == ["predictions.json"]


def test_too_short_windows_blame_the_length_not_the_stride(tokenizer):
  from poi_jax.data.features.extractive import check_options
  with pytest.raises(ValueError) as e:
    check_options(tokenizer, max_seq_length=60, doc_stride=128, max_query_length=64)
  assert str(e.value).startswith("data.max_seq_length=60 leaves no room for the context")
  with pytest.raises(ValueError) as e:
    check_options(tokenizer, max_seq_length=100, doc_stride=128, max_query_length=64)
  assert "raise data.max_seq_length or lower data.doc_stride" in str(e.value)
