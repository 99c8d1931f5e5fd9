"""RACE multiple choice with POI-Net (``model.head=poi``), DUMA (``duma``) or the plain encoder
(``none``). Variants: tiny, minilm, albert_base, albert_xxlarge (POI-Net's Table 2 settings),
duma (the DUMA paper's settings on ALBERT-xxlarge). POI-Net Table 2: lr 1e-5, max length 512, batch 32, 2 epochs."""
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
  if arg == "duma":
    apply_duma_paper(c)
    arg = None
  base.apply_variant(c, arg)
  if arg == "tiny":  # offline end to end on ../shared/data
    base.use_shared_data(c, "race/dev", "race/dev", max_train=32, max_eval=16)
  c.lock()
  return c


def apply_duma_paper(c):
  """DUMA paper settings (its Experimental Settings): ALBERT-xxlarge, k = 2 DUMA layers sharing
  parameters across layers and directions, lr 1e-5, batch 8, 1000 warmup steps, 3 epochs."""
  c.model.head = "duma"
  c.model.pos_embedding = False
  c.model.duma.variant = "paper"
  c.model.duma.num_layers = 2
  c.model.duma.share_layers = True
  c.optim.lr = 1e-5
  c.optim.warmup_steps = 1000
  c.train.batch_size = 8
  c.train.epochs = 3.0
