"""Model construction from an ml_collections config (shared by `poi_jax.main` and the engine)."""
from __future__ import annotations

import ml_collections
from flax import nnx

from poi_jax.models import encoders


def encoder_config(config: ml_collections.ConfigDict) -> encoders.EncoderConfig:
  """The encoder architecture: from ``model.init_from``'s config.json, else ``model.encoder``."""
  m = config.model
  runtime = dict(dtype=m.dtype, remat=m.remat, scan_layers=m.scan_layers)
  if m.init_from:
    cfg = encoders.read_config(encoders.resolve_checkpoint(m.init_from), **runtime)
  else:
    cfg = encoders.EncoderConfig.from_hf(m.encoder.to_dict(), **runtime)
  if m.dropout >= 0:
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = float(m.dropout)
  return cfg


def abstract_encoder(cfg: encoders.EncoderConfig) -> nnx.Module:
  """The encoder with shape-only parameters (no memory, no compute): for parameter counts."""
  return nnx.eval_shape(lambda: encoders.build_encoder(cfg, rngs=nnx.Rngs(0)))


def parameter_count(module: nnx.Module) -> int:
  return encoders.count_params(module)


EXTRACTIVE_TASKS = ("squad1", "squad2")
CHOICE_TASKS = ("race", "dream")


def task_model(config: ml_collections.ConfigDict, *, rngs: nnx.Rngs) -> nnx.Module:
  """The model a config describes: POI-Net (``model.head=poi``), DUMA (``duma``, multiple
  choice only) or the plain encoder baseline
  (``model.head=none``: POI-Net's heads with no POS table and no co-attention), QA for SQuAD,
  multiple choice for RACE/DREAM. Random weights; the engine loads ``model.init_from``."""
  from poi_jax.models import poi_net
  m = config.model
  enc_cfg = encoder_config(config)
  if config.task in EXTRACTIVE_TASKS:
    cls = poi_net.PoiNetForQuestionAnswering
  elif config.task in CHOICE_TASKS:
    cls = poi_net.PoiNetForMultipleChoice
  else:
    raise ValueError(f"unknown task {config.task!r}; known: {EXTRACTIVE_TASKS + CHOICE_TASKS}")
  if m.head == "poi":
    return cls(enc_cfg, coattention=m.coattention.variant, turns=m.coattention.turns,
               strategy=m.coattention.strategy, nan_guard=m.coattention.nan_guard,
               pos_embedding=m.pos_embedding, rngs=rngs)
  if m.head == "none":
    return cls(enc_cfg, coattention="none", pos_embedding=False, rngs=rngs)
  if m.head == "duma":
    if config.task not in CHOICE_TASKS:
      raise ValueError(f"model.head=duma is a multiple-choice head; task {config.task!r} is not")
    from poi_jax.models import duma
    d = m.duma
    return duma.DumaForMultipleChoice(
        enc_cfg, variant=d.variant, num_layers=d.num_layers, share_layers=d.share_layers,
        num_heads=d.num_heads, fuse=d.fuse, direction=d.direction, block=d.block,
        pos_embedding=m.pos_embedding, rngs=rngs)
  raise ValueError(f"unknown model.head={m.head!r} (known: poi, duma, none)")


def abstract_task_model(config: ml_collections.ConfigDict) -> nnx.Module:
  return nnx.eval_shape(lambda: task_model(config, rngs=nnx.Rngs(0)))
