"""Gradient accumulation: ``optim.accum_steps=2`` over two half batches updates the parameters
as one step over the whole batch does (dropout off; every example has an answer, so the span
loss's per-batch normalisation is the same)."""
import jax
import numpy as np
from flax import nnx

from configs import squad2
from poi_jax import tasks
from poi_jax.train import optim, placement
from poi_jax.train import step as step_lib
from poi_jax.train import mesh as mesh_lib


def _batch(b=8, l=24, seed=0):
  rng = np.random.default_rng(seed)
  start = rng.integers(8, l - 2, (b,)).astype(np.int32)
  return {
      "input_ids": rng.integers(1, 1000, (b, l)).astype(np.int32),
      "attention_mask": np.ones((b, l), np.int32),
      "token_type_ids": np.concatenate([np.zeros((b, 7)), np.ones((b, l - 7))], 1)
                          .astype(np.int32),
      "pos_tags": rng.integers(1, 39, (b, l)).astype(np.int32),
      "con_start": np.full((b,), 6, np.int32),
      "con_end": np.full((b,), l - 1, np.int32),
      "start_positions": start,
      "end_positions": np.minimum(start + 1, l - 1).astype(np.int32),
      "example_mask": np.ones((b,), np.float32),
  }


def _params_after(batches, accum):
  config = squad2.get_config("tiny")
  with config.unlocked():
    config.optim.accum_steps = accum
    config.model.dropout = 0.0
    config.optim.warmup_ratio = 0.0  # the first update has a non-zero learning rate
  mesh = mesh_lib.make_mesh(config.mesh)
  model = tasks.build_model(config, nnx.Rngs(0))
  tx, _ = optim.make_optimizer(config.optim, 10)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, optimizer, mesh, config.mesh.rules,
                          {k: v.ndim for k, v in _batch().items() if k != "example_mask"})
    for b in batches:
      run.state, _ = run.train_step(run.state, placement.global_batch(b, mesh))
  model, _ = nnx.merge(run.graphdef, run.state)
  return jax.tree.map(np.asarray, nnx.state(model, nnx.Param))


def test_two_accumulated_half_batches_equal_one_full_batch():
  full = _batch()
  halves = [{k: v[:4] for k, v in full.items()}, {k: v[4:] for k, v in full.items()}]
  a = _params_after([full], accum=1)
  b = _params_after(halves, accum=2)
  init = _params_after([], accum=1)
  moved = []
  for (path, x), y, z in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b),
                             jax.tree.leaves(init)):
    # 1e-5 = 1% of one Adam step (lr 1e-3). The span head's bias is the exception: its gradient
    # is exactly zero (a constant added to every position's logit leaves the softmax
    # cross-entropy over positions unchanged), so each run's gradient is float noise in the
    # order of its sums, and Adam's first step turns that noise into an update of up to
    # lr * noise / (noise + eps) in either direction: the two runs agree within two steps only.
    name = jax.tree_util.keystr(path)
    atol = 2e-3 if "qa_outputs" in name and "bias" in name else 1e-5
    np.testing.assert_allclose(y, x, atol=atol, err_msg=name)
    moved.append(np.abs(x - z).max())
  assert max(moved) > 1e-4  # the update happened (after the second half batch)


def test_the_stepped_state_is_pure_on_both_sides_of_the_call():
  """The engine steps a state of plain arrays (poi_jax/train/step.py): a `Variable` left in it
  costs Python time per array on each call (docs/performance.md "The step's host time")."""
  config = squad2.get_config("tiny")
  mesh = mesh_lib.make_mesh(config.mesh)
  model = tasks.build_model(config, nnx.Rngs(0))
  tx, _ = optim.make_optimizer(config.optim, 10)
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, nnx.Optimizer(model, tx, wrt=nnx.Param), mesh,
                                        config.mesh.rules,
                                        {k: v.ndim for k, v in _batch().items()
                                         if k != "example_mask"})
    after, _ = run.train_step(run.state, placement.global_batch(_batch(), mesh))
  is_variable = lambda x: isinstance(x, nnx.Variable)  # noqa: E731
  for tree in (run.state, run.shardings, after):
    assert not any(map(is_variable, jax.tree.leaves(tree, is_leaf=is_variable)))
  assert jax.tree.structure(after) == jax.tree.structure(run.state)
