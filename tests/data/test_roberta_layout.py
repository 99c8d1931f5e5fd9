"""Extractive and multiple-choice features with a RoBERTa-style byte-level BPE fast tokenizer
(``<s> Q </s></s> C </s>``), built offline: a tiny BPE trained on a few SQuAD contexts."""
import json

import numpy as np
import pytest
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from poi_jax.data import pos
from poi_jax.data.features.extractive import build_extractive_features
from poi_jax.data.features.multiple_choice import build_choice_features
from poi_jax.data.json_stream import load_json
from poi_jax.data.readers import read_dream, read_squad
from poi_jax.eval.spans import decode_squad
from poi_jax.eval.squad import squad_v2_evaluate
from poi_jax.tasks.squad import restrict

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _roberta_tokenizer(texts, trim_offsets: bool):
  tok = Tokenizer(models.BPE(unk_token=None))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=trim_offsets)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(texts, trainers.BpeTrainer(
      vocab_size=700, special_tokens=SPECIALS,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
  tok.post_processor = processors.RobertaProcessing(
      ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
      trim_offsets=trim_offsets, add_prefix_space=False)
  cls = getattr(transformers, "RobertaTokenizerFast", transformers.RobertaTokenizer)
  return cls(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
             cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
             trim_offsets=trim_offsets, add_prefix_space=False)


@pytest.fixture(scope="module")
def squad(squad_file):
  path = squad_file
  return list(read_squad(path)), load_json(str(path))["data"]


@pytest.fixture(scope="module", params=[True, False], ids=["trim_offsets", "untrimmed_offsets"])
def tokenizer(request, squad):
  texts = sorted({e.context for e in squad[0][:300]}) + [e.question for e in squad[0][:300]]
  tok = _roberta_tokenizer(texts, trim_offsets=request.param)
  # Untrimmed: the offsets of "Ġcat" include the space before it (the features must trim it).
  enc = tok("a cat", add_special_tokens=False, return_offsets_mapping=True)
  i = [t.startswith("Ġ") for t in tok.convert_ids_to_tokens(enc["input_ids"])].index(True)
  assert enc["offset_mapping"][i][0] == (2 if request.param else 1)
  return tok


def test_extractive_roberta_layout_boundaries_and_labels(tokenizer, squad):
  examples = [e for e in squad[0][:120]]
  f = build_extractive_features(examples, tokenizer, max_seq_length=96, doc_stride=32,
                                max_query_length=20, is_training=False, with_pos=True)
  a, offsets = f.arrays, f.meta["offsets"]
  bos, eos, pad = (tokenizer.convert_tokens_to_ids(t) for t in ("<s>", "</s>", "<pad>"))
  rows = np.arange(len(a["input_ids"]))
  ids = a["input_ids"]
  assert (ids[:, 0] == bos).all()
  # <s> Q </s></s> C </s>: con_start is the first of the two separators.
  assert (ids[rows, a["con_start"]] == eos).all() and (ids[rows, a["con_start"] + 1] == eos).all()
  assert (ids[rows, a["con_end"]] == eos).all()
  assert ((ids == pad) == (a["attention_mask"] == 0)).all()
  assert (a["token_type_ids"] == 0).all()  # RoBERTa has a single token type
  for r in rows[:200]:
    ex = examples[a["example_index"][r]]
    q_ids = tokenizer(ex.question, add_special_tokens=False)["input_ids"][:20]
    assert a["con_start"][r] == 1 + len(q_ids)
    assert list(ids[r, 1:a["con_start"][r]]) == q_ids
    ctx = np.flatnonzero(offsets[r, :, 0] >= 0)
    assert ctx[0] == a["con_start"][r] + 2 and ctx[-1] == a["con_end"][r] - 1
    for i in ctx:  # each context token's offsets give its own text, without the space
      s, e = offsets[r, i]
      piece = tokenizer.decode([int(ids[r, i])])
      if "\ufffd" not in piece:  # a byte of a multi-byte character decodes alone to U+FFFD
        assert ex.context[s:e] == piece.strip(), (piece, ex.context[s:e])
      assert ex.context[s:e] == ex.context[s:e].strip()
    # Labels: the minimal token span covering the gold answer, or <s> (0).
    st, en = a["start_positions"][r], a["end_positions"][r]
    if ex.is_impossible:
      assert st == en == 0
    elif st or en:
      ans = ex.answers[0]
      a0, a1 = ans["answer_start"], ans["answer_start"] + len(ans["text"])
      assert offsets[r, st, 0] <= a0 < offsets[r, st, 1]
      assert offsets[r, en, 0] < a1 <= offsets[r, en, 1]
    else:  # outside this window
      ans = ex.answers[0]
      inside = ((offsets[r, ctx, 0] <= ans["answer_start"]).any() and
                (offsets[r, ctx, 1] >= ans["answer_start"] + len(ans["text"])).any())
      assert not (inside and offsets[r, ctx[0], 0] <= ans["answer_start"] and
                  ans["answer_start"] + len(ans["text"]) <= offsets[r, ctx[-1], 1])
  # POS: special tokens 37 (both separators), padding 0, and a word token never gets 38 only
  # because its offsets start at the space before it.
  tags = a["pos_tags"]
  assert (tags[rows, a["con_start"]] == pos.SPECIAL_ID).all()
  assert (tags[rows, a["con_start"] + 1] == pos.SPECIAL_ID).all()
  assert ((tags == 0) == (a["attention_mask"] == 0)).all()
  word_tokens = [(r, i) for r in rows[:50] for i in np.flatnonzero(offsets[r, :, 0] >= 0)
                 if tokenizer.convert_ids_to_tokens(int(ids[r, i])).lstrip("Ġ").isalpha()
                 and tokenizer.convert_ids_to_tokens(int(ids[r, i])).startswith("Ġ")]
  assert word_tokens and all(tags[r, i] != pos.OTHER_ID for r, i in word_tokens)


def test_roberta_gold_logits_decode_to_em_100(tokenizer, squad):
  """Offsets back to the text are exact: gold start/end decode to the gold answers. The BPE's
  pre-tokeniser splits letters from digits/punctuation, so SQuAD answers fall on token
  boundaries here."""
  examples, dataset = squad
  examples = examples[:300]
  f = build_extractive_features(examples, tokenizer, max_seq_length=128, doc_stride=48,
                                max_query_length=32, is_training=False, with_pos=False)
  n, length = f.arrays["input_ids"].shape
  s, e = np.zeros((n, length)), np.zeros((n, length))
  s[np.arange(n), f.arrays["start_positions"]] = 20.0
  e[np.arange(n), f.arrays["end_positions"]] = 20.0
  preds, _, _ = decode_squad(examples, f, s, e, max_answer_length=200)
  result = squad_v2_evaluate(restrict(dataset, {x.qid for x in examples}), preds, na_probs=None)
  assert result["total"] == 300
  assert result["exact"] == 100.0 and result["f1"] == 100.0


def test_choice_roberta_layout(tokenizer, data_dir):
  records = list(read_dream(data_dir / "dream" / "dev.json"))[:10]
  f = build_choice_features(records, tokenizer, max_seq_length=80, with_pos=True)
  a = f.arrays
  eos = tokenizer.convert_tokens_to_ids("</s>")
  take = lambda k, d=0: np.take_along_axis(a["input_ids"], (a[k] + d)[..., None], -1)[..., 0]
  assert (a["input_ids"][..., 0] == tokenizer.convert_tokens_to_ids("<s>")).all()
  assert (take("con_start") == eos).all() and (take("con_start", 1) == eos).all()
  assert (a["p_end"] + 1 == a["con_start"]).all()
  assert (a["q_start"] == a["p_end"] + 3).all()  # </s></s> between passage and question
  assert (a["q_end"] + 1 == a["con_end"]).all() and (take("con_end") == eos).all()
  for n, ex in enumerate(records):
    for o, opt in enumerate(ex.options):
      second = a["input_ids"][n, o, a["q_start"][n, o]:a["q_end"][n, o] + 1]
      assert tokenizer.decode(second) == f"{ex.question} {opt}".strip()
      passage = a["input_ids"][n, o, 1:a["p_end"][n, o] + 1]
      assert ex.passage.startswith(tokenizer.decode(passage))  # truncated from the end
  assert (a["pos_tags"][..., 0] == pos.SPECIAL_ID).all()
