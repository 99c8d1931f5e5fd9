"""NarrativeQA (summary setting) with DASSA (Mihaylov & Frank, EMNLP 2019).

Variants:

* (none) / ``paper``: the paper's QANet (hidden 128, 8 heads, GloVe 100d via
  ``--config.model.qanet.glove_file``, Adam lr 1e-3 betas 0.8/0.999 eps 1e-7, grad norm 5, batch
  32 as 2 x 16 accumulation) with the DR (Exp) heads of Table 2 in modeling blocks 1, 3, 5.
* ``tiny``: a small QANet (hidden 32, 4 heads, hashed random word vectors), offline views
  (sentences + lexicon connectives), a few steps: CPU tests and smoke runs.
* ``minilm``: DASSA layers on the real all-MiniLM-L6-v2 encoder (offline).

Every variant runs DASSA in ``masked`` mode (padding never attended); ``model.dassa.mode=released``
is the original code's attention to padding, kept for parity with its fixture.

``model.dassa.heads`` takes a Table 2 preset (``baseline``, ``dr_exp``, ``dr_all``, ``srl``,
``coref``, ``srl_dr_all_coref``, ... ``offline``) or ``"srl:3,dr_exp:2"``. Data: a directory
holding ``qaps.csv`` (+ ``summaries.csv`` or ``third_party/wikipedia/summaries.csv``), a
``qaps.csv`` path, or annotated ``.jsonl``. Usage::

  python -m poi_jax.main --config=configs/narrativeqa.py:tiny --workdir=/tmp/nqa \
      --mode=train_and_eval --config.data.train_file=/data/narrativeqa \
      --config.data.eval_file=/data/narrativeqa
"""
import ml_collections

from poi_jax.config import base


def _dassa() -> ml_collections.ConfigDict:
  d = ml_collections.ConfigDict()
  d.heads = "dr_exp"  # Table 2 preset or "view:count,..." (poi_jax.data.features.views)
  # masked (padding keys masked: outputs do not depend on the split's padded length, 800 vs
  # 1,200) | released (the original attends padding; kept for fixture parity)
  d.mode = "masked"
  d.semantic_emb_dim = 16
  d.num_semantic_labels = -1  # <= 0: the view vocabulary + one default label per head
  d.replace_zero_labels = True  # label/scope 0 of head h -> N - H + h (the original)
  d.blocks = (1, 3, 5)  # QANet modeling blocks with DASSA attention
  d.coref_max_clusters = 50
  d.coref_keep = "smallest"  # smallest (the original) | largest
  d.nonexplicit_types = ("Implicit",)  # the original; the paper: + AltLex, EntRel
  d.lexicon = ""  # connective lexicon file; empty: the shipped PDTB list
  d.encoder_layers = 1  # encoder_dassa: DASSA layers on the encoder
  d.encoder_heads = -1  # encoder_dassa: <= 0 = the encoder's number of heads
  return d


def _qanet() -> ml_collections.ConfigDict:
  q = ml_collections.ConfigDict()
  q.glove_file = ""  # GloVe-format text file (frozen); empty: random hashed word vectors
  q.max_glove_words = -1  # < 0: the whole file
  q.vocab_size = 100000  # hash buckets without GloVe
  q.word_dim = 100
  q.char_dim = 16
  q.char_filters = 100
  q.max_word_chars = 16
  q.hidden = 128
  q.num_heads = 8
  q.embedding_convs = 4
  q.embedding_kernel = 7
  q.modeling_blocks = 7
  q.modeling_convs = 2
  q.modeling_kernel = 5
  q.modeling_passes = 3
  q.dropout = 0.1
  q.layer_dropout = 0.1
  return q


def _data() -> ml_collections.ConfigDict:
  n = ml_collections.ConfigDict()
  n.summaries_file = ""  # empty: beside qaps.csv or third_party/wikipedia/
  n.train_set = "train"
  n.eval_set = "valid"
  n.train_passage_tokens = 800
  n.eval_passage_tokens = 1200
  n.max_question_tokens = 50
  n.oracle_window = 15
  return n


def _tiny(c):
  q = c.model.qanet
  q.vocab_size, q.word_dim, q.char_dim, q.char_filters = 2000, 16, 8, 16
  q.hidden, q.num_heads, q.embedding_convs, q.max_word_chars = 32, 4, 2, 12
  c.model.dassa.heads = "offline"
  c.model.dassa.semantic_emb_dim = 4
  c.data.narrativeqa.train_passage_tokens = 200
  c.data.narrativeqa.eval_passage_tokens = 200
  c.data.narrativeqa.max_question_tokens = 24
  c.optim.accum_steps = 1
  c.train.batch_size = 4
  c.train.max_steps = 10
  c.train.log_every = 5
  c.train.save_every = 10


def _minilm(c):
  base.apply_minilm(c)
  c.model.head = "encoder_dassa"
  c.model.tokenizer = ""
  c.model.dassa.heads = "offline"
  c.optim.accum_steps = 1
  c.optim.warmup_ratio = 0.1
  c.optim.grad_clip = 1.0
  c.optim.b1 = 0.9
  c.optim.eps = 1e-6
  c.train.batch_size = 8
  c.train.epochs = 2.0


VARIANTS = base.variants("paper", "bf16", tiny=_tiny, minilm=_minilm)


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "narrativeqa"
  c.model.head = "qanet_dassa"  # qanet_dassa | encoder_dassa
  c.model.pos_embedding = False
  c.model.init_from = ""
  c.model.tokenizer = ""  # QANet reads words and characters; encoder_dassa: init_from's
  c.model.dassa = _dassa()
  c.model.qanet = _qanet()
  c.data.narrativeqa = _data()
  c.optim.lr = 1e-3
  c.optim.b1 = 0.8
  c.optim.b2 = 0.999
  c.optim.eps = 1e-7
  c.optim.grad_clip = 5.0
  c.optim.weight_decay = 0.0
  c.optim.warmup_ratio = 0.0
  c.optim.accum_steps = 16
  c.train.batch_size = 2
  c.train.eval_batch_size = 8
  c.train.epochs = 70.0
  c.train.best_metric = "rouge_l"
  c.train.export_best = False
  c.eval.max_answer_length = 30  # encoder_dassa decoding; QANet decodes with no cap
  base.apply_variants(c, arg, VARIANTS)
  c.lock()
  return c
