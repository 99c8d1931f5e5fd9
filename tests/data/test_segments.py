"""QOPN segmenter: exact reconstruction, encoder fit, offsets, answers across segment boundaries,
truncation counts and bad input; BERT WordPiece and a RoBERTa-style byte-level BPE template."""
import numpy as np
import pytest
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from poi_jax.data.features import segments
from poi_jax.data.readers.newsqa import read_newsqa
from poi_jax.data.records import DataError, SquadExample
from poi_jax.eval import squad
from poi_jax.models import encoders
from poi_jax.models.qopn import decode_spans
from tests.data import qopn_fixtures


def _roberta_tokenizer(texts):
  """A tiny byte-level BPE with RoBERTa's template and untrimmed offsets (built offline)."""
  specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
  tok = Tokenizer(models.BPE(unk_token=None))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(texts, trainers.BpeTrainer(
      vocab_size=600, special_tokens=specials,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
  tok.post_processor = processors.RobertaProcessing(
      ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")), trim_offsets=False,
      add_prefix_space=False)
  cls = getattr(transformers, "RobertaTokenizerFast", transformers.RobertaTokenizer)
  return cls(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
             cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
             trim_offsets=False, add_prefix_space=False)


@pytest.fixture(scope="module")
def articles(squad_file):
  return qopn_fixtures.long_articles(squad_file,
                                     paragraphs_per_article=4, articles=(0, 2))


@pytest.fixture(scope="module")
def examples(articles, tmp_path_factory):
  path = tmp_path_factory.mktemp("newsqa") / "newsqa.json"
  return list(read_newsqa(str(qopn_fixtures.write_newsqa(path, articles)), "train"))


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tokenizer(request, articles):
  if request.param == "bert":
    return encoders.load.load_tokenizer(encoders.resolve_checkpoint("minilm"))
  return _roberta_tokenizer([t for _, t, _ in articles])


def _build(examples, tokenizer, **kw):
  opts = dict(max_seq_length=96, max_query_length=24, max_segments=6, is_training=False)
  opts.update(kw)
  return segments.build_segment_features(examples, tokenizer, **opts)


def test_template_is_read_from_the_tokenizer(tokenizer):
  t = segments.template(tokenizer)
  if "Roberta" in type(tokenizer).__name__:
    s, e = tokenizer.convert_tokens_to_ids(["<s>", "</s>"])
    assert (t.prefix, t.between, t.suffix) == ((s,), (e, e), (e,))
  else:
    assert (t.prefix, t.between, t.suffix) == ((101,), (102,), (102,))
    assert t.types == (0, 0, 0, 1, 1)


def test_segments_rebuild_the_article_and_fit_the_encoder(examples, tokenizer):
  f = _build(examples[:60], tokenizer, max_segments=50)  # no truncation here
  a, meta = f.arrays, f.meta
  n, k_max, length = a["input_ids"].shape
  assert meta["truncated_articles"] == 0
  for r in range(n):
    ex = examples[int(a["example_index"][r])]
    chars = meta["segment_chars"][r]
    assert "".join(ex.context[s:e] for s, e in chars) == ex.context
    ids, offsets = segments.tokenize_article(tokenizer, ex.context)
    k = int(a["segment_mask"][r].sum())
    assert k == len(chars) and a["segment_mask"][r, :k].all() and not a["segment_mask"][r, k:].any()
    span = a["span_mask"][r].reshape(-1) > 0
    # the segments' own tokens, in order, are the article's tokens: no overlap, no gap
    np.testing.assert_array_equal(a["input_ids"][r].reshape(-1)[span], ids)
    np.testing.assert_array_equal(meta["token_index"][r][span], np.arange(len(ids)))
    np.testing.assert_array_equal(meta["offsets"][r][span], offsets)
    assert (meta["token_index"][r][~span] == -1).all()
    qr = int(a["question_rows"][r])
    for kk in range(k):
      real = int(a["attention_mask"][r, kk].sum())
      assert real <= length
      assert (a["input_ids"][r, kk, :qr] == a["input_ids"][r, 0, :qr]).all()  # same question
      decoded = tokenizer.decode(a["input_ids"][r, kk, :real])
      assert decoded.count(tokenizer.sep_token) == (3 if "Roberta" in type(tokenizer).__name__
                                                     else 2)
    # token -> chars -> tokens -> chars: the same characters (byte-level BPE may split one
    # character over several tokens that share its offsets, so the token span can be wider)
    for t in range(0, len(ids), 7):
      s, e = offsets[t]
      if e > s:
        s0, e0 = segments.char_span_to_tokens(offsets, s, e)
        assert s0 <= t <= e0 and (offsets[s0][0], offsets[e0][1]) == (s, e)


def test_gold_labels_decode_to_the_answers(examples, tokenizer):
  f = _build(examples[:120], tokenizer, max_segments=50)
  a = f.arrays
  n, k, length = a["input_ids"].shape
  start = np.full((n, k * length), -1e4, np.float32)
  end = np.full((n, k * length), -1e4, np.float32)
  labelled = a["start_positions"] >= 0
  assert labelled.all()
  start[np.arange(n), a["start_positions"]] = 10
  end[np.arange(n), a["end_positions"]] = 10
  out = decode_spans(start, end, f.meta["token_index"], f.meta["offsets"], f.meta["contexts"],
                     max_answer_length=k * length)
  em = [squad.exact_score(examples[int(i)].answers[0]["text"], text)
        for i, (text, *_r) in zip(a["example_index"], out)]
  assert np.mean(em) == 1.0


def _boundary_example(tokenizer, text, length=64):
  """A question whose answer starts 2 tokens before the end of segment 0 and ends 2 tokens into
  segment 1."""
  q = "Which words cross the boundary?"
  q_len = len(tokenizer(q, add_special_tokens=False)["input_ids"])
  seg = length - q_len - segments.template(tokenizer).num_special
  _, offsets = segments.tokenize_article(tokenizer, text)
  a, b = int(offsets[seg - 2, 0]), int(offsets[seg + 1, 1])
  return SquadExample("x1", q, text, [{"text": text[a:b], "answer_start": a}], False, [], "t",
                      "<test>"), seg


def test_an_answer_across_a_segment_boundary(tokenizer, articles):
  text = articles[0][1]
  ex, seg = _boundary_example(tokenizer, text)
  f = _build([ex], tokenizer, max_seq_length=64, is_training=True)
  a = f.arrays
  length = 64
  s, e = int(a["start_positions"][0]), int(a["end_positions"][0])
  assert s // length == 0 and e // length == 1  # starts in segment 0, ends in segment 1
  start = np.full((1, a["input_ids"].shape[1] * length), -1e4, np.float32)
  end = start.copy()
  start[0, s], end[0, e] = 5.0, 5.0
  (got, ca, cb, _), = decode_spans(start, end, f.meta["token_index"], f.meta["offsets"],
                                   [text], max_answer_length=10)
  gold = ex.answers[0]
  assert got == gold["text"] and got
  assert (ca, cb) == (gold["answer_start"], gold["answer_start"] + len(gold["text"]))


def test_truncation_drops_and_counts_training_answers_only(examples, tokenizer):
  train = _build(examples[:80], tokenizer, max_segments=1, is_training=True)
  evl = _build(examples[:80], tokenizer, max_segments=1, is_training=False)
  assert train.meta["dropped_cut"] > 0
  assert len(train.arrays["input_ids"]) + train.meta["dropped_cut"] + \
      train.meta["dropped_unmappable"] == 80
  assert len(evl.arrays["input_ids"]) == 80
  assert (evl.arrays["start_positions"] == -1).sum() == train.meta["dropped_cut"]
  assert evl.arrays["input_ids"].shape[1] == 1 and evl.meta["truncated_articles"] > 0
  f = _build(examples[:10], tokenizer, max_segments=6)
  assert f.arrays["segment_mask"].shape[1] == 6  # K is static: max_segments


def test_a_question_longer_than_the_window_is_named(tokenizer):
  long_q = " ".join(["question"] * 200)
  ex = SquadExample("q-long", long_q, "Some article text.", [], False, [], "t", "news.json")
  with pytest.raises(DataError, match=r"news.json: record 'q-long', field 'question'"):
    _build([ex], tokenizer, max_query_length=-1, max_seq_length=64)
  with pytest.raises(ValueError, match="leaves no room"):
    _build([ex], tokenizer, max_query_length=62, max_seq_length=64)
  f = _build([ex], tokenizer, max_query_length=20, max_seq_length=64)  # cut, counted
  assert f.meta["truncated_questions"] == 1 and f.arrays["question_rows"][0] == 21
