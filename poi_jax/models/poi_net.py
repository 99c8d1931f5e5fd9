"""POI-Net (POS-Enhanced Iterative Co-Attention Network) for extractive and multiple-choice
reading comprehension, on ALBERT, BERT or RoBERTa encoders.

* POS-enhanced encoder (paper §2.1): a 40-row POS table (0 pad, 1-36 Penn tags, 37 special
  tokens, 38 other/empty, 39 spare) of the encoder's embedding width (ALBERT: the factorised
  size), initialised like the other embeddings and added to word + position + type embeddings
  before the embedding LayerNorm through the encoder's ``extra_embeddings`` hook.
* Iterative co-attention (§2.2-2.3, `poi_jax.layers.poi_coattention`): ``variant="paper"``
  (``turns``, ``strategy``), ``"released"`` (``nan_guard``) or ``"none"`` (plain encoder baseline,
  for the paper's Table 4 ablations together with ``pos_embedding=False``). The keyword arguments
  are the keys of the configs' ``model.coattention`` section (`poi_jax/config/heads.py`).
* Heads (§2.4): QA = Linear D->2 on the co-attended sequence, start/end cross-entropy averaged as
  transformers does; multiple choice = per option max-pool of the co-attended sequence over the
  tokens of its two domains, Linear D->1, softmax over options. The released multiple-choice code
  applies its classifier per token and reshapes to ``(-1, num_choices)``, which mixes tokens and
  options and cannot train; we follow the paper's §2.4.1 instead.
* SQuAD 2.0 null score (``null_from``, QA only). Both co-attention variants scale every token by
  its min-max-normalised score, so when [CLS] is its domain's least similar token at every turn
  its row of R is 0, the null score ``s_0 + e_0`` is the head's bias alone and no gradient reaches
  it through [CLS]. ``null_from="coattention"`` (the default: the paper and the released code)
  keeps that; ``"encoder"`` reads the null logits (position 0) from the encoder output H at
  [CLS], so the null score always depends on the input. How often [CLS] scores 0:
  docs/results.md (``bench/poi_cls_null.py``). An earlier experiment of the same kind
  (``keep_cls``) did not beat all-no-answer on 2 CPU cores, for lack of training, and was
  reverted; the default stays the paper's until a measurement says otherwise.

Parameters: ``encoder`` (HF layout, see `poi_jax.models.encoders`), ``pos_embeddings`` (exported
as ``embeddings.pos_tag_embeddings.weight``), ``qa_outputs`` / ``classifier``.
"""
from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from poi_jax.layers import common
from poi_jax.layers import poi_coattention as coatt
from poi_jax.layers.reductions import max_at_argmax
from poi_jax.layers.sharding import BLD, constrain
from poi_jax.models import checks, encoders, heads

POS_VOCAB = checks.NUM_POS_TAGS
POS_EXPORT_NAME = "embeddings.pos_tag_embeddings.weight"
COATTENTION_VARIANTS = ("paper", "released", "none")
SCORE_GRADIENTS = ("full", "stop")
OUTPUTS = ("replace", "add", "concat")
POS_INITS = ("normal", "zeros")
NULL_FROM = ("coattention", "encoder")


def combine(h: jax.Array, r: jax.Array, scores: jax.Array, *, score_gradient: str = "full",
            output: str = "replace") -> jax.Array:
  """What the output layer reads, from the encoder output ``H (N, L, D)``, the co-attended
  ``R = scores ⊙ H (N, L, D)`` and the ``scores (N, L)``: ``R`` (the paper), ``H + R`` or
  ``[H; R] (N, L, 2D)``. ``score_gradient="stop"``: the same values, with the gradient reaching
  H only through R's factor H, not through the scores."""
  if score_gradient == "stop":
    r = (h.astype(jnp.float32)
         * jax.lax.stop_gradient(scores.astype(jnp.float32))[..., None]).astype(r.dtype)
  if output == "add":
    return h + r
  if output == "concat":
    return jnp.concatenate([h, r], axis=-1)
  return r


class _PoiNetBase(nnx.Module):
  """Encoder + POS table + co-attention; subclasses add the output layer."""

  def __init__(self, encoder_config: encoders.EncoderConfig, *, variant: str = "paper",
               turns: int = 3, strategy: str = "forgetting", nan_guard: bool = True,
               score_gradient: str = "full", output: str = "replace", pos_init: str = "normal",
               pos_embedding: bool = True, rngs: nnx.Rngs):
    """``variant``: the co-attention (paper | released | none); ``turns``, ``strategy``: the paper
    variant's; ``nan_guard``: the released variant's. Diagnostics (issue 50; the defaults are
    the paper's): ``score_gradient="stop"`` computes the scores from ``stop_gradient(H)``, so the
    encoder learns only through ``R = s ⊙ H``'s factor H, not through the cosine scores;
    ``output``: what the output layer reads, ``replace`` (R), ``add`` (H + R) or ``concat``
    ([H; R], an output layer twice as wide); ``pos_init="zeros"`` starts the POS table at 0, so
    the encoder's input is unchanged at step 0."""
    for name, value, allowed in (("co-attention variant", variant, COATTENTION_VARIANTS),
                                 ("strategy", strategy, coatt.STRATEGIES),
                                 ("score_gradient", score_gradient, SCORE_GRADIENTS),
                                 ("output", output, OUTPUTS), ("pos_init", pos_init, POS_INITS)):
      if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    self.config = encoder_config
    self.coattention = variant
    self.turns, self.strategy, self.nan_guard = int(turns), strategy, bool(nan_guard)
    # (the plain encoder, variant="none", has no R: H goes to the output as it is)
    self.score_gradient = score_gradient
    self.output = output if variant != "none" else "replace"
    self.output_width = encoder_config.hidden_size * (2 if self.output == "concat" else 1)
    self.encoder = encoders.build_encoder(encoder_config, rngs=rngs)
    self.pos_embeddings = (common.embed(POS_VOCAB, encoder_config.embedding_dim, (None, "embed"),
                                        init_std=encoder_config.initializer_range,
                                        dtype=common.compute_dtype(encoder_config.dtype),
                                        rngs=rngs)
                           if pos_embedding else None)
    if self.pos_embeddings is not None and pos_init == "zeros":
      table = self.pos_embeddings.embedding
      table.set_value(jnp.zeros_like(table.get_value()))

  def encode(self, input_ids, attention_mask, token_type_ids, pos_tags, con_start, con_end, *,
             deterministic: bool, return_encoder_output: bool = False,
             return_scores: bool = False):
    """``(N, L)`` token fields, ``(N,)`` boundaries -> ``(R (N, L, D), domain mask (N, L))``, or
    ``(R, H)`` with the encoder output ``H (N, L, D)`` when ``return_encoder_output``; with
    ``return_scores`` a third element, the final per-token co-attention scores ``(N, L)`` (the
    weights R = scores * H applies; None for ``variant="none"``)."""
    # Named scopes label the compiled ops (HLO metadata, profiler traces) with the part of the
    # model they belong to, so a profile can say what POS and the co-attention cost.
    extra = None
    if self.pos_embeddings is not None:
      with jax.named_scope("pos_embedding"):
        extra = self.pos_embeddings(pos_tags)
    with jax.named_scope("encoder"):
      h = self.encoder(input_ids, attention_mask, token_type_ids, extra_embeddings=extra,
                       deterministic=deterministic).last_hidden_state
    m_a, m_b = coatt.domain_masks(con_start, con_end, h.shape[1])
    scores = None
    with jax.named_scope("coattention"):
      if self.coattention == "released":
        scores, r, _ = coatt.released_coattention(h, con_start, con_end,
                                                  nan_guard=self.nan_guard)
      elif self.coattention == "paper":
        scores, r = coatt.paper_coattention(h, con_start, con_end, turns=self.turns,
                                            strategy=self.strategy)
      else:
        r = h
      if scores is not None:
        r = combine(h, r, scores, score_gradient=self.score_gradient, output=self.output)
    r = constrain(r, BLD)
    out = (r, h) if return_encoder_output else (r, m_a + m_b)
    return out + (scores,) if return_scores else out

  def _check(self, batch):
    if checks.is_concrete(batch):
      checks.check_batch(batch)

  def export_tensors(self) -> dict[str, np.ndarray]:
    """Extra tensors saved beside the encoder by `encoders.export_pretrained`."""
    if self.pos_embeddings is None:
      return {}
    return {POS_EXPORT_NAME: np.asarray(self.pos_embeddings.embedding.get_value())}


def _fields(batch: Mapping[str, jax.Array]):
  ids = batch["input_ids"]
  mask = batch.get("attention_mask")
  mask = jnp.ones_like(ids) if mask is None else mask
  types = batch.get("token_type_ids")
  types = jnp.zeros_like(ids) if types is None else types
  tags = batch.get("pos_tags")
  tags = jnp.zeros_like(ids) if tags is None else tags
  return ids, mask, types, tags


class PoiNetForQuestionAnswering(_PoiNetBase):
  """Extractive QA: batch ``(B, L)`` token fields, ``con_start``/``con_end`` ``(B,)`` ->
  ``{"start_logits", "end_logits"}`` each ``(B, L)``. ``null_from``: where the null logits
  (position 0, [CLS]) come from, ``coattention`` (R, the paper) or ``encoder`` (H; module
  docstring)."""

  def __init__(self, encoder_config: encoders.EncoderConfig, *, null_from: str = "coattention",
               **kwargs):
    if null_from not in NULL_FROM:
      raise ValueError(f"null_from must be one of {NULL_FROM}, got {null_from!r}")
    rngs = kwargs["rngs"]
    super().__init__(encoder_config, **kwargs)
    if null_from == "encoder" and kwargs.get("output") == "concat":
      raise ValueError("null_from='encoder' reads H alone; output='concat' needs [H; R] at [CLS]")
    self.null_from = null_from
    self.qa_outputs = common.dense(self.output_width, 2, ("embed", None),
                                   init_std=encoder_config.initializer_range,
                                   dtype=jnp.float32, rngs=rngs)

  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool = True,
               with_scores: bool = False):
    """``with_scores``: also ``"token_scores" (B, L)``, the final co-attention score of every
    token (0 outside the two domains; the Reader's ``explain``); not for ``variant="none"``."""
    self._check(batch)
    ids, mask, types, tags = _fields(batch)
    r, h, scores = self.encode(ids, mask, types, tags, batch["con_start"], batch["con_end"],
                               deterministic=deterministic, return_encoder_output=True,
                               return_scores=True)
    logits = self.qa_outputs(r.astype(jnp.float32))
    if self.null_from == "encoder":
      logits = logits.at[:, 0].set(self.qa_outputs(h[:, 0].astype(jnp.float32)))
    out = {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
    if with_scores:
      if scores is None:
        raise ValueError("with_scores: this model has no co-attention (variant='none')")
      out["token_scores"] = scores.astype(jnp.float32)
    return out

  def loss(self, batch, outputs) -> jax.Array:
    return heads.span_loss(outputs["start_logits"], outputs["end_logits"],
                           batch["start_positions"], batch["end_positions"],
                           batch.get("example_mask"))


class PoiNetForMultipleChoice(_PoiNetBase):
  """Multiple choice: batch ``(B, C, L)`` token fields, ``con_start``/``con_end`` ``(B, C)`` ->
  ``{"logits": (B, C)}``. Each option is one sequence ``[CLS] passage [SEP] question+option
  [SEP]``; its co-attended sequence is max-pooled over its domain tokens (paper §2.4.1)."""

  def __init__(self, encoder_config: encoders.EncoderConfig, **kwargs):
    rngs = kwargs["rngs"]
    super().__init__(encoder_config, **kwargs)
    self.classifier = common.dense(self.output_width, 1, ("embed", None),
                                   init_std=encoder_config.initializer_range,
                                   dtype=jnp.float32, rngs=rngs)

  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool = True):
    self._check(batch)
    b, c, l = batch["input_ids"].shape
    flat = lambda x: x.reshape((b * c,) + x.shape[2:])
    ids, mask, types, tags = (flat(x) for x in _fields(batch))
    r, dom = self.encode(ids, mask, types, tags, flat(batch["con_start"]),
                         flat(batch["con_end"]), deterministic=deterministic)
    pooled = max_at_argmax(jnp.where(dom[..., None] > 0, r.astype(jnp.float32), -jnp.inf), 1)
    return {"logits": self.classifier(pooled)[:, 0].reshape(b, c)}

  def loss(self, batch, outputs) -> jax.Array:
    return heads.multiple_choice_loss(outputs["logits"], batch["labels"],
                                      batch.get("example_mask"))


def load_pretrained_into(model: _PoiNetBase, checkpoint: str) -> encoders.LoadReport:
  """Loads a HF checkpoint into ``model.encoder``; the POS table is read back when the checkpoint
  has it (a poi-jax export) and otherwise reported as newly initialised."""
  ckpt_dir = encoders.resolve_checkpoint(checkpoint)
  source, sd = encoders.load.read_state_dict(ckpt_dir)
  pos = sd.pop(POS_EXPORT_NAME, None)
  report = encoders.load_state_dict_into(model.encoder, sd, source)
  if model.pos_embeddings is not None:
    if pos is None:
      report.newly_initialized.append(POS_EXPORT_NAME)
    else:
      want = model.pos_embeddings.embedding.get_value().shape
      if pos.shape != want:
        raise encoders.CheckpointError(f"{source}: tensor {POS_EXPORT_NAME!r} has shape "
                                       f"{pos.shape}, the model expects {want}")
      model.pos_embeddings.embedding.set_value(jnp.asarray(pos))
      report.loaded.append(POS_EXPORT_NAME)
  elif pos is not None:
    report.unused.append(POS_EXPORT_NAME)
  return report
