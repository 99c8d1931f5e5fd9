"""`offsets` vs `original` POS alignment: the disagreement measure and the `original` features."""
import numpy as np
import pytest
import transformers

from poi_jax.data import pos
from poi_jax.data.features.extractive import build_extractive_features
from poi_jax.data.features.pos_tags import offset_word_indices
from poi_jax.data.pos_agreement import CAUSES, compare_sequence, squad_agreement
from poi_jax.data.readers import read_squad


# all-MiniLM-L6-v2's real vocabulary (minilm_dir: tests/conftest.py); under CI=true a skip for
# the lack of it fails the run.
pytestmark = pytest.mark.required


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
  return transformers.AutoTokenizer.from_pretrained(minilm_dir)


def test_a_short_subtoken_inside_the_current_word_stalls_the_original(tokenizer):
  text = "What is France a region of?"
  tags = pos.tag_words(text, lowercase=True)
  assert [w for w, _ in tags] == ["what", "is", "france", "a", "region", "of", "?"]
  toks = tokenizer.tokenize(text)
  assert toks == ["what", "is", "france", "a", "region", "of", "?"]
  # By hand: "a" is a substring of "france", so the released rule never leaves "france".
  assert pos.align_original_indices(toks, tags) == [0, 1, 2, 2, 2, 2, 2]
  enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
  assert offset_word_indices(text, enc["offset_mapping"], tags) == [0, 1, 2, 3, 4, 5, 6]
  res = compare_sequence(text, tokenizer)
  expected = sum(pos.tag_id(tags[2][1]) != pos.tag_id(t) for _, t in tags[3:])
  assert expected >= 2  # "a" (DT) and "?" (38) differ from "france" whatever its noun tag
  assert res.subtokens == 7 and res.disagree == expected
  assert dict(res.by_cause) == {"in_current_word": expected}


def test_a_rewritten_quote_stalls_the_original_for_good(tokenizer):
  text = 'He said "hello" to me.'
  tags = pos.tag_words(text, lowercase=True)
  assert [w for w, _ in tags] == ["he", "said", "``", "hello", "''", "to", "me", "."]
  toks = tokenizer.tokenize(text)
  assert toks == ["he", "said", '"', "hello", '"', "to", "me", "."]
  assert pos.align_original_indices(toks, tags) == [0, 1, 1, 1, 1, 1, 1, 1]
  res = compare_sequence(text, tokenizer)
  assert set(res.by_cause) == {"quote"} and res.disagree >= 4


def test_squad_agreement_runs_and_adds_up(tokenizer, squad_file):
  examples = list(read_squad(squad_file))[:40]
  res = squad_agreement(examples, tokenizer)
  assert res["question"].sequences == 40
  assert res["context"].sequences == len({e.context for e in examples})
  total = res["all"]
  assert total.subtokens == res["question"].subtokens + res["context"].subtokens
  assert 0 < total.disagree < total.subtokens
  assert sum(total.by_cause.values()) == total.disagree
  assert set(total.by_cause) <= set(CAUSES)
  assert "in_current_word" in total.table()


def test_original_features_cut_the_whole_sequence_tags_into_windows(tokenizer, squad_file):
  examples = list(read_squad(squad_file))[:25]
  f = build_extractive_features(examples, tokenizer, max_seq_length=64, doc_stride=24,
                                max_query_length=16, is_training=False, with_pos=True,
                                pos_alignment="original", pos_lowercase=True)
  a, offsets = f.arrays, f.meta["offsets"]
  assert len(a["input_ids"]) > 2 * len(examples)  # several windows per context
  past_end = set()
  for r in range(len(a["input_ids"])):
    ex = examples[a["example_index"][r]]
    full = tokenizer(ex.context, add_special_tokens=False, return_offsets_mapping=True)
    # the released pipeline (lowercased tags); no context here runs past its end
    want = pos.align_original(tokenizer.convert_ids_to_tokens(full["input_ids"]),
                              pos.tag_words(ex.context, lowercase=True))
    by_offset = {tuple(o): t for o, t in zip(full["offset_mapping"], want)}
    for i in np.flatnonzero(offsets[r, :, 0] >= 0):
      assert a["pos_tags"][r, i] == by_offset[tuple(offsets[r, i])]
    q_toks = tokenizer.convert_ids_to_tokens(list(a["input_ids"][r, 1:a["con_start"][r]]))
    q_tags = pos.tag_words(ex.question, lowercase=True)
    try:
      q_want = pos.align_original(q_toks, q_tags)
    except IndexError:
      past_end.add(f"{ex.qid}:question")
      q_want = pos.align_original(q_toks, q_tags, strict=False)
    assert list(a["pos_tags"][r, 1:a["con_start"][r]]) == q_want
  assert set(f.meta["pos_original_past_end"]) == past_end and past_end  # "...the Normans"


def test_where_the_original_would_fail_the_features_report_it(tokenizer):
  from poi_jax.data.records import SquadExample
  ex = SquadExample("q-normans", "What religion were the Normans", "The Normans were Catholic.",
                    [], True, [], "", "mem")
  # "##s" is not in the last word "normans": the released code fails here.
  tags = pos.tag_words(ex.question, lowercase=True)
  with pytest.raises(IndexError):
    pos.align_original(tokenizer.tokenize(ex.question), tags)
  f = build_extractive_features([ex], tokenizer, max_seq_length=32, doc_stride=8,
                                max_query_length=16, is_training=False, with_pos=True,
                                pos_alignment="original", pos_lowercase=True)
  assert f.meta["pos_original_past_end"] == ["q-normans:question"]
  tags = dict(tags)
  # "norman" "##s" both keep the last word's tag.
  assert list(f.arrays["pos_tags"][0, 5:7]) == [pos.tag_id(tags["normans"])] * 2
