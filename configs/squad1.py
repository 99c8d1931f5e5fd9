"""SQuAD 1.1 with POI-Net.

Variants: ``tiny`` (random ALBERT, offline, minutes on a CPU), ``minilm`` (real all-MiniLM-L6-v2,
offline), ``minilm_cpu`` (the CPU quickstart that learns: MiniLM on the answerable questions of
the SQuAD 2.0 sample shipped in the package, README "CPU quickstart"), ``albert_base`` and
``albert_xxlarge`` (the paper's Table 2: lr 1e-5, warmup 10%, 2 epochs, batch 24, max length
512), ``bf16``; variants combine (``minilm,bf16``). Usage::

  python -m poi_jax.main --config=configs/squad1.py:tiny --workdir=/tmp/run \
      --config.data.train_file=../shared/data/squad1/squad1-dev-subset.json
"""
from poi_jax.config import base, heads


def _minilm_cpu(c):
  """The CPU quickstart that learns: all-MiniLM-L6-v2 on the shipped SQuAD 2.0 sample's
  answerable questions (SQuAD 1.1-style), training on its first 9 articles (1,506 questions) and
  scoring the 601 of its last 3, which it never sees. One epoch (150 steps) at a high learning
  rate moves MiniLM on 2 CPU cores: F1 8.3 -> 23.7 (README "CPU quickstart that learns")."""
  base.apply_minilm(c)
  c.data.answerable_only = True
  base.use_squad2_sample(c, max_train=1506, max_eval=-1, skip_eval=1506)
  # 192 tokens hold most paragraphs whole (1.5 windows a question, 2,263 training windows), so
  # few windows are answerless; the overlap is short for the same reason.
  c.data.max_seq_length = 192
  c.data.doc_stride = 32
  c.data.max_query_length = 32
  c.train.batch_size = 16
  c.train.eval_batch_size = 64
  c.train.max_steps = 150  # 2,400 windows: about one epoch
  c.train.log_every = 10
  c.train.save_every = 150
  c.optim.lr = 1e-4
  c.optim.warmup_ratio = 0.1


VARIANTS = base.variants("paper", "tiny", "minilm", "albert_base", "albert_xxlarge", "bf16",
                         minilm_cpu=_minilm_cpu)


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "squad1"
  heads.add_poi_net(c, extractive=True)
  c.data.train_file = "tfds:squad/v1.1:train"
  c.data.eval_file = "tfds:squad/v1.1:validation"
  c.data.max_seq_length = 512
  c.data.doc_stride = 128
  c.data.max_query_length = 64
  c.train.epochs = 2.0
  c.train.batch_size = 24
  c.train.save_every = 2000
  c.optim.lr = 1e-5
  c.model.init_from = "albert/albert-xxlarge-v2"
  base.apply_variants(c, arg, VARIANTS)
  c.lock()
  return c
