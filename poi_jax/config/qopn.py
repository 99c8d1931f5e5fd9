"""QOPN's config (the Question-Oriented Propagation Network; docs/qopn.md), shared by
``configs/newsqa.py`` and ``configs/nlquad.py``: the ``model.qopn`` and ``data.qopn`` sections,
the variants and `qopn_config`, which builds a task's config from them.

``model.qopn``: ``num_blocks``, ``num_heads`` (< 0: the encoder's), ``block_style``
(paper_residual, the default | paper, eq. 2-3 literally, which does not train | transformer),
``output_projection`` (W^O; eq. 3 has none), ``scan_blocks``, the Table 4 ablations ``use_qoii`` /
``use_gbif`` / ``use_qgip``, ``dropout`` (< 0: the encoder's). ``data.qopn``: ``max_segments``,
the NewsQA ``train_split`` / ``eval_split`` (the stories' ``type``).
"""
import ml_collections

from poi_jax.config import base


def qopn_model() -> ml_collections.ConfigDict:
  q = ml_collections.ConfigDict()
  q.num_blocks = 3
  q.num_heads = -1  # < 0: the encoder's number of heads
  # paper_residual (eq. 2-3 + residual + LayerNorm) | paper (eq. 2-3 literally: no residual, the
  # stack collapses and does not train; docs/qopn.md) | transformer (+ residual, LayerNorm, FFN)
  q.block_style = "paper_residual"
  q.output_projection = False  # W^O after the heads (eq. 3 has none)
  q.scan_blocks = True  # stacked block weights under nnx.scan
  q.use_qoii = True  # False: -QOII ([CLS] rows only)
  q.use_gbif = True  # False: -GBIF (R~ = R^)
  q.use_qgip = True  # False: -QGIP (no propagation; global softmax kept)
  q.dropout = -1.0  # < 0: the encoder's hidden dropout
  return q


def qopn_data() -> ml_collections.ConfigDict:
  d = ml_collections.ConfigDict()
  d.max_segments = 6
  d.train_split = "train"  # NewsQA story `type` (empty: every story of the file)
  d.eval_split = "dev"
  return d


def _roberta_base(c):
  c.model.init_from = "FacebookAI/roberta-base"


def _minilm(c):
  base.apply_minilm(c)
  c.data.max_query_length = 48
  c.train.batch_size = 8
  c.train.eval_batch_size = 16


def _tiny(c):
  base.apply_tiny(c)
  c.model.qopn.num_blocks = 2
  c.data.max_query_length = 24
  c.train.batch_size = 8
  c.train.eval_batch_size = 8


VARIANTS = base.variants("paper", "bf16", roberta_base=_roberta_base, minilm=_minilm, tiny=_tiny)


def qopn_config(task: str, arg, *, batch_size: int, num_blocks: int,
                max_answer_length: int) -> ml_collections.ConfigDict:
  """The shared QOPN config of ``task`` (newsqa | nlquad) and its variant ``arg``."""
  c = base.get_base_config()
  c.task = task
  c.model.head = "qopn"
  c.model.pos_embedding = False
  c.model.init_from = "FacebookAI/roberta-large"
  c.model.qopn = qopn_model()
  c.model.qopn.num_blocks = num_blocks
  c.data.qopn = qopn_data()
  c.data.train_file = ""  # NewsQA / NLQuAD cannot be downloaded offline: pass a file
  c.data.eval_file = ""
  c.data.max_seq_length = 512
  c.data.max_query_length = 64
  c.optim.lr = 3e-5
  c.optim.warmup_ratio = 0.1
  c.optim.weight_decay = 0.0  # the paper's Adam
  c.train.epochs = 6.0
  c.train.batch_size = batch_size
  c.train.eval_batch_size = 16
  c.train.save_every = 2000
  c.eval.max_answer_length = max_answer_length
  base.apply_variants(c, arg, VARIANTS)
  c.lock()
  return c
