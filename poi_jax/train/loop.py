"""The engine: ``train_and_evaluate(config, workdir, mode)`` for every Task.

read -> feature shards (`poi_jax.prepare.splits`) -> (train: sharded, jitted step with donated state; eval cadence; checkpoints)
-> predict -> decode -> official metrics -> predictions in the workdir. The pieces live apart:

* `poi_jax.train.run`: everything built and validated before compiling (`Run`).
* `poi_jax.train.step`: the pure train / predict steps, jitted with explicit shardings on the
  mesh of `poi_jax.train.mesh` (model and optimizer state placed by the logical rules, the batch
  split over ``data`` x ``fsdp``, the state donated).
* `poi_jax.train.placement`: host <-> global arrays (multi-host: each process builds the same
  features, its loader yields its rows of every global batch).
* `poi_jax.train.evaluate`: predict, decode, score, export.
* this module: the mode dispatch and the training loop.

Checkpoints (`poi_jax.model_files.checkpoint`): every ``train.save_every`` steps, at each eval (with its
metrics, for best-k), at the end, and on SIGTERM; a restart in the same workdir resumes from the
latest one (parameters, optimizer state, dropout RNG, data position). Observability: the mesh and
the parameter count at start; a tqdm bar (ETA, examples/s) on process 0; loss, learning rate,
gradient norm, examples/s and eval scores to ``metrics.jsonl`` and TensorBoard. Modes: ``train``,
``eval`` (the best checkpoint, else the latest, else ``model.init_from``), ``train_and_eval``,
``predict`` (``data.predict_file``, no answers needed; predictions only).

Faults (docs/reliability.md): a non-finite loss or gradient norm stops the run at its step
before anything non-finite is saved (`poi_jax.faults.nonfinite`; ``optim.skip_nonfinite`` skips
such updates instead); a resume restores the newest intact checkpoint; failed writes raise
`poi_jax.faults.WriteFailed`.
"""
from __future__ import annotations

import collections
import contextlib
import signal
import time

import jax
import numpy as np
from tqdm import tqdm

from poi_jax import faults, jax_internals, runtime
from poi_jax.data import buckets
from poi_jax.data.loader import BucketedTrainLoader, TrainLoader
from poi_jax.faults import NoIntactCheckpoint
from poi_jax.faults import nonfinite
from poi_jax.faults import watchdog
from poi_jax.model_files import checkpoint as ckpt_lib
from poi_jax.train import eval_stream
from poi_jax.train import evaluate as eval_lib
from poi_jax.train import placement
from poi_jax.train.run import MODES, TRAINING_MODES, Run, record_kernels, setup_run

__all__ = ["MODES", "TRAINING_MODES", "Preempted", "train_and_evaluate"]


# The most training steps dispatched and not yet computed (``train.steps_in_flight``'s default).
# JAX dispatches asynchronously: without a bound the loop runs ahead of the computation until
# something reads a result (the next log line, up to ``train.log_every`` steps later), so the
# progress bar, its ETA and the stuck-process watchdog count steps not yet computed, and a
# SIGTERM's checkpoint first waits for all of them (minutes on a CPU, where a cloud's preemption
# notice gives ~30 s). Two keep an accelerator fed: one step runs while the next is queued.
STEPS_IN_FLIGHT = 2


def _wait_for(out) -> None:
  """Blocks until the step that produced ``out`` has been computed."""
  jax.block_until_ready(out)


class Preempted(RuntimeError):
  """Raised after the checkpoint of a run stopped by SIGTERM or Ctrl-C has been written;
  ``signum`` is the signal (the entry point exits with 128 + signum: 143, 130)."""

  def __init__(self, message: str, signum: int):
    super().__init__(message)
    self.signum = signum


def train_and_evaluate(config, workdir: str, mode: str = "train_and_eval", *,
                       output_dir: str = "") -> dict:
  """Runs ``mode`` and returns the last eval results. Raises `Preempted` after SIGTERM or
  Ctrl-C (the checkpoint is saved; run the same command again to resume). ``output_dir``: where
  ``eval`` / ``predict`` write (default ``<workdir>/<mode>/<data name>-<step>``)."""
  run = setup_run(config, workdir, mode, output_dir)
  config = run.config
  results: dict = {}
  with jax.set_mesh(run.mesh):
    try:
      if run.train is not None:
        results = train(run, evaluate_at_end=mode == "train_and_eval")
        if config.train.export_best and run.task.export_pretrained is not None:
          eval_lib.export_best(run)
      elif run.eval is not None:
        results = _evaluate_checkpoint(run)
    finally:
      run.checkpointer.close()
      run.writer.close()
  return results


def _evaluate_checkpoint(run: Run) -> dict:
  """``eval`` / ``predict``: the best checkpoint, else the latest, else ``model.init_from``
  (setup refused a workdir with neither)."""
  step = run.checkpointer.evaluated_step()
  if step is not None:
    try:
      run.sharded.state, _ = run.checkpointer.restore(step, run.sharded.state)
    except Exception as e:  # damaged files: one line (training resumes skip such a step)
      raise NoIntactCheckpoint(
          f"checkpoint {step} in {run.checkpointer.directory} is damaged "
          f"({faults.cause(e)}); move {run.checkpointer.directory}/{step} aside to evaluate "
          f"the next one, or resume training (which skips it) to write a new one") from e
    print(f"evaluating checkpoint {step}")
  else:
    print(f"no checkpoint in the workdir: evaluating model.init_from={run.config.model.init_from}")
  return eval_lib.evaluate(run, step=step or 0, save=False)


class Throughput:
  """Examples a second over the steps since the last `restart`, so that compilation (the meter
  restarts after the first step) and evaluations or checkpoint saves (it restarts after them)
  are not counted."""

  def __init__(self, step: int, batch_size: int):
    self.batch_size = batch_size
    self.restart(step)

  def restart(self, step: int) -> None:
    self.t0, self.step0 = time.time(), step

  def examples_per_s(self, step: int) -> float | None:
    """Since the last restart (None when no step was taken since)."""
    if step <= self.step0:
      return None
    return (step - self.step0) * self.batch_size / max(time.time() - self.t0, 1e-9)


def _train_loader(run: Run):
  """The training batches, read from the feature shards (grain ArrayRecord source): batches of
  similar lengths each cut to its bucket with ``data.bucket_training``, else plain batches."""
  config = run.config
  rows = run.train.shards.rows(run.task.model_keys)
  bucket_lengths = run.task.buckets(config)
  if buckets.enabled(bucket_lengths) and config.data.get("bucket_training", False):
    return BucketedTrainLoader(
        rows, config.train.batch_size, seed=config.seed,
        lengths=run.train.shards.window_lengths(), buckets=bucket_lengths,
        length_keys=run.task.length_keys, window_batches=config.data.bucket_window_batches,
        process_index=jax.process_index(), process_count=jax.process_count())
  return TrainLoader(rows, config.train.batch_size, seed=config.seed,
                     process_index=jax.process_index(), process_count=jax.process_count())


def _log_window(run: Run, window: list, step: int, loader, throughput: Throughput, bar) -> None:
  """Logs the mean loss and gradient norm of the steps in ``window`` (their outputs, fetched
  from the device now), the throughput and the learning rate, to the progress bar and to the
  metric writer."""
  config, sharded = run.config, run.sharded
  skip_nonfinite = bool(config.optim.get("skip_nonfinite", False))
  vals = _check_finite(run, window, step)
  mean = nonfinite.finite_mean if skip_nonfinite else (lambda xs: float(np.mean(xs)))
  loss = mean([float(v["loss"]) for v in vals])
  gnorm = mean([float(v["grad_norm"]) for v in vals])
  extra: dict = {}
  if skip_nonfinite:
    extra["nonfinite_skipped"] = nonfinite.skipped_updates(sharded.state) or 0
  rate = throughput.examples_per_s(step)
  if rate is not None:
    extra["examples_per_s"] = rate
  throughput.restart(step)
  bar.set_postfix(loss=f"{loss:.4f}", ex_s=f"{extra.get('examples_per_s', 0.0):.1f}",
                  epoch=f"{loader.epoch(step):.2f}")
  run.writer.write(step, loss=loss, lr=float(run.schedule(step // run.accum)), grad_norm=gnorm,
                   epoch=loader.epoch(step), compiled_train_shapes=compiled_shapes(sharded),
                   **extra)


@contextlib.contextmanager
def _closing(bar):
  try:
    yield bar
  finally:
    bar.close()


def _check_finite(run: Run, window: list, step: int, *, params: bool = False) -> list:
  """The host copies of ``window`` (the outputs of the steps up to ``step``); raises
  `poi_jax.faults.NonFiniteLoss` at the first non-finite one (unless ``optim.skip_nonfinite``)
  and, with ``params``, when the state itself is not finite (before a save or an evaluation)."""
  vals = jax.device_get(window)
  skip = bool(run.config.optim.get("skip_nonfinite", False))
  ckpt = run.checkpointer
  bad = None if skip else nonfinite.first_nonfinite(vals, step)
  if bad is not None:
    raise nonfinite.stop(bad[0], bad[1], ckpt.latest_step(), ckpt.directory)
  if params and not nonfinite.state_is_finite(run.sharded.state):
    raise nonfinite.stop(step, None, ckpt.latest_step(), ckpt.directory,
                         what=f"non-finite parameters after step {step}")
  return vals


def _evaluate(run: Run, step: int, meta, stop) -> dict:
  """`eval_lib.evaluate` between two hand-backs of freed memory (``cpu_malloc=reuse``): the
  training step's kept pages before it, its own programs' after it, so the process peaks at the
  larger of the two rather than their sum."""
  runtime.release_freed_memory()
  results = eval_lib.evaluate(run, step=step, meta_fn=meta, stop=stop)
  runtime.release_freed_memory()
  return results


def train(run: Run, *, evaluate_at_end: bool) -> dict:
  """The training loop: resume, step, log, evaluate every ``train.eval_every`` steps (default:
  each epoch), checkpoint, stop cleanly on SIGTERM / Ctrl-C (during an evaluation too: the
  resumed run evaluates that step first)."""
  config, sharded, checkpointer, writer = run.config, run.sharded, run.checkpointer, run.writer
  loader = _train_loader(run)
  bucket_lengths = run.task.buckets(config)
  steps_per_epoch = max(loader.num_examples // config.train.batch_size, 1)
  eval_every = (config.train.eval_every if config.train.eval_every > 0 else steps_per_epoch)
  micro_total = run.total_steps * run.accum  # loader batches; an update every `accum` of them
  has_eval = run.eval is not None
  step = 0
  # The newest checkpoint that restores completely: a damaged one is named and skipped, and a
  # workdir whose checkpoints are all damaged is an error, never a silent start from scratch.
  found = checkpointer.restore_latest_intact(sharded.state)
  eval_pending = False  # the checkpoint was saved when its evaluation was stopped
  if found is not None:
    _, sharded.state, meta = found
    loader.set_state(meta["loader"])
    step = int(meta["step"])
    eval_pending = bool(meta.get("eval_pending")) and has_eval
    print(f"resumed from checkpoint {step} in {run.workdir}"
          + (" (its evaluation was stopped: evaluating it again)" if eval_pending else ""))
  writer.resume(step)  # rows a killed run logged past its last checkpoint go

  def meta():
    return {"step": step, "loader": loader.get_state(), "epoch": loader.epoch(step)}

  results: dict = {}
  bar = tqdm(total=micro_total, initial=step, desc="train", unit="step", dynamic_ncols=True,
             disable=not run.is_chief)
  throughput = Throughput(step, config.train.batch_size)
  first_step = step + 1
  window: list = []  # step outputs since the last log, still on the device
  in_flight: collections.deque = collections.deque()  # the dispatched steps' outputs
  steps_in_flight = int(config.train.get("steps_in_flight", STEPS_IN_FLIGHT))
  watcher = ckpt_lib.PreemptionWatcher()

  def preempted() -> Preempted:
    signum = watcher.signum or signal.SIGTERM  # (another process got it)
    # (the process's last line, printed by the entry point: docs/reliability.md)
    return Preempted(f"{signal.Signals(signum).name}: checkpoint {step} saved in "
                     f"{run.workdir}; run the same command again to resume", signum)

  # The watcher covers the evaluations too: a SIGTERM or Ctrl-C during one stops it after the
  # batch in flight (`eval_stream.EvaluationStopped`); the step is saved, marked so that the
  # resumed run evaluates it again (the final evaluation included), and the run exits as below.
  with watcher, _closing(bar):  # (closed before any error line)
    try:
      if eval_pending and step < micro_total:  # (the final step's is the final evaluation)
        results = _evaluate(run, step, meta, watcher.requested)
      while step < micro_total:
        batch = placement.global_batch(next(loader), sharded.mesh)
        sharded.state, out = sharded.train_step(sharded.state, batch)
        in_flight.append(out)
        if len(in_flight) > steps_in_flight:  # (after the dispatch: the queue never runs dry)
          _wait_for(in_flight.popleft())
        step += 1
        bar.update(1)
        window.append(out)
        # Progress for the stuck-process check (a Python counter): just before the step's
        # all-gather, so a process hung anywhere else in the step stays one step behind.
        watchdog.progress(step)
        preempt = watcher.requested()  # (one all-gather per step in a multi-process run)
        if step == first_step:  # compiled and ran: time from here
          jax.block_until_ready(out)
          throughput.restart(step)
          record_kernels(run)
          runtime.release_freed_memory()  # the compilers' garbage (cpu_malloc=reuse)
        saving = (step % config.train.save_every == 0 or step == micro_total
                  or (has_eval and step % eval_every == 0) or preempt)
        if saving:  # nothing non-finite is evaluated, saved or exported (faults/nonfinite.py)
          _check_finite(run, window, step, params=True)
        if step % config.train.log_every == 0 or step == micro_total:
          _log_window(run, window, step, loader, throughput, bar)
          window = []
        evaluated = False
        if has_eval and (step % eval_every == 0) and step < micro_total and not preempt:
          results = _evaluate(run, step, meta, watcher.requested)
          evaluated = True
        final_eval = step == micro_total and evaluate_at_end and has_eval
        if not (evaluated or final_eval or preempt) and (step % config.train.save_every == 0
                                                         or step == micro_total):
          checkpointer.save(step, sharded.state, meta())  # (an evaluation saves with its metrics)
        if evaluated or step % config.train.save_every == 0:
          throughput.restart(step)
        if preempt:  # an evaluation due at this step is left to the resumed run
          pending = final_eval or (has_eval and step % eval_every == 0 and step < micro_total)
          checkpointer.save(step, sharded.state, dict(meta(), eval_pending=True) if pending
                            else meta())
          bar.close()
          raise preempted()
      bar.close()
      if evaluate_at_end and has_eval:
        results = _evaluate(run, step, meta, watcher.requested)
    except eval_stream.EvaluationStopped:
      checkpointer.save(step, sharded.state, dict(meta(), eval_pending=True))
      bar.close()
      raise preempted() from None
  record_kernels(run)  # (with the other length buckets' and the evaluation's)
  if run.is_chief:
    print(f"compiled step shapes: train {compiled_shapes(sharded)}, predict "
          f"{compiled_shapes(sharded, 'predict_step')} (length buckets "
          f"{','.join(map(str, bucket_lengths))})")
  return results


def compiled_shapes(sharded, step: str = "train_step") -> int:
  """How many shapes the jitted step has compiled in this process (one per length bucket and
  batch shape)."""
  return jax_internals.compiled_shape_count(getattr(sharded, step)) or 0
