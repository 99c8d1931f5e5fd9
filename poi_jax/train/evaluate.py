"""Evaluation inside a run: predict over a split's features on the mesh, decode and score with
the task, write the results, and export the best encoder."""
from __future__ import annotations

import os
import tempfile

import jax
import numpy as np
from flax import nnx

from poi_jax.data.loader import eval_batches
from poi_jax.io import write_json_atomic
from poi_jax.train import placement


def predict(run, features, batch_size: int) -> dict[str, np.ndarray]:
  """The model's outputs over all ``features`` (numpy, leading axis = number of features)."""
  sharded = run.sharded
  arrays = run.task.model_arrays(features.arrays)
  n = len(next(iter(arrays.values())))
  outs = []
  for local in eval_batches(arrays, batch_size, process_index=jax.process_index(),
                            process_count=jax.process_count()):
    out = sharded.predict_step(sharded.state, placement.global_batch(local, sharded.mesh))
    outs.append(placement.to_host(out))
  return {k: np.concatenate([o[k] for o in outs])[:n] for k in outs[0]}


def evaluate(run, *, step: int, config=None, meta_fn=None, save: bool = True) -> dict:
  """Predicts ``run.eval``, decodes and scores it. Every process scores (they hold the same
  gathered outputs and must pass the same metrics to orbax); only process 0 writes into the
  workdir. With ``save`` (training), the checkpoint of ``step`` is saved with its metric so the
  best one is known. ``config``: overrides ``run.config`` for decoding (predict mode)."""
  config = config or run.config
  split = run.eval
  outputs = predict(run, split.features, config.train.eval_batch_size)
  if run.is_chief:
    results = run.task.evaluate(config, split.records, split.features, outputs, run.workdir)
    write_json_atomic(os.path.join(run.workdir, "eval_results.json"), dict(results, step=step))
    run.writer.write(step, **{f"eval/{k}": v for k, v in results.items()
                              if isinstance(v, (int, float))})
    print(f"eval @ step {step}:",
          {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()})
  else:
    with tempfile.TemporaryDirectory() as scratch:
      results = run.task.evaluate(config, split.records, split.features, outputs, scratch)
  if save and step > 0:
    metric = run.checkpointer.best_metric
    run.checkpointer.save(step, run.sharded.state, meta_fn(),
                          metrics={metric: float(results[metric])} if metric in results else None)
  return results


def export_best(run) -> None:
  """The best checkpoint's (else the final) encoder as a HuggingFace directory."""
  sharded, checkpointer = run.sharded, run.checkpointer
  state = sharded.state
  best = checkpointer.best_step()
  if best is not None:
    state, _ = checkpointer.restore(best, sharded.state)
  host = placement.to_host(state)
  if jax.process_index() != 0:
    return
  model, _ = nnx.merge(sharded.graphdef, host)
  out = os.path.join(run.workdir, "export")
  run.task.export_pretrained(model, out, run.tokenizer)
  print(f"exported the {'best (step %d)' % best if best is not None else 'final'} encoder to "
        f"{out}")
