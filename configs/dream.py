"""DREAM multiple choice with POI-Net (``model.head=poi``), DUMA (``duma``) or the plain encoder
(``none``). Variants: tiny, minilm, albert_base, albert_xxlarge (POI-Net's Table 2 settings),
duma (the DUMA paper's settings on ALBERT-xxlarge). POI-Net Table 2: lr 1e-5, max length 512, batch 24, 4 epochs."""
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
  if arg == "duma":
    apply_duma_paper(c)
    arg = None
  base.apply_variant(c, arg)
  if arg == "tiny":  # offline end to end on ../shared/data
    base.use_shared_data(c, "dream/train.json", "dream/dev.json", max_train=64, max_eval=32)
  c.lock()
  return c


def apply_duma_paper(c):
  """DUMA paper settings (its Experimental Settings): ALBERT-xxlarge, k = 2 DUMA layers sharing
  parameters across layers and directions, lr 1e-5, batch 8, 100 warmup steps, 2 epochs."""
  c.model.head = "duma"
  c.model.pos_embedding = False
  c.model.duma.variant = "paper"
  c.model.duma.num_layers = 2
  c.model.duma.share_layers = True
  c.optim.lr = 1e-5
  c.optim.warmup_steps = 100
  c.train.batch_size = 8
  c.train.epochs = 2.0
