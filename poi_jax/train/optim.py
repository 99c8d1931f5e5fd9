"""optax AdamW with linear warmup + linear decay, clipping, accumulation, and no weight decay on
biases and LayerNorm parameters (as BERT-family fine-tuning does); ``optim.skip_nonfinite``
skips updates with non-finite gradients (`optax.apply_if_finite`); ``optim.new_params_lr_scale``
gives the parameters the pretrained encoder does not have (`NEW_PARAMS`: POS table, output
layers) their own learning rate, a multiple of the encoder's (1: one rate for all, the papers')."""
from __future__ import annotations

import jax
import ml_collections
import optax
from flax import nnx


def decay_mask(params: nnx.State):
  """True where weight decay applies: kernels and embeddings, not biases or LayerNorm scales."""
  def keep(path, _):
    names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
    if names and names[-1] == "value":  # the Variable's own attribute, not a parameter name
      names = names[:-1]
    return names[-1] not in ("bias", "scale")
  return jax.tree_util.tree_map_with_path(keep, params)


# The parameters a fine-tuning run starts from scratch (not in the pretrained checkpoint): the POS
# embedding table and the output layers of every head.
NEW_PARAMS = ("pos_embeddings", "qa_outputs", "classifier")


def new_params_mask(params: nnx.State):
  """True for the parameters under a module named in `NEW_PARAMS`."""
  def new(path, _):
    names = {str(getattr(k, "key", getattr(k, "name", k))) for k in path}
    return bool(names & set(NEW_PARAMS))
  return jax.tree_util.tree_map_with_path(new, params)


def learning_rate_schedule(lr: float, total_steps: int, warmup_ratio: float,
                           warmup_steps: int = -1):
  """Linear warmup to ``lr`` over ``warmup_steps`` (< 0: ``warmup_ratio`` of the total), then
  linear decay to 0 at ``total_steps``."""
  warmup = warmup_steps if warmup_steps >= 0 else max(int(total_steps * warmup_ratio), 0)
  warmup = min(warmup, total_steps)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, lr, max(warmup, 1)),
       optax.linear_schedule(lr, 0.0, max(total_steps - warmup, 1))], [warmup])


def make_optimizer(optim: ml_collections.ConfigDict, total_steps: int
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  schedule = learning_rate_schedule(optim.lr, total_steps, optim.warmup_ratio,
                                    optim.get("warmup_steps", -1))
  tx = optax.chain(
      optax.clip_by_global_norm(optim.grad_clip) if optim.grad_clip > 0 else optax.identity(),
      optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps,
                  weight_decay=optim.weight_decay, mask=decay_mask))
  scale = optim.get("new_params_lr_scale", 1.0)
  if scale != 1.0:
    # (AdamW's update, weight decay included, is linear in the rate: scaling it is a rate k x lr)
    tx = optax.chain(tx, optax.masked(optax.scale(scale), new_params_mask))
  if optim.get("skip_nonfinite", False):
    # An update whose gradients hold a NaN / inf is dropped (parameters and moments unchanged)
    # and counted in the state (`poi_jax.faults.nonfinite.skipped_updates`). Never give up and
    # apply one: the loop stops if the parameters themselves stop being finite.
    tx = optax.apply_if_finite(tx, max_consecutive_errors=2**31 - 1)
  if optim.accum_steps > 1:
    tx = optax.MultiSteps(tx, every_k_schedule=optim.accum_steps)
  return tx, schedule
