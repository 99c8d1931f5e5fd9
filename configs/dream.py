"""DREAM multiple choice with POI-Net (``model.head=poi``), DUMA (``duma``) or the plain encoder
(``none``). Paper settings (POI-Net Table 2): lr 1e-5, max length 512, batch 24, 4 epochs."""
from configs import base


def get_config(arg=None):
  c = base.get_base_config()
  c.task = "dream"
  c.data.train_file = "dream/train.json"
  c.data.eval_file = "dream/dev.json"
  c.data.max_seq_length = 512
  c.train.epochs = 4.0
  c.train.batch_size = 24
  c.train.save_every = 400
  c.optim.lr = 1e-5
  c.model.init_from = "albert/albert-xxlarge-v2"
  base.apply_variant(c, arg)
  c.lock()
  return c
