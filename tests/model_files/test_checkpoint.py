"""The checkpointer keeps the last k and the best by the eval metric, reports the best step from
the stored metrics, and restores state (including PRNG keys) exactly."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from poi_jax.model_files.checkpoint import Checkpointer


class _Tiny(nnx.Module):

  def __init__(self, rngs):
    self.w = nnx.Param(jax.random.normal(rngs.params(), (3, 2)))
    self.rngs = nnx.Rngs(dropout=rngs.dropout())


def _state(seed):
  return nnx.state(_Tiny(nnx.Rngs(params=seed, dropout=seed + 1)))


def test_keeps_latest_and_best_and_restores_exactly(tmp_path):
  ck = Checkpointer(str(tmp_path), keep=2, best_metric="f1")
  f1 = {2: 50.0, 4: 70.0, 6: 60.0, 8: None, 10: 65.0}
  states = {}
  for step, score in f1.items():
    states[step] = _state(step)
    ck.save(step, states[step], {"step": step},
            metrics=None if score is None else {"f1": score})
  assert sorted(ck.manager.all_steps()) == [4, 8, 10]  # best (4) + last two
  assert ck.best_step() == 4 and ck.latest_step() == 10
  restored, meta = ck.restore(4, _state(0))
  assert meta == {"step": 4}
  for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(states[4])):
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
      a, b = jax.random.key_data(a), jax.random.key_data(b)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  ck.close()


def test_lower_is_better_metric(tmp_path):
  ck = Checkpointer(str(tmp_path), keep=1, best_metric="loss", higher_is_better=False)
  for step, loss in ((1, 0.5), (2, 0.2), (3, 0.9)):
    ck.save(step, _state(step), {}, metrics={"loss": loss})
  assert ck.best_step() == 2 and sorted(ck.manager.all_steps()) == [2, 3]
  ck.close()
