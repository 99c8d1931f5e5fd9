"""Model construction from an ml_collections config (shared by `poi_jax.main` and the engine)."""
from __future__ import annotations

import ml_collections
from flax import nnx

from poi_jax.models import encoders


def encoder_config(config: ml_collections.ConfigDict) -> encoders.EncoderConfig:
  """The encoder architecture: from ``model.init_from``'s config.json, else ``model.encoder``."""
  m = config.model
  runtime = dict(dtype=m.dtype, remat=m.remat, scan_layers=m.scan_layers,
                 attention=m.get("attention", "auto"))
  if m.init_from:
    cfg = encoders.read_config(encoders.resolve_checkpoint(m.init_from), **runtime)
  else:
    cfg = encoders.EncoderConfig.from_hf(m.encoder.to_dict(), **runtime)
  if m.dropout >= 0:
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = float(m.dropout)
  if m.get("attention_dropout", -1.0) >= 0:
    cfg.attention_probs_dropout_prob = float(m.attention_dropout)
  return cfg


def abstract_encoder(cfg: encoders.EncoderConfig) -> nnx.Module:
  """The encoder with shape-only parameters (no memory, no compute): for parameter counts."""
  return nnx.eval_shape(lambda: encoders.build_encoder(cfg, rngs=nnx.Rngs(0)))


def parameter_count(module: nnx.Module) -> int:
  return encoders.count_params(module)


def load_tokenizer(config):
  """The run's fast tokenizer: ``model.tokenizer``, else ``model.init_from``'s (training,
  preparation and the Reader alike)."""
  name = config.model.tokenizer or config.model.init_from
  if not name:
    raise ValueError("model.tokenizer is empty and there is no model.init_from to take the "
                     "tokenizer from")
  tok = encoders.load.load_tokenizer(encoders.resolve_checkpoint(name))
  if tok is None:
    raise ValueError(f"no fast tokenizer found for {name!r}")
  return tok
