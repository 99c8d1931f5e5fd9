"""The engine: ``train_and_evaluate(config, workdir, mode)`` for every Task.

read -> featurize -> (train: sharded, jitted step with donated state; eval cadence; checkpoints)
-> predict -> decode -> official metrics -> predictions in the workdir.

* Sharding: the mesh of `poi_jax.train.mesh`; model and optimizer state placed by the logical
  rules, the batch split over ``data`` x ``fsdp``; one `jax.jit` step with explicit in/out
  shardings, the state donated. Multi-host: each process builds the same features, its loader
  yields its rows of every global batch, and `jax.make_array_from_process_local_data` assembles
  the global batch.
* Checkpoints (`poi_jax.train.checkpoint`): every ``train.save_every`` steps, at each eval (with
  its metrics, for best-k), at the end, and on SIGTERM; a restart in the same workdir resumes
  from the latest one (parameters, optimizer state, dropout RNG, data position).
* Observability: the resolved config, the mesh and the parameter count at start; a tqdm bar
  (ETA, examples/s) on process 0; loss, learning rate, gradient norm, examples/s and eval scores
  to ``metrics.jsonl`` and TensorBoard.
* Modes: ``train``, ``eval`` (the best checkpoint, else the latest, else ``model.init_from``),
  ``train_and_eval``, ``predict`` (``data.predict_file``, no answers needed; predictions only).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import jax
import numpy as np
import optax
from absl import logging
from flax import nnx
from tqdm import tqdm

from poi_jax import tasks
from poi_jax.data.loader import TrainLoader, eval_batches
from poi_jax.eval.spans import write_json_atomic
from poi_jax.layers import sharding
from poi_jax.models import build, checks, encoders
from poi_jax.train import checkpoint as ckpt_lib
from poi_jax.train import mesh as mesh_lib
from poi_jax.train import optim
from poi_jax.train.metrics import MetricWriter

MODES = ("train", "eval", "train_and_eval", "predict")


class Preempted(RuntimeError):
  """Raised after the checkpoint of a run stopped by SIGTERM has been written."""


def load_tokenizer(config):
  name = config.model.tokenizer or config.model.init_from
  if not name:
    raise ValueError("model.tokenizer is empty and there is no model.init_from to take the "
                     "tokenizer from")
  tok = encoders.load.load_tokenizer(encoders.resolve_checkpoint(name))
  if tok is None:
    raise ValueError(f"no fast tokenizer found for {name!r}")
  return tok


def check_batch_sizes(config, mesh) -> None:
  """Batch sizes divisible by the data-parallel devices and by the processes (before compile)."""
  n_data = mesh_lib.data_parallel_size(mesh)
  for name in ("batch_size", "eval_batch_size"):
    bs = int(config.train[name])
    if bs <= 0:
      raise mesh_lib.MeshError(f"train.{name}={bs} must be positive")
    if bs % n_data:
      raise mesh_lib.MeshError(f"train.{name}={bs} is not divisible by the {n_data} "
                               f"data-parallel devices (mesh data x fsdp = "
                               f"{mesh.shape['data']} x {mesh.shape['fsdp']})")
    if bs % jax.process_count():
      raise mesh_lib.MeshError(f"train.{name}={bs} is not divisible by the "
                               f"{jax.process_count()} processes")


def _global_batch(local: dict[str, np.ndarray], mesh) -> dict[str, jax.Array]:
  return {k: jax.make_array_from_process_local_data(mesh_lib.batch_sharding(mesh, np.ndim(v)),
                                                    np.asarray(v))
          for k, v in local.items()}


def _place(tree, shardings):
  """Host values -> global arrays with ``shardings``. Every process holds the same values (same
  seed, same checkpoint), and each materialises only its own shards, which also works when the
  mesh spans processes (where `jax.device_put` cannot target other hosts' devices)."""
  def one(x, sharding):
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      data = np.asarray(jax.random.key_data(x))
      arr = jax.make_array_from_callback(data.shape, sharding, lambda i: data[i])
      return jax.random.wrap_key_data(arr, impl=jax.random.key_impl(x))
    value = np.asarray(x)
    return jax.make_array_from_callback(value.shape, sharding, lambda i: value[i])
  return jax.tree.map(one, tree, shardings)


def _to_host(tree):
  """Global arrays -> numpy on every process (gathers across processes when there are several).
  PRNG key arrays (replicated RNG state) stay JAX arrays: this process's copy."""
  def one(x):
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      return x.addressable_data(0)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils
      return multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(x)
  return jax.tree.map(one, tree)


@dataclasses.dataclass
class _Run:
  """The jitted functions and the sharded state of one run."""
  graphdef: Any
  state: nnx.State
  shardings: Any
  mesh: Any
  train_step: Any = None
  predict_step: Any = None
  rules: tuple = ()


def create_run(model: nnx.Module, optimizer: nnx.Optimizer, mesh, rules,
               batch_ndims: dict[str, int], *, require_sharded_params: bool = False) -> _Run:
  """Places model + optimizer state on ``mesh`` by the logical ``rules`` and compiles-on-first-use
  the train and predict steps (activations constrained by the same rules). ``batch_ndims``: the
  model's batch arrays and their ranks (``example_mask`` is added)."""
  graphdef, state = nnx.split((model, optimizer))
  shardings = mesh_lib.state_shardings(state, mesh, rules)
  mesh_lib.check_sharded(state, shardings, mesh, require=require_sharded_params)
  run = _Run(graphdef, _place(state, shardings), shardings, mesh, rules=tuple(rules))
  _make_steps(run, dict(batch_ndims, example_mask=1))
  return run


def _make_steps(run: _Run, batch_keys: dict[str, int]) -> None:
  graphdef, mesh = run.graphdef, run.mesh
  batch_sh = {k: mesh_lib.batch_sharding(mesh, nd) for k, nd in batch_keys.items()}

  def train_step(state, batch):
    model, optimizer = nnx.merge(graphdef, state)

    def loss_fn(m):
      with sharding.axis_rules(mesh, run.rules):  # activations placed by the rules
        return m.loss(batch, m(batch, deterministic=False))

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), {"loss": loss,
                                           "grad_norm": optax.tree.norm(grads)}

  # Both steps take the whole state (model + optimizer) so that one pytree, with one set of
  # shardings, is what the loop and the checkpointer handle.
  def predict_step(state, batch):
    model, _ = nnx.merge(graphdef, state)
    with sharding.axis_rules(mesh, run.rules):
      return model(batch, deterministic=True)

  run.train_step = jax.jit(train_step, in_shardings=(run.shardings, batch_sh),
                           out_shardings=(run.shardings, None), donate_argnums=0)
  run.predict_step = jax.jit(predict_step, in_shardings=(run.shardings, None))


def _predict(run: _Run, task, features, batch_size: int) -> dict[str, np.ndarray]:
  arrays = task.model_arrays(features.arrays)
  n = len(next(iter(arrays.values())))
  outs = []
  for local in eval_batches(arrays, batch_size, process_index=jax.process_index(),
                            process_count=jax.process_count()):
    out = run.predict_step(run.state, _global_batch(local, run.mesh))
    outs.append(_to_host(out))
  return {k: np.concatenate([o[k] for o in outs])[:n] for k in outs[0]}


def _evaluate(run, task, config, records, features, workdir, *, step, writer, checkpointer,
              meta_fn) -> dict:
  """Predicts, decodes and scores. Every process scores (they hold the same gathered outputs
  and must pass the same metrics to orbax); only process 0 writes into the workdir."""
  import tempfile
  outputs = _predict(run, task, features, config.train.eval_batch_size)
  if jax.process_index() == 0:
    results = task.evaluate(config, records, features, outputs, workdir)
    write_json_atomic(os.path.join(workdir, "eval_results.json"), dict(results, step=step))
    writer.write(step, **{f"eval/{k}": v for k, v in results.items()
                          if isinstance(v, (int, float))})
    print(f"eval @ step {step}:",
          {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()})
  else:
    with tempfile.TemporaryDirectory() as scratch:
      results = task.evaluate(config, records, features, outputs, scratch)
  if checkpointer is not None and step > 0:
    metric = checkpointer.best_metric
    checkpointer.save(step, run.state, meta_fn(),
                      metrics={metric: float(results[metric])} if metric in results else None)
  return results


def _with_cache_dir(config, workdir: str):
  """``data.cache_dir`` resolved: empty -> ``<workdir>/cache``; "none" -> no cache."""
  cache_dir = config.data.get("cache_dir", None)
  if cache_dir is None or (cache_dir and cache_dir != "none"):
    return config
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.data.cache_dir = "" if cache_dir == "none" else os.path.join(workdir, "cache")
  return config


def train_and_evaluate(config, workdir: str, mode: str = "train_and_eval") -> dict:
  """Runs ``mode`` and returns the last eval results. Raises `Preempted` after SIGTERM (the
  checkpoint is saved; run the same command again to resume)."""
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  task = tasks.get_task(config.task)
  config = _with_cache_dir(config, workdir)
  best_metric = config.train.best_metric or task.metric
  mesh = mesh_lib.make_mesh(config.mesh)
  check_batch_sizes(config, mesh)
  if config.model.pos_embedding:
    from poi_jax.data import pos
    pos.ensure_nltk_resources()  # fail now, not after minutes of tokenising
  tokenizer = load_tokenizer(config) if task.tokenizer_needed(config) else None

  # Read and validate every input before anything is compiled.
  train_records = eval_records = None
  if mode in ("train", "train_and_eval"):
    train_records = tasks.cap(task.read(config, "train"), config.data.max_train_examples)
  if mode in ("eval", "train_and_eval"):
    eval_records = tasks.cap(task.read(config, "eval"), config.data.max_eval_examples)
  if mode == "predict":
    eval_records = tasks.cap(task.read(config, "predict"), config.data.max_eval_examples)

  model = task.build_model(config, nnx.Rngs(config.seed))
  if config.model.init_from and task.load_pretrained is not None:
    report = task.load_pretrained(model, config.model.init_from)
    logging.info("loaded %s: %s", config.model.init_from, report)
  n_params = build.parameter_count(model)
  is_chief = jax.process_index() == 0
  if is_chief:
    os.makedirs(workdir, exist_ok=True)
    write_json_atomic(os.path.join(workdir, "config.json"), json.loads(config.to_json()))
    print(f"task {config.task}; mesh {dict(mesh.shape)} over {jax.device_count()} devices, "
          f"{jax.process_count()} process(es); parameters {n_params:,}")
  logging.info("config:\n%s", config)
  signature = ckpt_lib.model_signature(config, nnx.state(model, nnx.Param))
  ckpt_lib.check_workdir(workdir, signature)

  train_features = None
  total = 1
  if train_records is not None:
    train_features = task.featurize(train_records, tokenizer, config, is_training=True)
    train_arrays = task.model_arrays(train_features.arrays)
    if checks.is_concrete(train_arrays) and "input_ids" in train_arrays:
      checks.check_batch(train_arrays)
    n_train = len(next(iter(train_arrays.values())))
    steps_per_epoch = max(n_train // config.train.batch_size, 1)
    total = (config.train.max_steps if config.train.max_steps > 0
             else max(int(config.train.epochs * steps_per_epoch), 1))
  eval_features = None
  if eval_records is not None:
    eval_features = task.featurize(eval_records, tokenizer, config, is_training=False)

  accum = max(int(config.optim.accum_steps), 1)
  tx, schedule = optim.make_optimizer(config.optim, total)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  writer = MetricWriter(workdir, enabled=is_chief)
  results: dict = {}
  with jax.set_mesh(mesh):
    feats_for_keys = train_features or eval_features
    keys = {k: np.ndim(v) for k, v in task.model_arrays(feats_for_keys.arrays).items()}
    run = create_run(model, optimizer, mesh, config.mesh.rules, keys,
                     require_sharded_params=config.mesh.get("require_sharded_params", False))
    del model, optimizer
    checkpointer = ckpt_lib.Checkpointer(workdir, keep=config.train.keep_checkpoints,
                                         best_metric=best_metric,
                                         higher_is_better=task.higher_is_better)
    try:
      if train_features is not None:
        results = _train(run, task, config, workdir, train_features, eval_records,
                         eval_features, total, accum, schedule, writer, checkpointer,
                         evaluate_at_end=mode == "train_and_eval")
        if config.train.export_best and task.export_pretrained is not None:
          _export_best(run, task, checkpointer, workdir, tokenizer)
      elif eval_features is not None:
        step = checkpointer.best_step() or checkpointer.latest_step()
        if step is not None:
          run.state, _ = checkpointer.restore(step, run.state)
          print(f"evaluating checkpoint {step}")
        else:
          print("no checkpoint in the workdir: evaluating the initial weights")
        eval_config = config
        if mode == "predict":
          eval_config = config.copy_and_resolve_references()
          with eval_config.unlocked():
            eval_config.data.eval_file = ""  # predictions only, no scoring
        results = _evaluate(run, task, eval_config, eval_records, eval_features, workdir,
                            step=step or 0, writer=writer, checkpointer=None, meta_fn=None)
    finally:
      checkpointer.close()
      writer.close()
  return results


def _train(run, task, config, workdir, features, eval_records, eval_features, total, accum,
           schedule, writer, checkpointer, *, evaluate_at_end: bool) -> dict:
  arrays = task.model_arrays(features.arrays)
  loader = TrainLoader(arrays, config.train.batch_size, seed=config.seed,
                       process_index=jax.process_index(), process_count=jax.process_count())
  n_train = loader.num_examples
  steps_per_epoch = max(n_train // config.train.batch_size, 1)
  eval_every = (config.train.eval_every if config.train.eval_every > 0 else steps_per_epoch)
  micro_total = total * accum  # loader batches; the optimizer updates every `accum` of them
  step = 0
  latest = checkpointer.latest_step()
  if latest is not None:
    run.state, meta = checkpointer.restore(latest, run.state)
    loader.set_state(meta["loader"])
    step = int(meta["step"])
    print(f"resumed from checkpoint {step} in {workdir}")

  def meta():
    return {"step": step, "loader": loader.get_state(), "epoch": loader.epoch(step)}

  results: dict = {}
  is_chief = jax.process_index() == 0
  bar = tqdm(total=micro_total, initial=step, desc="train", unit="step", dynamic_ncols=True,
             disable=not is_chief)
  t0, done_at_t0 = time.time(), step
  window: list = []
  with ckpt_lib.PreemptionWatcher() as watcher:
    while step < micro_total:
      batch = _global_batch(next(loader), run.mesh)
      run.state, out = run.train_step(run.state, batch)
      step += 1
      bar.update(1)
      window.append(out)
      if step % config.train.log_every == 0 or step == micro_total:
        vals = jax.device_get(window)
        loss = float(np.mean([v["loss"] for v in vals]))
        gnorm = float(np.mean([v["grad_norm"] for v in vals]))
        window = []
        eps = (step - done_at_t0) * config.train.batch_size / max(time.time() - t0, 1e-9)
        bar.set_postfix(loss=f"{loss:.4f}", ex_s=f"{eps:.1f}", epoch=f"{loader.epoch(step):.2f}")
        writer.write(step, loss=loss, lr=float(schedule(step // accum)), grad_norm=gnorm,
                     examples_per_s=eps, epoch=loader.epoch(step))
      evaluated = False
      if eval_features is not None and (step % eval_every == 0) and step < micro_total:
        results = _evaluate(run, task, config, eval_records, eval_features, workdir, step=step,
                            writer=writer, checkpointer=checkpointer, meta_fn=meta)
        evaluated = True
      final_eval = step == micro_total and evaluate_at_end and eval_features is not None
      if not evaluated and not final_eval and (step % config.train.save_every == 0
                                               or step == micro_total):
        checkpointer.save(step, run.state, meta())  # (the final eval saves with its metrics)
      if watcher.requested():
        checkpointer.save(step, run.state, meta())
        bar.close()
        print(f"SIGTERM: checkpoint {step} saved in {workdir}; run again to resume")
        raise Preempted(f"preempted at step {step}")
  bar.close()
  if evaluate_at_end and eval_features is not None:
    results = _evaluate(run, task, config, eval_records, eval_features, workdir, step=step,
                        writer=writer, checkpointer=checkpointer, meta_fn=meta)
  return results


def _export_best(run, task, checkpointer, workdir, tokenizer) -> None:
  """The best checkpoint's (else the final) encoder as a HuggingFace directory."""
  state = run.state
  best = checkpointer.best_step()
  if best is not None:
    state, _ = checkpointer.restore(best, run.state)
  host = _to_host(state)
  if jax.process_index() != 0:
    return
  model, _ = nnx.merge(run.graphdef, host)
  out = os.path.join(workdir, "export")
  task.export_pretrained(model, out, tokenizer)
  print(f"exported the {'best (step %d)' % best if best is not None else 'final'} encoder to "
        f"{out}")
