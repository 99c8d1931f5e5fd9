"""NQ readers (full + simplified, bad input) and windows (offsets, markers, labels, sampling)."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from poi_jax.data.features import nq_windows
from poi_jax.data.readers import nq as reader
from poi_jax.data.records import DataError
from poi_jax.models import encoders
from tests.conftest import SQUAD as _SQUAD
from tests.data import nq_synthetic
from tests.required_checks import import_or_skip

SQUAD = str(_SQUAD)


@pytest.fixture(scope="module")
def tokenizer():
  return encoders.load.load_tokenizer(encoders.resolve_checkpoint("minilm"))


@pytest.fixture(scope="module")
def pages():
  return nq_synthetic.page_examples(SQUAD, articles=range(0, 2), max_examples=12)


def _write(path, objs, gz=True):
  opener = gzip.open if gz else open
  with opener(path, "wt") as f:
    for o in objs:
      f.write(json.dumps(o) + "\n")
  return str(path)


def _simplified(ex):
  out = {k: v for k, v in ex.items() if k != "document_tokens"}
  out["document_text"] = " ".join(t["token"] for t in ex["document_tokens"])
  strip = lambda s: {k: v for k, v in s.items() if "byte" not in k}
  out["long_answer_candidates"] = [strip(c) for c in ex["long_answer_candidates"]]
  out["annotations"] = [{"long_answer": strip(a["long_answer"]),
                         "short_answers": [strip(s) for s in a["short_answers"]],
                         "yes_no_answer": a["yes_no_answer"]} for a in ex["annotations"]]
  return out


def test_full_and_simplified_formats_read_the_same_document(tmp_path, pages):
  full = list(reader.read_nq(_write(tmp_path / "full.jsonl.gz", pages)))
  simple = list(reader.read_nq(_write(tmp_path / "simple.jsonl", [_simplified(p) for p in pages],
                                 gz=False)))
  assert len(full) == len(simple) == len(pages)
  for a, b, raw in zip(full, simple, pages):
    assert a.tokens == b.tokens == [t["token"] for t in raw["document_tokens"]]
    assert a.html == b.html
    assert [(c.start_token, c.end_token, c.tag) for c in a.candidates] == \
        [(c.start_token, c.end_token, c.tag) for c in b.candidates]
    assert a.annotations[0].candidate_index == b.annotations[0].candidate_index
    assert b.token_bytes is None and a.token_bytes[1][0] >= 0
  # a directory of shards
  assert len(list(reader.read_nq(str(tmp_path)))) == 2 * len(pages)


BAD = [
    (lambda e: e.pop("document_tokens"), "document_tokens"),
    (lambda e: e.pop("annotations"), "annotations"),
    (lambda e: e["long_answer_candidates"][0].update(end_token=10 ** 6), "outside the document"),
    (lambda e: e["annotations"][0]["long_answer"].update(candidate_index=99), "candidate 99"),
]


@pytest.mark.parametrize("break_it,needle", BAD)
def test_bad_input_names_file_line_and_example_id(tmp_path, pages, break_it, needle):
  objs = [json.loads(json.dumps(p)) for p in pages[:3]]
  break_it(objs[2])
  path = _write(tmp_path / "bad.jsonl.gz", objs)
  with pytest.raises(DataError) as e:
    list(reader.read_nq(path))
  msg = str(e.value)
  assert f"bad.jsonl.gz:3" in msg and str(objs[2]["example_id"]) in msg and needle in msg


def test_predict_split_needs_no_annotations(tmp_path, pages):
  objs = [{k: v for k, v in p.items() if k != "annotations"} for p in pages[:2]]
  recs = list(reader.read_nq(_write(tmp_path / "q.jsonl.gz", objs), require_answers=False))
  assert [r.annotations for r in recs] == [[], []]


def test_marker_indices():
  assert nq_windows.marker_index("Table", 1) == 0
  assert nq_windows.marker_index("Table", 70) == 49
  assert nq_windows.marker_index("P", 1) == 50
  assert nq_windows.marker_index("P", 80) == 99
  assert nq_windows.marker_index("Ul", 3) == 102
  assert nq_windows.marker_index("Tr", 1) == 150
  assert nq_windows.marker_index("Li", 99) == 199


def test_window_starts_follow_the_stride():
  assert nq_windows.window_starts(10, 20, 4) == [0]
  assert nq_windows.window_starts(100, 40, 30) == [0, 30, 60]
  assert nq_windows.window_starts(41, 40, 128) == [0, 40]


@pytest.mark.parametrize("doc_len,max_doc,step", [(100, 40, 30), (1000, 445, 128), (41, 40, 128),
                                                  (7, 40, 5), (300, 50, 50)])
def test_windows_cover_the_document_and_overlap_by_the_room_minus_the_step(doc_len, max_doc,
                                                                            step):
  """``data.nq.window_step`` is the step between window starts (the original's doc_stride): two
  consecutive windows of ``max_doc`` tokens share ``max_doc - step`` of them (none when the step
  is at least a window), and the windows cover the document."""
  starts = nq_windows.window_starts(doc_len, max_doc, step)
  spans = [(s, min(s + max_doc, doc_len)) for s in starts]
  assert set().union(*(range(a, b) for a, b in spans)) == set(range(doc_len))
  assert spans[-1][1] == doc_len
  for (a0, b0), (a1, _) in zip(spans, spans[1:]):
    assert a1 - a0 == min(step, max_doc)
    assert b0 - a1 == max_doc - min(step, max_doc)


OPTS = dict(max_seq_length=96, window_step=32, max_query_length=16, max_sentences=24,
            max_paragraphs=12, include_unknowns=0.5, seed=3)


@pytest.mark.required
def test_sentences_are_split_by_spacys_sentencizer_as_in_the_original():
  """Without spaCy NQ falls back to NLTK punkt (logged), which the window tests accept: this one
  says which splitter ran, and under CI=true, where spaCy is installed, it must be spaCy's."""
  import_or_skip("spacy", "the [nq] extra, also in [test]: pip install -e '.[nq]'")
  split, name = nq_windows.sentence_splitter()
  assert name == nq_windows.splitter_name() == "spacy-sentencizer"
  assert split("The cat sat. Then it left! Did it? Yes.") == [0, 13, 27, 35]


def test_windows_labels_and_graph(tokenizer, pages, tmp_path):
  recs = list(reader.read_nq(_write(tmp_path / "p.jsonl.gz", pages)))
  f = nq_windows.build_nq_features(recs, tokenizer, is_training=False, **OPTS)
  a, m = f.arrays, f.meta
  assert f.meta["sentence_splitter"] in ("spacy-sentencizer", "nltk-punkt")
  for w in range(len(a["example_index"])):
    ex = recs[a["example_index"][w]]
    ids = tokenizer.convert_ids_to_tokens(a["input_ids"][w])
    n = int(a["attention_mask"][w].sum())
    assert ids[0] == "[CLS]" and ids[n - 1] == "[SEP]"
    q = tokenizer(ex.question, add_special_tokens=False)["input_ids"][-16:]
    assert ids[len(q) + 1] == "[SEP]"
    # every document position maps back to a document token of its candidate
    t2o, tp, pc = m["token_to_orig"][w], m["token_paragraph"][w], m["paragraph_candidate"][w]
    for i in np.flatnonzero(t2o >= 0):
      c = ex.candidates[pc[tp[i]]]
      assert c.start_token <= t2o[i] < c.end_token and not ex.html[t2o[i]]
    # markers [unused5x] start paragraphs
    for i, t in enumerate(ids[:n]):
      if t.startswith("[unused"):
        assert t2o[i] == -1 and tp[i] >= 2
    # graph: tokens, 1 document node, sentence/paragraph nodes, labels
    st = a["st_mask"][w]
    assert st[:96].sum() == n and st[-1] == 1
    t = a["answer_type"][w]
    s, e, l = a["start_positions"][w], a["end_positions"][w], a["paragraph_label"][w]
    if t == nq_windows.SHORT:
      short = ex.annotations[0].short[0]
      assert t2o[s] == short.start_token and t2o[e] == short.end_token - 1
      assert pc[l] == ex.annotations[0].candidate_index
    else:
      assert t == 0 and (s, e, l) == (0, 0, 0)


def test_long_only_windows_ignore_the_short_loss_and_nulls_are_sampled(tokenizer, pages,
                                                                        tmp_path):
  objs = [json.loads(json.dumps(p)) for p in pages]
  for o in objs:
    for ann in o["annotations"]:
      ann["short_answers"] = []
  recs = list(reader.read_nq(_write(tmp_path / "l.jsonl.gz", objs)))
  opts = dict(OPTS, max_seq_length=320, window_step=64)  # windows that hold whole paragraphs
  ev = nq_windows.build_nq_features(recs, tokenizer, is_training=False, **opts)
  long = ev.arrays["answer_type"] == nq_windows.LONG
  assert long.any()
  assert np.all(ev.arrays["start_positions"][long] == -1)
  assert np.all(ev.arrays["end_positions"][long] == -1)
  tr = nq_windows.build_nq_features(recs, tokenizer, is_training=True, **opts)
  nulls_ev = int((ev.arrays["answer_type"] == 0).sum())
  nulls_tr = int((tr.arrays["answer_type"] == 0).sum())
  assert 0 < nulls_tr < nulls_ev  # about half kept (include_unknowns=0.5)
  assert int((tr.arrays["answer_type"] == nq_windows.LONG).sum()) == int(long.sum())
  # seeded per example: chunking (worker processes) gives the same windows
  parts = [nq_windows.build_nq_features(recs[:5], tokenizer, is_training=True, **opts),
           nq_windows.build_nq_features(recs[5:], tokenizer, is_training=True, **opts)]
  merged = nq_windows.merge_nq_features(parts, [0, 5])
  for k in tr.arrays:
    np.testing.assert_array_equal(merged.arrays[k], tr.arrays[k], err_msg=k)
  other = nq_windows.build_nq_features(recs, tokenizer, is_training=True,
                                       **dict(opts, seed=4))
  assert len(other.arrays["answer_type"]) != len(tr.arrays["answer_type"]) or not np.array_equal(
      other.arrays["example_index"], tr.arrays["example_index"])
