"""Everything a run needs, built and validated before anything compiles (MaxText's
``setup_train_loop``): the task, the mesh, the tokenizer, the feature shards of each split (the
evaluation's records read and validated first), the model (+ pretrained weights), the optimizer
and the step count: `setup_run` -> `Run`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable

import jax
import ml_collections
from absl import logging
from flax import nnx

from poi_jax import tasks
from poi_jax.data import pos
from poi_jax.io import write_json_atomic
from poi_jax.layers import attention
from poi_jax.model_files import checkpoint as ckpt_lib
from poi_jax.models import build
from poi_jax.prepare import splits as splits_lib
from poi_jax.train import environment
from poi_jax.train import mesh as mesh_lib
from poi_jax.train import optim
from poi_jax.train import step as step_lib
from poi_jax.train.metrics import MetricWriter

MODES = ("train", "eval", "train_and_eval", "predict")
TRAINING_MODES = ("train", "train_and_eval")  # the modes that run the training loop


@dataclasses.dataclass
class Split:
  """One data split: its feature shards (`poi_jax.data.shards.ShardedSplit`), its role
  (``train``, ``eval``, ``predict``: which ``data.<role>_file`` it reads; evaluation streams its
  records again from there, shard by shard) and how many records its source holds (more than the
  shards' when a cap applies). No split holds its records."""
  role: str
  shards: Any
  num_in_source: int

  @property
  def num_examples(self) -> int:
    return self.shards.num_examples


@dataclasses.dataclass
class Run:
  """The pieces of one run of the engine, built once by `setup_run`. ``sharded`` holds the
  model and optimizer state placed on the mesh (`poi_jax.train.step.create_sharded_state`, the
  only copy: the host model is not kept) with the jitted steps; its ``state`` is the one thing
  that changes as the loop steps."""
  config: ml_collections.ConfigDict
  workdir: str
  mode: str
  # Where evaluations write their files: the workdir while training; for eval / predict a
  # directory of their own (`output_dir`), so they never touch the training run's files.
  output_dir: str
  task: tasks.Task
  mesh: Any
  tokenizer: Any
  train: Split | None
  eval: Split | None
  schedule: Callable[[int], Any]
  total_steps: int  # optimizer updates
  accum: int  # loader batches per optimizer update
  best_metric: str
  checkpointer: ckpt_lib.Checkpointer
  sharded: Any  # step_lib.ShardedState
  writer: MetricWriter  # metrics.jsonl + TensorBoard (training only; a no-op otherwise)

  @property
  def is_chief(self) -> bool:
    return jax.process_index() == 0


def record_kernels(run: Run) -> None:
  """Adds the attention kernels the run's steps traced so far (`attention.kernels_used`) to a
  training run's ``environment.json`` (process 0; rewritten atomically only when they changed).
  ``model.attention=auto`` chooses by timing on each machine, and the kernels draw other
  attention-dropout bits, so which one ran belongs with the run's numbers."""
  if not run.is_chief or run.mode not in TRAINING_MODES:
    return
  path = os.path.join(run.workdir, "environment.json")
  with open(path) as f:
    env = json.load(f)
  used = attention.kernels_used()
  if env.get("attention") != used:
    try:
      write_json_atomic(path, dict(env, attention=used), sort_keys=True)
    except OSError as e:  # a record, not the run: a full disk stops the next checkpoint's write
      logging.warning("could not add the attention kernels to %s: %s", path, e)


def batch_ndims(task, split: Split) -> dict[str, int]:
  """The model's batch arrays and their ranks."""
  return {k: len(shape) for k, shape in task.model_arrays(
      split.shards.array_shapes()).items()}


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


def config_dict(config) -> dict:
  """The resolved config as plain JSON values (what ``config.json`` holds)."""
  return json.loads(config.to_json())


def _total_steps(config, num_train: int) -> int:
  steps_per_epoch = max(num_train // config.train.batch_size, 1)
  return (config.train.max_steps if config.train.max_steps > 0
          else max(int(config.train.epochs * steps_per_epoch), 1))


def default_output_dir(config, workdir: str, mode: str, checkpointer) -> str:
  """``<workdir>/<eval|predict>/<data name>-<checkpoint step>`` (``init`` for
  ``model.init_from`` weights), e.g. ``eval/squad2-dev-subset-2000``."""
  source = ((config.data.predict_file or config.data.eval_file) if mode == "predict"
            else config.data.eval_file)
  base_name = re.sub(r"\.(xz|gz)$", "", os.path.basename(source.rstrip("/")))  # data.json.xz
  name = os.path.splitext(base_name)[0] if not source.startswith("tfds:") \
      else source[len("tfds:"):]
  name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "data"
  step = checkpointer.evaluated_step()
  return os.path.join(workdir, mode, f"{name}-{'init' if step is None else step}")


def setup_run(config, workdir: str, mode: str, output_dir_override: str = "") -> Run:
  """Reads and validates every input, builds the model and the optimizer, and writes the
  resolved config once the run is accepted; raises a clear error (file, record, field) before
  anything is compiled. ``output_dir_override``: where eval / predict write (default
  `default_output_dir`)."""
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  task = tasks.get_task(config.task)
  config = splits_lib.with_cache_dir(config, workdir)
  mesh = mesh_lib.make_mesh(config.mesh)
  check_batch_sizes(config, mesh)
  if tasks.uses_pos(config):
    pos.ensure_nltk_resources()  # fail now, not after minutes of tokenising
  tokenizer = build.load_tokenizer(config) if task.tokenizer_needed(config) else None

  if mode in ("eval", "predict") and not config.model.init_from \
      and not ckpt_lib.has_checkpoints(workdir):
    raise ValueError(f"--mode={mode}: {workdir} holds no checkpoint and model.init_from is "
                     f"empty, so there are no trained weights to evaluate; train first, or pass "
                     f"--config.model.init_from=<checkpoint>")

  # Read and validate the evaluation's records before anything is built (streamed and counted,
  # not held: evaluation streams them again shard by shard; the training records are streamed
  # into feature shards below, each validated as it is read).
  n_eval_source = 0
  d = config.data
  eval_role = "predict" if mode == "predict" else "eval"
  if mode in ("eval", "train_and_eval", "predict"):
    n_eval_source = sum(1 for _ in task.read(config, eval_role))
    skip, limit = splits_lib.split_caps(config, eval_role)
    n_eval = max(n_eval_source - skip, 0) if limit is None else \
        min(max(n_eval_source - skip, 0), limit)
    if not n_eval:
      raise ValueError(f"no {eval_role} questions left after "
                       f"data.skip_eval_examples={d.get('skip_eval_examples', 0)} and "
                       f"data.max_eval_examples={d.max_eval_examples} ({n_eval_source} in the "
                       f"source)")
    if n_eval < n_eval_source:
      print(f"{'predicting' if mode == 'predict' else 'scoring'} {n_eval} of "
            f"{n_eval_source} questions (data.max_eval_examples={d.max_eval_examples}, "
            f"data.skip_eval_examples={d.get('skip_eval_examples', 0)})")

  model = task.build_model(config, nnx.Rngs(config.seed))
  if config.model.init_from and task.load_pretrained is not None:
    report = task.load_pretrained(model, config.model.init_from)
    logging.info("loaded %s: %s", config.model.init_from, report)
  n_params = build.parameter_count(model)
  signature = ckpt_lib.model_signature(config, nnx.state(model, nnx.Param))
  ckpt_lib.check_workdir(workdir, signature)
  best_metric = config.train.best_metric or task.metric
  checkpointer = ckpt_lib.Checkpointer(workdir, keep=config.train.keep_checkpoints,
                                       best_metric=best_metric,
                                       higher_is_better=task.higher_is_better)
  output_dir = workdir
  if mode in ("eval", "predict"):
    output_dir = output_dir_override or default_output_dir(config, workdir, mode, checkpointer)
  if jax.process_index() == 0:
    env = environment.describe()
    if mode in TRAINING_MODES:  # the run is accepted: record its config (eval and
      # predict write theirs with their results, in their own directory)
      write_json_atomic(os.path.join(workdir, "config.json"), config_dict(config),
                        sort_keys=True)
      write_json_atomic(os.path.join(workdir, "environment.json"), env, sort_keys=True)
    print(f"task {config.task}; mesh {dict(mesh.shape)} over {jax.device_count()} devices, "
          f"{jax.process_count()} process(es); parameters {n_params:,}")
    print(f"device {environment.device(env)}; {environment.software(env)}")
  logging.info("config:\n%s", config)

  train = evaluation = None
  total = 1
  if mode in TRAINING_MODES:
    prepared = splits_lib.prepare_split(task, config, "train", tokenizer)
    if prepared.num_windows == 0:
      raise ValueError(f"no training features: the {prepared.num_examples} training records of "
                       f"data.train_file={config.data.train_file!r} gave no window")
    train = Split("train", prepared, prepared.num_examples)
    total = _total_steps(config, prepared.num_windows)
  if mode in ("eval", "train_and_eval", "predict"):
    evaluation = Split(eval_role, splits_lib.prepare_split(task, config, eval_role, tokenizer),
                       n_eval_source)

  tx, schedule = optim.make_optimizer(config.optim, total)
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
  try:
    with jax.set_mesh(mesh):  # placed: the host model and optimizer are not kept
      sharded = step_lib.create_sharded_state(
          model, optimizer, mesh, config.mesh.rules, batch_ndims(task, train or evaluation),
          require_sharded_params=config.mesh.require_sharded_params)
  except BaseException:
    checkpointer.close()  # the loop closes it once the Run exists
    raise
  # Only training appends to the run's metrics; eval / predict write into their own directory.
  writer = MetricWriter(workdir, enabled=jax.process_index() == 0 and train is not None)
  return Run(config=config, workdir=workdir, mode=mode, output_dir=output_dir, task=task,
             mesh=mesh, tokenizer=tokenizer, train=train, eval=evaluation, schedule=schedule,
             total_steps=total, accum=max(int(config.optim.accum_steps), 1),
             best_metric=best_metric, checkpointer=checkpointer, sharded=sharded,
             writer=writer)
