"""train_and_evaluate: read -> featurize -> train (jitted, donated step) -> evaluate -> write.

Single-process and data-parallel over the local devices (see `poi_jax.train.mesh`). Progress is
shown with tqdm (ETA, examples/s); loss, learning rate, gradient norm, examples/s and eval scores
go to ``<workdir>/metrics.jsonl`` and TensorBoard; predictions and ``eval_results.json`` are
written atomically.
"""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from flax import nnx
from tqdm import tqdm

from poi_jax import tasks
from poi_jax.eval.spans import write_json_atomic
from poi_jax.models import build, checks, encoders
from poi_jax.train import mesh as mesh_lib
from poi_jax.train import optim
from poi_jax.train.metrics import MetricWriter


def load_tokenizer(config):
  name = config.model.tokenizer or config.model.init_from
  if not name:
    raise ValueError("model.tokenizer is empty and there is no model.init_from to take the "
                     "tokenizer from")
  tok = encoders.load.load_tokenizer(encoders.resolve_checkpoint(name))
  if tok is None:
    raise ValueError(f"no fast tokenizer found for {name!r}")
  return tok


def batches(arrays: dict[str, np.ndarray], batch_size: int, *, seed: int | None, epoch: int = 0):
  """Fixed-shape batches; the last one is padded (rows repeated) with ``example_mask`` 0.
  ``seed`` None: in order (evaluation)."""
  n = len(next(iter(arrays.values())))
  order = np.arange(n)
  if seed is not None:
    order = np.random.default_rng([seed, epoch]).permutation(n)
  for start in range(0, n, batch_size):
    idx = order[start:start + batch_size]
    mask = np.ones(batch_size, np.float32)
    if len(idx) < batch_size:
      mask[len(idx):] = 0.0
      idx = np.concatenate([idx, np.full(batch_size - len(idx), idx[0])])
    batch = {k: v[idx] for k, v in arrays.items() if k in tasks.MODEL_KEYS}
    batch["example_mask"] = mask
    yield batch


def _global_norm(tree):
  return optax.global_norm(jax.tree.leaves(tree))


@nnx.jit(donate_argnums=(0, 1))
def train_step(model, optimizer, batch):
  def loss_fn(m):
    return m.loss(batch, m(batch, deterministic=False))
  loss, grads = nnx.value_and_grad(loss_fn)(model)
  optimizer.update(model, grads)
  return loss, _global_norm(grads)


@nnx.jit
def predict_step(model, batch):
  return model(batch, deterministic=True)


def _predict(model, features, batch_size, sharding_fn):
  outs = []
  n = len(features.arrays["input_ids"])
  for batch in batches(features.arrays, batch_size, seed=None):
    out = predict_step(model, sharding_fn(batch))
    outs.append({k: np.asarray(v) for k, v in out.items()})
  return {k: np.concatenate([o[k] for o in outs])[:n] for k in outs[0]}


def train_and_evaluate(config, workdir: str, mode: str = "train_and_eval") -> dict:
  """Runs ``mode`` (train | eval | train_and_eval) and returns the last eval results."""
  task = tasks.get_task(config.task)
  if config.model.pos_embedding:
    from poi_jax.data import pos
    pos.ensure_nltk_resources()  # fail now, not after minutes of tokenising
  tokenizer = load_tokenizer(config)
  mesh = mesh_lib.make_mesh(config.mesh)
  n_data = mesh.shape["data"] * mesh.shape["fsdp"]
  for name, bs in (("train.batch_size", config.train.batch_size),
                   ("train.eval_batch_size", config.train.eval_batch_size)):
    if bs % n_data:
      raise mesh_lib.MeshError(f"{name}={bs} is not divisible by the {n_data} data-parallel "
                               f"devices (mesh data x fsdp)")
  # Read and validate everything before any compilation.
  train_records = eval_records = None
  if mode in ("train", "train_and_eval"):
    train_records = task.read(config, "train")[:_cap(config.data.max_train_examples)]
  if mode in ("eval", "train_and_eval"):
    eval_records = task.read(config, "eval")[:_cap(config.data.max_eval_examples)]
  model = build.task_model(config, rngs=nnx.Rngs(config.seed))
  if config.model.init_from:
    from poi_jax.models import poi_net
    if hasattr(model, "pos_embeddings") and hasattr(model, "export_tensors"):
      poi_net.load_pretrained_into(model, config.model.init_from)
    else:
      encoders.load_encoder_weights(model.encoder, config.model.init_from)
  n_params = build.parameter_count(model)
  logging.info("mesh %s, %d parameters", dict(mesh.shape), n_params)
  print(f"mesh {dict(mesh.shape)}; parameters {n_params:,}")
  writer = MetricWriter(workdir, enabled=jax.process_index() == 0)
  results = {}
  with jax.set_mesh(mesh):
    def shard(batch):
      return {k: jax.device_put(v, mesh_lib.batch_sharding(mesh, np.ndim(v)))
              for k, v in batch.items()}

    if train_records is not None:
      feats = task.featurize(train_records, tokenizer, config, is_training=True)
      arrays = feats.arrays
      checks.check_batch({k: v for k, v in arrays.items() if k in tasks.MODEL_KEYS})
      n = len(arrays["input_ids"])
      steps_per_epoch = max(n // config.train.batch_size, 1)
      total = (config.train.max_steps if config.train.max_steps > 0
               else int(config.train.epochs * steps_per_epoch))
      tx, schedule = optim.make_optimizer(config.optim, total)
      optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
      step, epoch = 0, 0
      bar = tqdm(total=total, desc="train", unit="step", dynamic_ncols=True)
      t0 = time.time()
      while step < total:
        for batch in batches(arrays, config.train.batch_size, seed=config.seed, epoch=epoch):
          loss, gnorm = train_step(model, optimizer, shard(batch))
          step += 1
          bar.update(1)
          if step % config.train.log_every == 0 or step == total:
            dt = time.time() - t0
            eps = step * config.train.batch_size / max(dt, 1e-9)
            bar.set_postfix(loss=f"{float(loss):.4f}", ex_s=f"{eps:.1f}")
            writer.write(step, loss=float(loss), lr=float(schedule(step)),
                         grad_norm=float(gnorm), examples_per_s=eps)
          if step >= total:
            break
        epoch += 1
      bar.close()
    if eval_records is not None:
      feats = task.featurize(eval_records, tokenizer, config, is_training=False)
      outputs = _predict(model, feats, config.train.eval_batch_size, shard)
      results = task.evaluate(config, eval_records, feats, outputs, workdir,
                              config.data.eval_file)
      write_json_atomic(os.path.join(workdir, "eval_results.json"), results)
      writer.write(int(config.train.max_steps), **{f"eval/{k}": v for k, v in results.items()
                                                  if isinstance(v, (int, float))})
      print("eval:", {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()})
  writer.close()
  return results


def _cap(n: int):
  return None if n is None or n < 0 else n
