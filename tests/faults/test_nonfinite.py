"""A diverging loss: ``--config.optim.lr=1e6`` on the tiny config stops at the first non-finite
step with one line naming it and the last good checkpoint; every checkpoint left is finite and
nothing is exported. ``optim.skip_nonfinite`` drops non-finite updates (optax.apply_if_finite)
and counts them."""
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from poi_jax.faults import nonfinite
from poi_jax.train import optim
from tests.train import engine_runs as er


def test_lr_1e6_stops_at_the_nan_step_and_keeps_only_finite_checkpoints(tmp_path):
  work = tmp_path / "w"
  out = er.run_main(*er.tiny_args(work, "--mode=train", "--config.optim.lr=1e6",
                                  "--config.train.save_every=1"))
  assert out.returncode == 1, out.stderr[-3000:]
  last = out.stderr.strip().splitlines()[-1]
  assert last.startswith("error: non-finite loss at step "), out.stderr[-2000:]
  assert "Traceback" not in out.stderr
  bad = int(last.split("at step ")[1].split()[0])
  logged = er.losses(work)
  assert bad > 1 and all(math.isfinite(logged[s]) for s in range(1, bad))
  kept = sorted(int(p.name) for p in (work / "checkpoints").iterdir() if p.name.isdigit())
  assert kept and max(kept) == bad - 1  # the step before the NaN, nothing after it
  assert f"the last good checkpoint is step {bad - 1} in {work / 'checkpoints'}" in last
  for step in kept:
    arrays = ocp.StandardCheckpointer().restore(work / "checkpoints" / str(step) / "state")
    floats = [np.asarray(x) for x in jax.tree.leaves(arrays)
              if np.issubdtype(np.asarray(x).dtype, np.floating)]
    assert floats and all(np.isfinite(x).all() for x in floats), step
  assert not (work / "export").exists()  # no NaN encoder exported


def _optimizer(skip):
  cfg = ml_collections.ConfigDict(dict(lr=0.1, warmup_ratio=0.0, weight_decay=0.0, b1=0.9,
                                       b2=0.999, eps=1e-6, grad_clip=1.0, accum_steps=1,
                                       skip_nonfinite=skip))
  model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
  return model, nnx.Optimizer(model, optim.make_optimizer(cfg, 10)[0], wrt=nnx.Param)


def test_skip_nonfinite_leaves_the_parameters_and_counts_the_skip():
  model, opt = _optimizer(skip=True)
  before = np.asarray(model.kernel[...]).copy()
  grads = jax.tree.map(lambda x: jnp.full_like(x, jnp.nan), nnx.state(model, nnx.Param))
  opt.update(model, grads)
  np.testing.assert_array_equal(np.asarray(model.kernel[...]), before)
  state = nnx.state((model, opt))
  assert nonfinite.skipped_updates(state) == 1 and nonfinite.state_is_finite(state)
  opt.update(model, jax.tree.map(jnp.ones_like, grads))  # a finite update still applies
  assert not np.array_equal(np.asarray(model.kernel[...]), before)
  assert nonfinite.skipped_updates(nnx.state((model, opt))) == 1

  model, opt = _optimizer(skip=False)  # the default: no skipping, the loop stops instead
  assert nonfinite.skipped_updates(nnx.state((model, opt))) is None
  opt.update(model, grads)
  assert not nonfinite.state_is_finite(nnx.state((model, opt)))


def test_first_nonfinite_names_the_step_of_the_window():
  window = [{"loss": 1.0, "grad_norm": 2.0}, {"loss": 1.0, "grad_norm": float("inf")},
            {"loss": float("nan"), "grad_norm": 1.0}]
  step, out = nonfinite.first_nonfinite(window, last_step=12)
  assert step == 11 and out["grad_norm"] == float("inf")
  assert nonfinite.first_nonfinite(window[:1], last_step=10) is None
  assert nonfinite.finite_mean([1.0, float("nan"), 3.0]) == 2.0


@pytest.mark.slow  # a second engine run (about a minute on 2 cores); `pytest -m slow`
def test_lr_1e6_with_skip_nonfinite_trains_on_and_counts_the_skips(tmp_path):
  work = tmp_path / "w"
  out = er.run_main(*er.tiny_args(work, "--mode=train", "--config.optim.lr=1e6",
                                  "--config.optim.skip_nonfinite=true",
                                  "--config.train.export_best=false"))
  assert out.returncode == 0, out.stderr[-3000:]
  rows = [r for r in er.rows(work) if "loss" in r]
  assert [r["step"] for r in rows] == list(range(1, 21))
  skipped = [r["nonfinite_skipped"] for r in rows]
  assert skipped == sorted(skipped) and skipped[-1] > 0  # counted, never reset
  last = ocp.StandardCheckpointer().restore(work / "checkpoints" / "20" / "state")
  assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(last)
             if np.issubdtype(np.asarray(x).dtype, np.floating))
