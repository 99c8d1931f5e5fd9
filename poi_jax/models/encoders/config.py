"""Encoder configuration: the fields of a HuggingFace ``config.json`` plus runtime options."""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from poi_jax.layers import attention as attention_lib

SUPPORTED_MODEL_TYPES = ("bert", "albert", "roberta")

# HF field defaults per family (what transformers assumes when a config.json omits a field).
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "bert": dict(hidden_act="gelu", pad_token_id=0, type_vocab_size=2),
    "roberta": dict(hidden_act="gelu", pad_token_id=1, type_vocab_size=1),
    "albert": dict(hidden_act="gelu_new", pad_token_id=0, type_vocab_size=2, embedding_size=128),
}


# ``model.remat``: what each layer keeps for the backward pass (`jax.checkpoint_policies`).
# none: everything (no recomputation); full: only the layer input (recompute the whole layer);
# dots_saveable: matmul outputs (recompute elementwise ops only); dots_with_no_batch_dims_saveable:
# the projections' outputs but not the attention score matmuls (whose size grows with L^2).
REMAT_POLICIES = {
    "none": None,
    "full": "nothing_saveable",
    "dots_saveable": "dots_saveable",
    "dots_with_no_batch_dims_saveable": "dots_with_no_batch_dims_saveable",
}


def remat_policy(name: str):
  """The `jax.checkpoint` policy of a `REMAT_POLICIES` name (None for ``none``)."""
  import jax
  attr = REMAT_POLICIES[name]
  return None if attr is None else getattr(jax.checkpoint_policies, attr)


@dataclasses.dataclass
class EncoderConfig:
  """Architecture of a BERT-family encoder (HF ``config.json`` names) and how to run it.

  ``embedding_size`` is ALBERT's factorised embedding width; for BERT and RoBERTa it equals
  ``hidden_size``. ``dtype`` is the compute dtype; parameters are always float32.
  """
  model_type: str = "bert"
  vocab_size: int = 30522
  hidden_size: int = 768
  embedding_size: int | None = None
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  pad_token_id: int = 0
  num_hidden_groups: int = 1
  inner_group_num: int = 1
  initializer_range: float = 0.02
  # Runtime options (not part of the checkpoint).
  dtype: str = "float32"
  remat: str | bool = "none"  # a key of REMAT_POLICIES (old booleans: True = full, False = none)
  scan_layers: bool = False
  attention: str = "auto"  # one of `poi_jax.layers.attention.IMPLEMENTATIONS`

  def __post_init__(self):
    if self.model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(f"unsupported model_type {self.model_type!r}; poi-jax supports "
                       f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    if self.embedding_size is None or self.model_type != "albert":
      if self.model_type == "albert" and self.embedding_size is None:
        self.embedding_size = 128
      elif self.model_type != "albert":
        self.embedding_size = self.hidden_size
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of "
                       f"num_attention_heads {self.num_attention_heads}")
    if self.model_type == "albert" and self.num_hidden_layers % self.num_hidden_groups:
      raise ValueError(f"num_hidden_layers {self.num_hidden_layers} is not a multiple of "
                       f"num_hidden_groups {self.num_hidden_groups}")
    # Configs before remat policies said True/False (also as "True"/"False" on a command line).
    if isinstance(self.remat, str) and self.remat.lower() in ("true", "false"):
      self.remat = self.remat.lower() == "true"
    if isinstance(self.remat, bool) or self.remat is None:
      self.remat = "full" if self.remat else "none"
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"remat must be one of {sorted(REMAT_POLICIES)} (or a boolean), got "
                       f"{self.remat!r}")
    if self.attention not in attention_lib.IMPLEMENTATIONS:
      raise ValueError(f"attention must be one of {attention_lib.IMPLEMENTATIONS}, got "
                       f"{self.attention!r}")
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")

  @property
  def embedding_dim(self) -> int:
    """Width of the embedding table (and of ``extra_embeddings``)."""
    return int(self.embedding_size)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_attention_heads

  @classmethod
  def from_hf(cls, source: str | os.PathLike | dict, **overrides) -> "EncoderConfig":
    """Builds a config from a ``config.json`` path, a checkpoint directory or a dict.

    Unknown HF fields are ignored (they do not change the computation of the base encoder);
    ``overrides`` set fields directly (e.g. ``dtype="bfloat16"``).
    """
    if isinstance(source, dict):
      raw = dict(source)
    else:
      path = os.fspath(source)
      if os.path.isdir(path):
        path = os.path.join(path, "config.json")
      with open(path) as f:
        raw = json.load(f)
    model_type = raw.get("model_type", "bert")
    if model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(f"unsupported model_type {model_type!r}; poi-jax supports "
                       f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = dict(_FAMILY_DEFAULTS[model_type])
    kwargs.update({k: v for k, v in raw.items() if k in fields})
    kwargs["model_type"] = model_type
    kwargs.update(overrides)
    return cls(**kwargs)

  def to_hf(self) -> dict:
    """The ``config.json`` dict transformers' ``AutoConfig`` reads back."""
    d = dataclasses.asdict(self)
    for k in ("dtype", "remat", "scan_layers", "attention"):
      d.pop(k)
    if self.model_type != "albert":
      d.pop("embedding_size")
      d.pop("num_hidden_groups")
      d.pop("inner_group_num")
    arch = {"bert": "BertModel", "albert": "AlbertModel", "roberta": "RobertaModel"}
    d["architectures"] = [arch[self.model_type]]
    return d
