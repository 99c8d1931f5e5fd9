"""SQuAD 1.1 with POI-Net.

Variants: ``tiny`` (random ALBERT, offline, minutes on a CPU), ``minilm`` (real all-MiniLM-L6-v2,
offline), ``albert_base`` and ``albert_xxlarge`` (the paper's Table 2: lr 1e-5, warmup 10%,
2 epochs, batch 24, max length 512), ``bf16``; variants combine (``minilm,bf16``). Usage::

  python -m poi_jax.main --config=configs/squad1.py:tiny --workdir=/tmp/run \
      --config.data.train_file=../shared/data/squad1/squad1-dev-subset.json
"""
from configs import base, heads

VARIANTS = base.variants("paper", "tiny", "minilm", "albert_base", "albert_xxlarge", "bf16")


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
