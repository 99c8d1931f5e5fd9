"""DREAM multiple choice with POI-Net (``model.head=poi``), DUMA (``duma``) or the plain encoder
(``none``). POI-Net's Table 2 settings: lr 1e-5, max length 512, batch 24, 4 epochs.

Variants: tiny, minilm, albert_base, albert_xxlarge (the default), duma (the DUMA paper's
settings), bf16; variants combine (``minilm,bf16``, ``duma,bf16``).
"""
from poi_jax.config import base, heads


def _tiny(c):
  """Offline end to end on ../shared/data."""
  base.apply_tiny(c)
  base.use_shared_data(c, "dream/train.json", "dream/dev.json", max_train=64, max_eval=32)


def _duma(c):
  heads.apply_duma_paper(c, warmup_steps=100, epochs=2.0)


VARIANTS = base.variants("paper", "minilm", "albert_base", "albert_xxlarge", "bf16", tiny=_tiny,
                         duma=_duma)


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "dream"
  heads.add_poi_net(c, extractive=False)  # model.head: poi | duma | none
  heads.add_duma(c)
  c.data.train_file = "dream/train.json"
  c.data.eval_file = "dream/dev.json"
  c.data.max_seq_length = 512
  c.train.epochs = 4.0
  c.train.batch_size = 24
  c.train.save_every = 400
  c.optim.lr = 1e-5
  c.model.init_from = "albert/albert-xxlarge-v2"
  base.apply_variants(c, arg, VARIANTS)
  c.lock()
  return c
