"""RACE multiple choice with POI-Net (``model.head=poi``), DUMA (``duma``) or the plain encoder
(``none``). Paper settings (POI-Net Table 2): lr 1e-5, max length 512, batch 32, 2 epochs."""
from configs import base


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "race"
  c.data.train_file = "RACE/train"  # a directory with high/ and middle/
  c.data.eval_file = "RACE/dev"
  c.data.max_seq_length = 512
  c.train.epochs = 2.0
  c.train.batch_size = 32
  c.train.save_every = 4000
  c.optim.lr = 1e-5
  c.model.init_from = "albert/albert-xxlarge-v2"
  base.apply_variant(c, arg)
  c.lock()
  return c
