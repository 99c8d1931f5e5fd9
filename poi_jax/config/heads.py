"""Config sections of the heads that several task configs share.

* ``model.coattention``: POI-Net's iterative co-attention (squad1, squad2, race, dream), the
  keyword arguments of `poi_jax.models.poi_net.PoiNetForQuestionAnswering` /
  ``PoiNetForMultipleChoice``.
* ``model.duma``: DUMA's dual multi-head co-attention (race, dream), the keyword arguments of
  `poi_jax.models.duma.DumaForMultipleChoice`.

A task builds its head as ``Model(enc_cfg, **config.model.<section>, ...)``, so a key here is a
constructor parameter; adding one needs no change in the task.
"""
import ml_collections


def coattention(*, extractive: bool) -> ml_collections.ConfigDict:
  """POI-Net's co-attention (paper §2.2-2.3); ``extractive``: with the QA head's ``null_from``."""
  c = ml_collections.ConfigDict()
  c.variant = "paper"  # paper | released | none
  c.turns = 3
  c.strategy = "forgetting"  # forgetting | average | weighted | intuition
  c.nan_guard = True  # released: no 0/0 NaN on a 2-token domain (SPEC.md §1)
  # Diagnostics of issue 50 (why POI-Net may trail its encoder); the defaults are the paper's.
  c.score_gradient = "full"  # full | stop: the scores computed from stop_gradient(H)
  c.output = "replace"  # replace (R, the paper) | add (H + R) | concat ([H; R] to the output)
  c.pos_init = "normal"  # normal (the encoder's initializer) | zeros: the POS table's start
  if extractive:
    # SQuAD 2.0 null logits ([CLS]) from: coattention (R, the paper; 0 when [CLS] scores 0) |
    # encoder (H at [CLS]); poi_jax/models/poi_net.py
    c.null_from = "coattention"
  return c


def duma() -> ml_collections.ConfigDict:
  """DUMA (its eq. 1 and ablations)."""
  d = ml_collections.ConfigDict()
  d.variant = "paper"  # paper | released
  d.num_layers = 2
  d.share_layers = True
  d.num_heads = -1  # < 0: the encoder's number of heads
  d.fuse = "concat"  # concat | sum | mul
  d.direction = "both"  # both | p2q | q2p
  d.block = "attention"  # attention | transformer (TB-DUMA)
  # W^O of eq. (1); None: the variant's (paper: yes, released: no); False: Table 9's +3(D^2+D)
  d.output_projection = ml_collections.config_dict.placeholder(bool)
  return d


def add_poi_net(c: ml_collections.ConfigDict, *, extractive: bool) -> None:
  """POI-Net as the head (POS embedding on) with its ``coattention`` section (``extractive``:
  the QA model's, with ``null_from``; else the multiple-choice model's)."""
  c.model.head = "poi"  # poi | none (the plain encoder) [| duma: multiple choice]
  c.model.pos_embedding = True  # POI-Net's POS embedding (off: the Table 4 ablation)
  c.model.coattention = coattention(extractive=extractive)


def add_duma(c: ml_collections.ConfigDict) -> None:
  """The ``duma`` section, for ``model.head=duma`` (multiple-choice configs)."""
  c.model.duma = duma()


def apply_duma_paper(c: ml_collections.ConfigDict, *, warmup_steps: int, epochs: float) -> None:
  """The DUMA paper's Experimental Settings (on the configs' default ALBERT-xxlarge): k = 2 DUMA layers sharing
  parameters across layers and directions, no POS embedding, lr 1e-5, batch 8; warmup steps and
  epochs differ per data set (DREAM 100 / 2, RACE 1000 / 3)."""
  c.model.head = "duma"
  c.model.pos_embedding = False
  c.model.duma.variant = "paper"
  c.model.duma.num_layers = 2
  c.model.duma.share_layers = True
  c.optim.lr = 1e-5
  c.optim.warmup_steps = warmup_steps
  c.train.batch_size = 8
  c.train.epochs = epochs
