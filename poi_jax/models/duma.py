"""DUMA for multiple-choice reading comprehension (DREAM, RACE) on ALBERT, BERT or RoBERTa.

Each option is one sequence ``[CLS] passage [SEP] question option [SEP]``; the encoder output is
split by ``p_end``/``q_start``/``q_end`` and fed to the DUMA layer (`poi_jax.layers.duma`), whose
fused vector goes through ``classifier_2`` (2D -> 1 for concat, D -> 1 for sum/mul; the released
name) and a softmax over options. Optionally with POI-Net's POS embedding (``pos_embedding``).

Parameter accounting (`parameter_breakdown`): with k layers shared across layers and directions,
DUMA adds one MHA plus the classifier, whatever k: ``4 (D^2 + D)`` with the output projection W^O
of the paper's eq. (1) (Q, K, V, W^O; the paper variant's default), ``3 (D^2 + D)`` without it
(``output_projection=False``, or the released variant). The paper's Table 9 (+1.8M on
ALBERT-base, D = 768) is the count without W^O: the paper contradicts its own eq. (1)
(`poi_jax.layers.duma`).
"""
from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from poi_jax.layers import common
from poi_jax.layers import duma as duma_lib
from poi_jax.models import checks, encoders, heads
from poi_jax.models.poi_net import POS_EXPORT_NAME, POS_VOCAB


class DumaBatchError(checks.BatchError):
  pass


def check_duma_batch(batch) -> None:
  """``p_end < q_start <= q_end < L`` and ``p_end >= 1`` for every option; names the record."""
  checks.check_batch(batch, require=("input_ids", "p_end", "q_start", "q_end"))
  shape = np.shape(batch["input_ids"])
  if len(shape) != 3:
    raise DumaBatchError(f"field 'input_ids' must be (batch, options, length), got {shape}")
  length = shape[-1]
  p, qs, qe = (np.asarray(batch[k]) for k in ("p_end", "q_start", "q_end"))
  for k, v in (("p_end", p), ("q_start", qs), ("q_end", qe)):
    if v.shape != shape[:2]:
      raise DumaBatchError(f"field {k!r} has shape {v.shape}, expected {shape[:2]}")
  for cond, msg in ((p >= qe, "p_end >= q_end"), (p < 1, "p_end < 1 (empty passage)"),
                    (qs <= p, "q_start <= p_end"), (qs > qe, "q_start > q_end"),
                    (qe >= length, f"q_end >= sequence length {length}")):
    if cond.any():
      rows = ", ".join(f"record {int(r[0])} option {int(r[1])}" for r in np.argwhere(cond)[:5])
      raise DumaBatchError(f"fields 'p_end'/'q_start'/'q_end': {msg} in {rows}")


class DumaForMultipleChoice(nnx.Module):
  """batch ``(B, C, L)`` token fields + ``p_end, q_start, q_end (B, C)`` -> ``{"logits": (B, C)}``."""

  def __init__(self, encoder_config: encoders.EncoderConfig, *, variant: str = "paper",
               num_layers: int = 2, share_layers: bool = True, num_heads: int = -1,
               fuse: str = "concat", direction: str = "both", block: str = "attention",
               output_projection: bool | None = None, pos_embedding: bool = False,
               rngs: nnx.Rngs):
    cfg = encoder_config
    self.config = cfg
    dtype = common.compute_dtype(cfg.dtype)
    self.encoder = encoders.build_encoder(cfg, rngs=rngs)
    self.pos_embeddings = (common.embed(POS_VOCAB, cfg.embedding_dim, (None, "embed"),
                                        init_std=cfg.initializer_range, dtype=dtype, rngs=rngs)
                           if pos_embedding else None)
    heads_n = cfg.num_attention_heads if num_heads < 0 else num_heads
    self.duma = duma_lib.Duma(cfg.hidden_size, heads_n, variant=variant, num_layers=num_layers,
                              share_layers=share_layers, fuse=fuse, direction=direction,
                              block=block, output_projection=output_projection,
                              eps=cfg.layer_norm_eps,
                              init_std=cfg.initializer_range, dtype=dtype, rngs=rngs)
    self.classifier_2 = common.dense(cfg.hidden_size * self.duma.output_dim_factor, 1,
                                     ("embed", None), init_std=cfg.initializer_range,
                                     dtype=jnp.float32, rngs=rngs)

  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool = True):
    if checks.is_concrete(batch):
      check_duma_batch(batch)
    b, c, l = batch["input_ids"].shape
    flat = lambda x: x.reshape((b * c,) + x.shape[2:])
    ids = flat(batch["input_ids"])
    mask = flat(batch["attention_mask"]) if "attention_mask" in batch else jnp.ones_like(ids)
    types = flat(batch["token_type_ids"]) if "token_type_ids" in batch else jnp.zeros_like(ids)
    extra = None
    if self.pos_embeddings is not None:
      extra = self.pos_embeddings(flat(batch["pos_tags"]))
    h = self.encoder(ids, mask, types, extra_embeddings=extra,
                     deterministic=deterministic).last_hidden_state
    fused = self.duma(h, flat(batch["p_end"]), flat(batch["q_start"]), flat(batch["q_end"]))
    return {"logits": self.classifier_2(fused.astype(jnp.float32))[:, 0].reshape(b, c)}

  def loss(self, batch, outputs) -> jax.Array:
    return heads.multiple_choice_loss(outputs["logits"], batch["labels"],
                                      batch.get("example_mask"))

  def export_tensors(self) -> dict[str, np.ndarray]:
    """The POS table, saved beside the encoder by `encoders.export_pretrained` (as POI-Net)."""
    if self.pos_embeddings is None:
      return {}
    return {POS_EXPORT_NAME: np.asarray(self.pos_embeddings.embedding.get_value())}


def parameter_breakdown(model: DumaForMultipleChoice) -> dict[str, int]:
  """Parameters of the encoder, the DUMA layer(s), the classifier and POS table (Table 9 style)."""
  count = lambda m: 0 if m is None else encoders.count_params(m)
  parts = {"encoder": count(model.encoder), "duma": count(model.duma),
           "classifier": count(model.classifier_2), "pos_embedding": count(model.pos_embeddings)}
  parts["total"] = sum(parts.values())
  return parts
