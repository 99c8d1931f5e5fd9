"""Evaluation inside a run: predict over a split's features on the mesh, decode and score with
the task's `Evaluator` one feature shard at a time (`poi_jax.train.eval_stream`: memory holds a
shard, never the split), write the results together, and export the best encoder.

Where files go: while training, into the workdir (``predictions.json``, ``eval_results.json``,
...: the latest evaluation's); for ``--mode=eval`` / ``predict``, into the run's own
``output_dir`` (`poi_jax.train.run.default_output_dir`), with that evaluation's
``config.json``, so the training run's files are never touched. One evaluation's files are
written as they are decoded into a staging directory, then moved into place together.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import jax
from flax import nnx
from tqdm import tqdm

from poi_jax import faults, jax_internals
from poi_jax.io import default_mode, write_json_atomic
from poi_jax.model_files import export as export_files
from poi_jax.train import eval_stream, placement
from poi_jax.train.run import config_dict


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


def _decode(run, split, out_dir: str, *, score: bool, desc: str, stop=None) -> dict:
  """Streams ``split`` shard by shard through the task's evaluator, which writes into
  ``out_dir``; returns its scores."""
  with run.task.evaluator(run.config, out_dir, score=score) as evaluator:
    for records, features, outputs in eval_stream.chunks(
        run, split, run.config.train.eval_batch_size, desc=desc, stop=stop):
      evaluator.add(records, features, outputs)
    return evaluator.finish()


def evaluate(run, *, step: int, meta_fn=None, save: bool = True, stop=None) -> dict:
  """Predicts ``run.eval``, decodes and (except in predict mode) scores it. Every process predicts
  its rows of every batch and decodes and scores the gathered outputs (they must pass the same
  metrics to orbax); only process 0 writes. With ``save`` (training), the checkpoint of ``step``
  is saved with its metric so the best one is known. ``stop`` (training: the preemption
  watcher's poll) is called after every batch; when it is true the evaluation is abandoned,
  nothing of it written, and `eval_stream.EvaluationStopped` raised."""
  config, split = run.config, run.eval
  score = run.mode != "predict"
  desc = "predict" if not score else f"eval @ {step}"
  counts = {"num_questions": split.num_examples, "num_questions_in_source": split.num_in_source}
  if run.is_chief:
    out_dir = os.path.abspath(run.output_dir)
    whole_dir = out_dir != os.path.abspath(run.workdir)
    parent = os.path.dirname(out_dir) if whole_dir else out_dir
    staging = None
    try:
      os.makedirs(parent, exist_ok=True)
      staging = tempfile.mkdtemp(dir=parent, prefix=".staging-")
      os.chmod(staging, default_mode(directory=True))
      results = _decode(run, split, staging, score=score, desc=desc, stop=stop)
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
               f"({split.num_examples} of {split.num_in_source} questions) -> {out_dir}"
               + (f": {shown}" if shown else ""))
    shapes = jax_internals.compiled_shape_count(getattr(run.sharded, "predict_step", None))
    if shapes is not None:
      tqdm.write(f"compiled predict shapes: {shapes} (length buckets "
                 f"{','.join(map(str, run.task.buckets(config)))})")
  else:
    with tempfile.TemporaryDirectory() as scratch:
      results = _decode(run, split, scratch, score=score, desc=desc, stop=stop)
  if save and step > 0:
    metric = run.checkpointer.best_metric
    # Every numeric score is kept with the checkpoint: `poi_jax.inference.reader` reads the SQuAD
    # 2.0 null threshold tuned on this evaluation from it.
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
  if run.task.answers is not None:  # the Reader's files, for the tasks it serves
    export_files.write(out, model, run.workdir, best,
                       checkpointer.manager.metrics(best) if best is not None else None)
  tqdm.write(f"exported the {'best (step %d)' % best if best is not None else 'final'} "
             f"encoder to {out}")
