"""Natural Questions with the multi-grained graph encoder (Zheng et al., ACL 2020).

Variants:

* (none) / ``paper``: BERT-large uncased (``model.init_from``, hub), Model-III (2 graph layers),
  lr 2e-5, 2 epochs, batch 32, max length 512, window step 128, question 64, nulls kept with
  probability 0.03, graph capacities 512/128/64. NOTE: the paper starts from a BERT-large
  *fine-tuned on SQuAD 2.0* (its §4.2; "BERT-syn" is Google's SQuAD 2.0 model); this config starts
  from the plain pre-trained ``bert-large-uncased``, the closest hub checkpoint with the same
  architecture, so expect lower scores than the paper's. Pass a SQuAD 2.0 fine-tuned BERT-large
  (e.g. one trained with ``configs/squad2.py`` and exported) as ``--config.model.init_from``.
* ``tiny``: the small random ALBERT of `poi_jax.config.base`, max length 128, 1 graph layer,
  small graph capacities: CPU tests and smoke runs (pass ``--config.data.train_file`` /
  ``eval_file``).
* ``minilm``: the real all-MiniLM-L6-v2 encoder (offline), 2 graph layers, max length 256.

Data: NQ full-format (``.jsonl.gz``) or simplified files, or a directory of shards. Usage::

  python -m poi_jax.main --config=configs/nq.py:tiny --workdir=/tmp/nq --mode=train_and_eval \
      --config.data.train_file=/data/nq/train --config.data.eval_file=/data/nq/dev
"""
import ml_collections

from poi_jax.config import base


def _graph() -> ml_collections.ConfigDict:
  g = ml_collections.ConfigDict()
  g.num_layers = 2  # 0 = the paper's Model-II (the released config), 2 = Model-III
  g.max_sentences = 128
  g.max_paragraphs = 64
  g.max_token_relative = 16
  g.max_sentence_relative = 8
  g.max_paragraph_relative = 4
  g.formulation = "segment"  # segment (per edge, O(E) memory) | dense (masked N x N attention)
  g.dropout = -1.0  # < 0: the encoder's hidden_dropout_prob (the paper: BERT's)
  return g


def _nq_data() -> ml_collections.ConfigDict:
  n = ml_collections.ConfigDict()
  # Sub-tokens between window starts (the original's doc_stride, a step); data.doc_stride (the
  # SQuAD features' overlap) does not exist in this config, so it cannot be set by mistake.
  n.window_step = 128
  n.include_unknowns = 0.03  # probability of keeping a null training window
  n.max_position = 50  # candidate markers [unusedK]: per-kind counts clip at this
  n.long_non_null_threshold = 2  # the official nq_eval's votes for "gold has an answer"
  n.short_non_null_threshold = 2
  return n


def _tiny(c):
  base.apply_tiny(c)
  c.data.max_seq_length = 128
  c.data.nq.window_step = 64
  c.data.max_query_length = 24
  c.model.graph.num_layers = 1
  c.model.graph.max_sentences = 32
  c.model.graph.max_paragraphs = 16
  c.model.graph.max_token_relative = 8
  c.model.graph.max_sentence_relative = 4
  c.model.graph.max_paragraph_relative = 2
  c.data.nq.include_unknowns = 0.2
  c.data.num_workers = 0


def _minilm(c):
  base.apply_minilm(c)
  c.data.max_seq_length = 256
  c.data.nq.window_step = 128
  c.data.max_query_length = 32
  c.model.graph.max_sentences = 64
  c.model.graph.max_paragraphs = 32
  c.data.nq.include_unknowns = 0.1
  c.train.batch_size = 16
  c.optim.lr = 5e-5


VARIANTS = base.variants("paper", "bf16", tiny=_tiny, minilm=_minilm)


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "nq"
  c.model.head = "graph"
  c.model.pos_embedding = False
  # The paper fine-tunes from a SQuAD 2.0 fine-tuned BERT-large; this is the plain pre-trained
  # one (module docstring, docs/nq.md).
  c.model.init_from = "google-bert/bert-large-uncased"
  c.model.graph = _graph()
  c.data.nq = _nq_data()
  c.data.max_seq_length = 512
  c.data.max_query_length = 64
  c.optim.lr = 2e-5
  c.optim.warmup_ratio = 0.1
  c.train.epochs = 2.0
  c.train.batch_size = 32
  c.train.save_every = 4000
  c.eval.max_answer_length = 30
  base.apply_variants(c, arg, VARIANTS)
  # NQ windows advance by data.nq.window_step (a step); the base's (and the variants')
  # data.doc_stride is the SQuAD features' overlap: removed so that no one sets it for NQ.
  del c.data["doc_stride"]
  c.lock()
  return c
