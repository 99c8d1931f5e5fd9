"""Non-finite losses: found at the step they happen, without an extra host sync per step.

The train step already returns ``{"loss", "grad_norm"}`` per step; the loop keeps them (on the
device) until its logging boundary, where it fetches them anyway. `first_nonfinite` looks there
for the first NaN / inf, and the loop calls it again before every save and evaluation, where it
also checks the parameters themselves (`state_is_finite`: one reduction on the device, next to
a save that reads every array anyway), so no checkpoint, prediction or export is ever made from
non-finite parameters.

Default: stop (`poi_jax.faults.NonFiniteLoss`) naming the step and the last good checkpoint.
``optim.skip_nonfinite``: `optax.apply_if_finite` drops every update whose gradients are not
finite (the parameters and optimizer moments stay as they were); the count of skipped updates
(`skipped_updates`, from that transformation's state) goes to ``metrics.jsonl`` as
``nonfinite_skipped``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from poi_jax.faults import NonFiniteLoss


def first_nonfinite(values: list[dict], last_step: int) -> tuple[int, dict] | None:
  """``values``: the host copies of the step outputs of steps ``last_step - len(values) + 1 ..
  last_step``. Returns (step, its outputs) of the first one with a non-finite loss or gradient
  norm, or None."""
  first = last_step - len(values) + 1
  for i, v in enumerate(values):
    if not (math.isfinite(float(v["loss"])) and math.isfinite(float(v["grad_norm"]))):
      return first + i, v
  return None


@jax.jit
def _all_finite(leaves) -> jax.Array:
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def state_is_finite(state) -> bool:
  """Whether every floating-point array of ``state`` (parameters, optimizer moments) is finite."""
  leaves = [x for x in jax.tree.leaves(state)
            if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating)]
  return bool(_all_finite(leaves)) if leaves else True


def skipped_updates(state) -> int | None:
  """Updates `optax.apply_if_finite` has skipped so far (None: it is not in the optimizer)."""
  counts = [x for p, x in jax.tree_util.tree_leaves_with_path(state)
            if "total_notfinite" in jax.tree_util.keystr(p)]
  return int(sum(int(np.asarray(c)) for c in counts)) if counts else None


def finite_mean(values: list[float]) -> float:
  """The mean of the finite values (NaN when there is none): the logged loss of a window in
  which some updates were skipped."""
  ok = [v for v in values if math.isfinite(v)]
  return float(np.mean(ok)) if ok else float("nan")


def stop(step: int, out: dict | None, last_good: int | None, checkpoint_dir: str,
         *, what: str = "") -> NonFiniteLoss:
  """The one-line error for a non-finite ``step``: what went non-finite, the last good
  checkpoint, what to do."""
  if out is not None:
    what = (f"non-finite loss at step {step} (loss {float(out['loss']):g}, gradient norm "
            f"{float(out['grad_norm']):g})")
  kept = (f"the last good checkpoint is step {last_good} in {checkpoint_dir}" if last_good
          is not None else "no checkpoint was saved before it")
  return NonFiniteLoss(f"{what}; stopped without saving it: {kept}. Lower optim.lr or "
                       f"optim.grad_clip, or set optim.skip_nonfinite=True to skip non-finite "
                       f"updates")
