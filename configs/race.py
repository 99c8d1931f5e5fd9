"""RACE multiple choice with POI-Net (``model.head=poi``), DUMA (``duma``) or the plain encoder
(``none``). POI-Net's Table 2 settings: lr 1e-5, max length 512, batch 32, 2 epochs.

Variants: tiny, minilm, albert_base, albert_xxlarge (the default), duma (the DUMA paper's
settings), bf16; variants combine (``minilm,bf16``, ``duma,bf16``).
"""
from poi_jax.config import base, heads


def _tiny(c):
  """Offline end to end on ../shared/data."""
  base.apply_tiny(c)
  base.use_shared_data(c, "race/dev", "race/dev", max_train=32, max_eval=16, skip_eval=33)


def _duma(c):
  heads.apply_duma_paper(c, warmup_steps=1000, epochs=3.0)


VARIANTS = base.variants("paper", "minilm", "albert_base", "albert_xxlarge", "bf16", tiny=_tiny,
                         duma=_duma)


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "race"
  heads.add_poi_net(c, extractive=False)  # model.head: poi | duma | none
  heads.add_duma(c)
  c.data.train_file = "RACE/train"  # a directory with high/ and middle/
  c.data.eval_file = "RACE/dev"
  c.data.race_level = "all"  # all | high | middle
  c.data.max_seq_length = 512
  c.train.epochs = 2.0
  c.train.batch_size = 32
  c.train.save_every = 4000
  c.optim.lr = 1e-5
  c.model.init_from = "albert/albert-xxlarge-v2"
  base.apply_variants(c, arg, VARIANTS)
  c.lock()
  return c
