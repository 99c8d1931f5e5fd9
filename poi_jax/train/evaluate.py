"""Evaluation inside a run: predict over a split's features on the mesh, decode and score with
the task, write the results together, and export the best encoder.

Where files go: while training, into the workdir (``predictions.json``, ``eval_results.json``,
...: the latest evaluation's); for ``--mode=eval`` / ``predict``, into the run's own
``output_dir`` (`poi_jax.train.setup.default_output_dir`), with that evaluation's
``config.json``, so the training run's files are never touched. One evaluation's files are first
written to a staging directory and then moved into place together.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

from poi_jax import faults
from poi_jax.data.loader import eval_batches
from poi_jax.io import default_mode, write_json_atomic
from poi_jax.train import placement
from poi_jax.train import watchdog
from poi_jax.train.setup import config_dict


def predict(run, split, batch_size: int, *, desc: str = "predict") -> dict[str, np.ndarray]:
  """The model's outputs over every window of ``split`` (numpy, leading axis = number of
  windows); the windows are read batch by batch from the split's feature shards."""
  sharded = run.sharded
  rows = split.shards.rows(run.task.model_keys)
  n = len(rows)
  outs = []
  batches = eval_batches(rows, batch_size, process_index=jax.process_index(),
                         process_count=jax.process_count())
  n_batches = -(-n // batch_size)
  for local in tqdm(batches, total=n_batches, desc=desc, unit="batch", leave=False,
                    dynamic_ncols=True, disable=not run.is_chief):
    out = sharded.predict_step(sharded.state, placement.global_batch(local, sharded.mesh))
    watchdog.progress(phase="evaluating")  # (before the gather; see the training loop)
    outs.append(placement.to_host(out))
  return {k: np.concatenate([o[k] for o in outs])[:n] for k in outs[0]}


def _publish(staging: str, out_dir: str, whole_dir: bool) -> None:
  """Moves the files of ``staging`` into ``out_dir``. ``whole_dir``: ``out_dir`` is this
  evaluation's alone, so the directory itself is swapped (an older one of the same name goes)."""
  if whole_dir:
    old = None
    if os.path.exists(out_dir):
      old = tempfile.mkdtemp(dir=os.path.dirname(out_dir), prefix=".old-")
      os.replace(out_dir, os.path.join(old, "d"))
    os.replace(staging, out_dir)
    if old:
      shutil.rmtree(old, ignore_errors=True)
    return
  for name in sorted(os.listdir(staging)):
    os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
  os.rmdir(staging)


def evaluate(run, *, step: int, meta_fn=None, save: bool = True) -> dict:
  """Predicts ``run.eval``, decodes and (except in predict mode) scores it. Every process scores
  (they hold the same gathered outputs and must pass the same metrics to orbax); only process 0
  writes. With ``save`` (training), the checkpoint of ``step`` is saved with its metric so the
  best one is known."""
  config, split = run.config, run.eval
  score = run.mode != "predict"
  outputs = predict(run, split, config.train.eval_batch_size,
                    desc="predict" if not score else f"eval @ {step}")
  # Decoding maps windows back to questions: the split's arrays and meta, for this evaluation
  # only (training never holds them).
  features = split.load_features()
  counts = {"num_questions": len(split.records), "num_questions_in_source": split.num_in_source}
  if run.is_chief:
    out_dir = os.path.abspath(run.output_dir)
    whole_dir = out_dir != os.path.abspath(run.workdir)
    parent = os.path.dirname(out_dir) if whole_dir else out_dir
    staging = None
    try:
      os.makedirs(parent, exist_ok=True)
      staging = tempfile.mkdtemp(dir=parent, prefix=".staging-")
      os.chmod(staging, default_mode(directory=True))
      results = run.task.evaluate(config, split.records, features, outputs, staging,
                                  score=score)
      write_json_atomic(os.path.join(staging, "eval_results.json"),
                        dict(results, step=step, **counts))
      if run.mode in ("eval", "predict"):
        write_json_atomic(os.path.join(staging, "config.json"), config_dict(config),
                          sort_keys=True)
      _publish(staging, out_dir, whole_dir=whole_dir)
    except BaseException as e:
      if staging:
        shutil.rmtree(staging, ignore_errors=True)
      if isinstance(e, Exception) and faults.is_os_failure(e):  # a full or failing disk
        raise faults.WriteFailed(
            f"could not write the {'predictions' if not score else 'evaluation'} of step "
            f"{step} to {out_dir}: {faults.cause(e)}; the previous files there are kept; free "
            f"space, then run the same command again") from e
      raise
    if run.mode != "predict":
      run.writer.write(step, **{f"eval/{k}": v for k, v in results.items()
                                if isinstance(v, (int, float))})
    shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in results.items()}
    tqdm.write(f"{'predictions' if not score else 'eval'} @ step {step} "
               f"({len(split.records)} of {split.num_in_source} questions) -> {out_dir}"
               + (f": {shown}" if shown else ""))
  else:
    with tempfile.TemporaryDirectory() as scratch:
      results = run.task.evaluate(config, split.records, features, outputs, scratch,
                                  score=score)
  if save and step > 0:
    metric = run.checkpointer.best_metric
    # Every numeric score is kept with the checkpoint: `poi_jax.reader` reads the SQuAD 2.0 null
    # threshold tuned on this evaluation from it.
    scores = {k: float(v) for k, v in results.items() if isinstance(v, (int, float))}
    run.checkpointer.save(step, run.sharded.state, meta_fn(),
                          metrics=scores if metric in results else None)
  return dict(results, **counts)


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
  from poi_jax import export_files  # the head, config and null threshold, for `Reader.load`
  export_files.write(out, model, run.workdir, best,
                     checkpointer.manager.metrics(best) if best is not None else None)
  tqdm.write(f"exported the {'best (step %d)' % best if best is not None else 'final'} "
             f"encoder to {out}")
