"""Checkpoints with orbax: save every N steps, at the end and on preemption (SIGTERM); keep the
last k and the best by the eval metric; resume with the same parameters, optimizer state, RNG
state and data position; export the best to a HuggingFace directory. SIGTERM and Ctrl-C save
before stopping (`PreemptionWatcher`).

Layout of ``<workdir>/checkpoints/<step>/``: ``state`` (the ``nnx.state`` of model and optimizer
as a pure dict; PRNG keys stored as their raw ``uint32`` data) and ``meta`` (JSON: step, loader
state, model signature). orbax writes each step to a temporary directory and renames it when it is
complete, so a crash never leaves a half-written checkpoint that a resume would pick up.
``<workdir>/model_signature.json`` records which model the workdir belongs to: a run with another
model in the same workdir is refused before anything is compiled.

A step saved when its evaluation was stopped (SIGTERM during an evaluation: `PreemptionWatcher`)
has no metrics; the resumed run evaluates it and saves it again with them (`Checkpointer.save`),
moving the first save to ``checkpoints-rescoring/`` until the second is committed.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import threading

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from poi_jax import faults
from poi_jax.io import write_json_atomic


class WorkdirError(ValueError):
  """The workdir holds checkpoints of another model."""


def model_signature(config, state: nnx.State) -> dict:
  """What identifies a model: task, head and the tree of parameter names, shapes and dtypes."""
  shapes = {jax.tree_util.keystr(p): [list(np.shape(x)), str(x.dtype)]
            for p, x in jax.tree_util.tree_leaves_with_path(state)}
  digest = hashlib.sha256(json.dumps(shapes, sort_keys=True).encode()).hexdigest()[:16]
  return {"task": config.task, "head": config.model.head, "num_arrays": len(shapes),
          "params_sha": digest}


def check_workdir(workdir: str, signature: dict) -> None:
  """Writes the signature on first use; raises `WorkdirError` when it differs from the stored one
  and the workdir has checkpoints."""
  path = os.path.join(workdir, "model_signature.json")
  if os.path.exists(path):
    with open(path) as f:
      stored = json.load(f)
    has_ckpt = bool(ocp.utils.checkpoint_steps(os.path.join(workdir, "checkpoints"))) \
        if os.path.isdir(os.path.join(workdir, "checkpoints")) else False
    if stored != signature and has_ckpt:
      raise WorkdirError(
          f"{workdir} holds checkpoints of another model ({stored}); this config builds "
          f"{signature}. Use another --workdir, or delete {workdir}/checkpoints to start over")
  if jax.process_index() == 0:
    os.makedirs(workdir, exist_ok=True)
    write_json_atomic(path, signature)


def has_checkpoints(workdir: str) -> bool:
  """Whether ``<workdir>/checkpoints`` holds a finished checkpoint (creates nothing)."""
  directory = os.path.join(workdir, "checkpoints")
  return os.path.isdir(directory) and bool(ocp.utils.checkpoint_steps(directory))


def _is_key(x) -> bool:
  return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_storable(tree):
  return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


class _QuietPeriodicSaves(logging.Filter):
  """orbax warns "Requested `tracked_metric`; did not provide metrics" at every periodic save of
  a manager that tracks a metric; those saves are metric-free by design (the eval saves carry
  the metric), so the line is noise."""

  def filter(self, record: logging.LogRecord) -> bool:
    return "did not provide metrics" not in record.getMessage()


def _quiet_orbax() -> None:
  logger = logging.getLogger("absl")
  if not any(isinstance(f, _QuietPeriodicSaves) for f in logger.filters):
    logger.addFilter(_QuietPeriodicSaves())


class Checkpointer:
  """An orbax `CheckpointManager` over ``<workdir>/checkpoints`` for one ``nnx.State``.

  Args:
    workdir: the run directory.
    keep: how many of the latest checkpoints to keep.
    best_metric: the eval metric (key of the metrics passed to `save`) whose best checkpoint is
      kept as well; empty: none.
    higher_is_better: for ``best_metric``.
  """

  def __init__(self, workdir: str, *, keep: int, best_metric: str = "",
               higher_is_better: bool = True):
    policies = [ocp.checkpoint_managers.LatestN(n=max(keep, 1))]
    if best_metric:
      policies.append(ocp.checkpoint_managers.BestN(
          get_metric_fn=lambda m: m[best_metric], reverse=not higher_is_better, n=1,
          keep_checkpoints_without_metrics=False))
    # `preservation_policy` decides what is kept; `best_fn` only makes orbax write each step's
    # metrics next to it (read back by `best_step`, also after a restart).
    options = ocp.CheckpointManagerOptions(
        preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
        best_fn=(lambda m: m[best_metric]) if best_metric else None,
        best_mode="max" if higher_is_better else "min",
        enable_async_checkpointing=False, create=True,
        # A save that failed half-way (full disk, a killed process) leaves orbax's temporary
        # directory; it is never read back and is removed when the next run starts.
        cleanup_tmp_directories=True)
    self.best_metric = best_metric
    self.higher_is_better = higher_is_better
    _quiet_orbax()
    self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    self._rescoring = self.directory + "-rescoring"
    self.manager = ocp.CheckpointManager(self.directory, options=options,
                                         item_names=("state", "meta"))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def best_step(self) -> int | None:
    """The kept step with the best ``best_metric`` (None: no kept step has one; ties: the later
    step). orbax's own ``best_step`` falls back to a step without metrics."""
    if not self.best_metric:
      return None
    scored = []
    for step in self.manager.all_steps():
      m = self.manager.metrics(step)
      if m and self.best_metric in m:
        scored.append((float(m[self.best_metric]), step))
    if not scored:
      return None
    pick = max if self.higher_is_better else min
    return pick(scored, key=lambda x: (x[0], x[1]) if self.higher_is_better
                else (x[0], -x[1]))[1]

  def evaluated_step(self) -> int | None:
    """The checkpoint ``eval`` / ``predict`` use: the best, else the latest (None: none)."""
    best = self.best_step()
    return best if best is not None else self.latest_step()

  def save(self, step: int, state: nnx.State, meta: dict, metrics: dict | None = None) -> None:
    """Saves ``step``; a step already saved is left as it is, unless it has no metrics and
    ``metrics`` are given (its evaluation was stopped, then run again after the resume): then it
    is saved again with them, so that best-k ranks it."""
    if step in self.manager.all_steps():
      if metrics is not None and self.best_metric and not self.manager.metrics(step):
        self._rescore(step, state, meta, metrics)
      return
    self._save(step, state, meta, metrics)

  def _rescore(self, step: int, state: nnx.State, meta: dict, metrics: dict) -> None:
    """``step`` saved again with ``metrics``: the first save is moved aside, the new one written,
    then the first deleted; a process killed in between finds the first save where it was put
    and moves it back (`_recover_rescoring`), so the step is never lost."""
    aside = os.path.join(self._rescoring, str(step))
    if jax.process_index() == 0:
      os.makedirs(self._rescoring, exist_ok=True)
      os.replace(os.path.join(self.directory, str(step)), aside)
    _sync("poi_jax: a checkpoint set aside to be saved again with its metrics")
    self.manager.reload()
    self._save(step, state, meta, metrics)
    if jax.process_index() == 0:
      shutil.rmtree(aside)
      if not os.listdir(self._rescoring):
        os.rmdir(self._rescoring)

  def _recover_rescoring(self) -> None:
    """Finishes a `_rescore` that a killed process left: a step whose new save committed loses
    its first save; one whose new save did not gets its first save back."""
    if not os.path.isdir(self._rescoring):
      return
    if jax.process_index() == 0:
      for name in os.listdir(self._rescoring):
        target = os.path.join(self.directory, name)
        if os.path.isdir(target) and ocp.utils.is_checkpoint_finalized(target):
          shutil.rmtree(os.path.join(self._rescoring, name))
        else:
          if os.path.exists(target):
            shutil.rmtree(target)
          os.replace(os.path.join(self._rescoring, name), target)
          print(f"checkpoint {name} restored from {self._rescoring} (a save with its metrics "
                "was interrupted)", flush=True)
      os.rmdir(self._rescoring)
    _sync("poi_jax: interrupted rescoring finished")
    self.manager.reload()

  def _save(self, step: int, state: nnx.State, meta: dict, metrics: dict | None) -> None:
    pure = _to_storable(nnx.to_pure_dict(state))
    try:
      self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(pure),
                                                      meta=ocp.args.JsonSave(meta)),
                        metrics=metrics, force=True)
      self.manager.wait_until_finished()
    except Exception as e:  # orbax / tensorstore wrap the OS error in their own types
      if not faults.is_os_failure(e):
        raise
      self.manager.reload()  # forget the failed step: only committed ones are listed
      previous = self.manager.latest_step()
      raise faults.WriteFailed(
          f"could not write checkpoint {step} to {os.path.join(self.directory, str(step))}: "
          f"{faults.cause(e)}; "
          + (f"checkpoint {previous} is intact" if previous is not None else
             "no earlier checkpoint") + "; free space, then run the same command to resume"
      ) from e

  def restore(self, step: int, state: nnx.State) -> tuple[nnx.State, dict]:
    """``state`` with the values of ``step`` (same shardings as ``state``), and its meta."""
    template = nnx.to_pure_dict(state)
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(np.shape(jax.random.key_data(x)) if _is_key(x)
                                       else np.shape(x),
                                       jnp.uint32 if _is_key(x) else x.dtype,
                                       sharding=getattr(x, "sharding", None)),
        template)
    out = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    restored = jax.tree.map(
        lambda t, r: jax.random.wrap_key_data(r, impl=jax.random.key_impl(t)) if _is_key(t)
        else r, template, out.state)
    new = jax.tree.map(lambda x: x, state)  # a copy to fill in
    nnx.replace_by_pure_dict(new, restored)
    return new, dict(out.meta)

  def restore_latest_intact(self, state: nnx.State) -> tuple[int, nnx.State, dict] | None:
    """The newest checkpoint that restores completely: (step, state, meta); None when there is
    no checkpoint at all. A damaged one (files truncated or deleted, a save that never
    committed) is reported in one line and the one before it is tried; when every checkpoint is
    damaged, `poi_jax.faults.NoIntactCheckpoint` (never a silent start from scratch)."""
    self._recover_rescoring()
    steps = sorted(self.manager.all_steps(), reverse=True)
    damaged = []
    for step in steps:
      problem = self._damage(step)
      if problem is None:
        try:
          restored, meta = self.restore(step, state)
          self._set_aside(damaged)
          return step, restored, meta
        except Exception as e:  # orbax / tensorstore raise many types for unreadable files
          problem = faults.cause(e)
      damaged.append(step)
      print(f"checkpoint {step} in {self.directory} is damaged ({problem}); "
            + ("trying the one before it" if step != steps[-1] else "it was the oldest"),
            flush=True)
    if damaged:
      raise faults.NoIntactCheckpoint(
          f"no intact checkpoint in {self.directory}: steps {', '.join(map(str, damaged))} are "
          f"all damaged; delete {self.directory} to start over, or restore it from a backup")
    return None

  def _set_aside(self, steps: list[int]) -> None:
    """Moves damaged ``steps`` to ``<workdir>/checkpoints-damaged/`` (kept for inspection), so
    the resumed run saves those steps anew instead of finding them already there."""
    if not steps:
      return
    if jax.process_index() == 0:
      aside = self.directory + "-damaged"
      os.makedirs(aside, exist_ok=True)
      for step in steps:
        target = os.path.join(aside, str(step))
        if os.path.exists(target):
          target += f".{len(os.listdir(aside))}"
        os.replace(os.path.join(self.directory, str(step)), target)
      print(f"damaged checkpoint(s) {', '.join(map(str, steps))} moved to {aside}", flush=True)
    _sync("poi_jax: damaged checkpoints set aside")
    self.manager.reload()

  def _damage(self, step: int) -> str | None:
    """What is visibly wrong with ``step``'s directory before reading it (None: nothing): not
    committed (orbax's marker / finalized rename) or an item missing."""
    path = os.path.join(self.directory, str(step))
    if not ocp.utils.is_checkpoint_finalized(path):
      return "its save never finished"
    for item in ("state", "meta"):
      if not os.path.isdir(os.path.join(path, item)):
        return f"{item}/ is missing"
    return None

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()


def _sync(name: str) -> None:
  """Every process waits here for the others (file moves are process 0's)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils
    multihost_utils.sync_global_devices(name)


class PreemptionWatcher:
  """Turns SIGTERM (what TPU/GPU schedulers send before preempting) and Ctrl-C (SIGINT) into a
  flag that the training loop polls between steps, so the run saves a checkpoint and exits
  cleanly. A second Ctrl-C raises KeyboardInterrupt at once (the last saved checkpoint stays)."""

  SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self._event = threading.Event()
    self._previous: dict = {}
    self.signum: int | None = None  # the first signal received

  def _handle(self, signum, frame):
    if signum == signal.SIGINT and self._event.is_set():
      raise KeyboardInterrupt  # second Ctrl-C: stop now
    if self.signum is None:
      self.signum = signum
    self._event.set()
    if signum == signal.SIGINT:
      print("\nCtrl-C: saving a checkpoint after this step (Ctrl-C again to stop at once)",
            flush=True)

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in self.SIGNALS:
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc):
    for sig, previous in self._previous.items():
      signal.signal(sig, previous)
    self._previous = {}

  def requested(self) -> bool:
    """True when any process got SIGTERM or SIGINT (all processes agree, so they save the same
    step)."""
    flag = self._event.is_set()
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils
      flag = bool(np.any(multihost_utils.process_allgather(np.asarray([flag]))))
    return flag
