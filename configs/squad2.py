"""SQuAD 2.0 with POI-Net.

Variants: ``tiny`` (random ALBERT on the SQuAD 2.0 sample shipped in the package: offline end to
end in a minute or two on a CPU), ``minilm`` (real all-MiniLM-L6-v2,
offline), ``albert_base`` and ``albert_xxlarge`` (the paper's Table 2: lr 1e-5, warmup 10%,
2 epochs, batch 24, max length 512), ``bf16``; variants combine (``minilm,bf16``). Usage::

  python -m poi_jax.main --config=configs/squad2.py:tiny --workdir=/tmp/run --mode=train_and_eval
"""
from poi_jax.config import base, heads


def _tiny(c):
  """Offline end to end on the shipped SQuAD 2.0 sample: 160 questions of its first article to
  train, 80 of the second to score."""
  base.apply_tiny(c)
  base.use_squad2_sample(c, max_train=160, max_eval=80, skip_eval=208)


VARIANTS = base.variants("paper", "minilm", "albert_base", "albert_xxlarge", "bf16", tiny=_tiny)


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "squad2"
  heads.add_poi_net(c, extractive=True)
  c.data.train_file = "tfds:squad/v2.0:train"
  c.data.eval_file = "tfds:squad/v2.0:validation"
  c.data.max_seq_length = 512
  c.data.doc_stride = 128
  c.data.max_query_length = 64
  c.train.epochs = 2.0
  c.train.batch_size = 24
  c.train.save_every = 4000
  c.optim.lr = 1e-5
  c.model.init_from = "albert/albert-xxlarge-v2"
  base.apply_variants(c, arg, VARIANTS)
  c.lock()
  return c
