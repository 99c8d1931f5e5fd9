r"""poi-jax command line.

  python -m poi_jax.main --config=configs/squad2.py:tiny --workdir=/tmp/run \
      --mode=train_and_eval [--config.optim.lr=2e-5 ...]

Without ``--workdir`` the run goes to ``runs/<config>-<variant>`` (plus a hash of the
``--config.*`` overrides; under ``$POI_JAX_RUNS`` when set), named in the first line of output:
the same command again resumes it.

Resolves the config (variant after the colon, ``--config.x.y=v`` overrides; an unknown key is an
error), writes it to ``<workdir>/config.json``, prints the model's parameter count (the encoder's
and what the head adds over it) and runs the engine (`poi_jax.train.loop`) in ``--mode``.

``--mode=prepare`` featurizes the config's splits into feature shards in ``data.cache_dir``
(default ``<workdir>/cache``; `poi_jax.prepare`) and stops; the engine's modes build the
missing shards first, so it is optional (a cluster runs it once, on every host).

Multi-host: ``--coordinator_address=HOST:PORT --num_processes=N --process_id=I`` (the local and
SLURM launchers in ``launch/`` pass them), or ``--distributed=auto`` to let
`jax.distributed.initialize` read the cluster's environment (TPU VMs, SLURM).

Exit codes: 0 done; 1 bad input or config (one line on stderr, before any compilation); 143 the
run got SIGTERM, 130 Ctrl-C, and saved a checkpoint (run the same command again to resume); a
second Ctrl-C stops at once (130). Faults (docs/reliability.md) end in one ``error:`` line: 1 a
failed write, a non-finite loss, no intact checkpoint or running out of memory; 70 another
process of the run was lost. A bad data file, whatever its bytes, is a `DataError` naming the
file, the record or line and the field (`poi_jax.data.json_stream`): one ``error:`` line, 1.

``--mode=eval`` / ``predict`` write into ``--output_dir`` (default
``<workdir>/<mode>/<data name>-<step>``), never over the training run's files.
"""
from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import re
import sys
import traceback

from absl import app, flags, logging
from ml_collections import config_flags

from poi_jax import runtime, tasks
from poi_jax.data.pos import NltkResourceError
from poi_jax.faults import RunFault
from poi_jax.io import write_json_atomic
from poi_jax.models import encoders
from poi_jax.train import config_checks

# The engine's modules (the loop, orbax, the distributed watchdog) are imported inside the
# functions that use them, so that a run loads only what its mode needs; none of them imports this
# module.

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Task config file, e.g. configs/squad2.py:tiny.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for the config, checkpoints, metrics. Default: "
    "runs/<config>-<variant>[-<hash of the --config.* overrides>] under $POI_JAX_RUNS (default "
    "./runs), printed first; the same command resumes it.")
_MODE = flags.DEFINE_enum("mode", "describe",
                          ["describe", "prepare", "train", "eval", "train_and_eval", "predict"],
                          "describe: resolve the config and print the parameter count; prepare: "
                          "featurize the config's splits into feature shards (the other modes "
                          "build the missing shards first); train, eval, train_and_eval, "
                          "predict: run the engine.")
_DISTRIBUTED = flags.DEFINE_enum(
    "distributed", "off", ["off", "auto"],
    "auto: jax.distributed.initialize() from the cluster environment (TPU VM, SLURM).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "HOST:PORT of process 0, for multi-process runs.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")
_BEAM = flags.DEFINE_string(
    "beam_pipeline_options", "",
    "prepare: build the feature shards with an Apache Beam pipeline (the [beam] extra) with "
    "these options, comma-separated without dashes, e.g. runner=DirectRunner,"
    "direct_num_workers=4 or runner=DataflowRunner,project=P,... (docs/data.md).")
_OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", "", "eval / predict: where to write predictions and scores (default "
    "<workdir>/<mode>/<data name>-<checkpoint step>; the training run's files are never touched).")

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT (Ctrl-C)
flags.mark_flags_as_required(["config"])
RUNS_ENV = "POI_JAX_RUNS"  # where default run directories go (default ./runs)


def default_workdir(config_spec: str, overrides: dict) -> str:
  """The run directory of a command given no ``--workdir``: ``<runs>/<config>-<variant>``, plus
  a hash of the ``--config.*`` overrides when there are any, so that the same command finds (and
  resumes) its own run and a command with other settings never mixes into it. ``<runs>`` is
  ``$POI_JAX_RUNS``, default ``runs`` in the current directory."""
  path, _, variant = config_spec.partition(":")
  name = os.path.splitext(os.path.basename(path))[0] + (f"-{variant}" if variant else "")
  if overrides:
    text = json.dumps(sorted((str(k), repr(v)) for k, v in overrides.items()))
    name += "-" + hashlib.sha256(text.encode()).hexdigest()[:8]
  return os.path.join(os.environ.get(RUNS_ENV) or "runs", re.sub(r"[^\w.-]", "_", name))


def config_summary(config) -> str:
  """One line a user can check at a glance (the whole config goes to ``config.json``)."""
  m, d, t, o = config.model, config.data, config.train, config.optim
  encoder = m.init_from or f"random {m.encoder.get('model_type', 'encoder')}"
  length = f"{t.max_steps} steps" if t.max_steps > 0 else f"{t.epochs:g} epochs"
  return (f"{config.task}: {encoder} + {m.head} ({m.dtype}); train {d.train_file or '-'}, "
          f"eval {d.eval_file or '-'}; lr {o.lr:g}, batch {t.batch_size}, {length}, seed "
          f"{config.seed}")


def describe(config, workdir: str, *, write_config: bool) -> str:
  """Prints a one-line summary of the config and the task's description of the model (parameter
  counts; `poi_jax.tasks.base.Task.describe`); ``write_config``: also writes the resolved config
  to ``<workdir>/config.json`` (describe mode; the engine writes it once a run is accepted)."""
  print(config_summary(config))
  if write_config:
    os.makedirs(workdir, exist_ok=True)
    write_json_atomic(os.path.join(workdir, "config.json"), config.to_dict(), sort_keys=True)
    print(f"resolved config: {os.path.join(workdir, 'config.json')}")
  summary = tasks.get_task(config.task).describe(config, tasks.abstract_model(config))
  print(summary)
  return summary


def init_distributed(config=None) -> None:
  """`jax.distributed.initialize` from the flags, or from the environment with
  --distributed=auto, with the timeouts of ``config.distributed`` and one line instead of JAX's
  fatal log when the coordinator is lost (`poi_jax.faults.coordination`); then the lost- and
  stuck-process watchdog (`poi_jax.faults.watchdog`)."""
  import jax
  from poi_jax.faults import coordination
  section = (config.get("distributed", None) if config is not None else None) or {}
  timeouts = {name: int(section[key]) for name, key in (
      ("initialization_timeout", "initialization_timeout_s"),
      ("heartbeat_timeout_seconds", "heartbeat_timeout_s"),
      ("shutdown_timeout_seconds", "shutdown_timeout_s")) if key in section}
  if _COORDINATOR.value:
    if _NUM_PROCESSES.value is None or _PROCESS_ID.value is None:
      raise app.UsageError("--coordinator_address needs --num_processes and --process_id")
    coordination.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                            **timeouts)
  elif _DISTRIBUTED.value == "auto":
    coordination.initialize(**timeouts)
  else:
    return
  from poi_jax.faults import watchdog
  watchdog.start(jax.process_index(), jax.process_count(),
                 timeout_s=float(section.get("watchdog_timeout_s", 0)),
                 stuck_timeout_s=float(section.get("stuck_timeout_s", 0)))
  # (in each process's log: from here on a lost process is named by the others; before it,
  # jax.distributed.initialize waits for the coordinator up to initialization_timeout_s)
  print(f"process {jax.process_index()} of {jax.process_count()} joined the run", flush=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  # A native crash (a segmentation fault in a C++ library) prints every thread's Python stack to
  # stderr, in every process of a run: the one trace a crash in the field leaves (issue 49).
  faulthandler.enable(all_threads=True)
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  config, workdir, mode = _CONFIG.value, _WORKDIR.value, _MODE.value
  overridden = config_flags.get_override_values(flags.FLAGS["config"])
  if workdir is None:
    workdir = default_workdir(config_flags.get_config_filename(flags.FLAGS["config"]), overridden)
    print(f"workdir: {workdir} (no --workdir given: this config's default; the same command "
          f"resumes it)", flush=True)
  from poi_jax.train import loop
  try:
    # A variant's caps stay with its own files (said here, before anything is read).
    for note in config_checks.lift_variant_caps(config, overridden, mode):
      print(note)
    # Every value and the workdir are checked before anything is read, built or written.
    config_checks.check_config(config)
    config_checks.check_workdir(workdir)
    # Before the backend starts: the compilation cache, CPU memory reuse, CPU XLA flags.
    runtime.configure(config.get("runtime"), training=mode in loop.TRAINING_MODES)
    if _BEAM.value and mode != "prepare":
      raise ValueError(f"--beam_pipeline_options is for --mode=prepare (got --mode={mode}): "
                       f"prepare the shards with Beam first, then run --mode={mode}")
    init_distributed(config)
    if mode == "prepare":
      from poi_jax import prepare as prepare_lib
      print(config_summary(config))
      prepare_lib.prepare(config, workdir, beam_options=_BEAM.value)
      return 0
    describe(config, workdir, write_config=mode == "describe")
    if mode != "describe":
      loop.train_and_evaluate(config, workdir, mode, output_dir=_OUTPUT_DIR.value)
  except (encoders.CheckpointError, FileNotFoundError, ValueError, NltkResourceError) as e:
    _lost_process_first(e)
    print(f"error: {e}", file=sys.stderr)
    _stop_the_other_processes(f"error: {e}", 1)
    return 1
  except RunFault as e:  # a full disk, a NaN loss, no intact checkpoint (docs/reliability.md)
    print(f"error: {e}", file=sys.stderr, flush=True)
    _stop_the_other_processes(f"error: {e}", e.exit_code)
    return e.exit_code
  except loop.Preempted as e:
    print(e, file=sys.stderr, flush=True)  # SIGTERM: checkpoint 57 saved in ...; run ...
    return 128 + e.signum
  except KeyboardInterrupt:
    print("interrupted (Ctrl-C): stopped; checkpoints saved so far are kept", file=sys.stderr)
    return INTERRUPTED_EXIT_CODE
  except MemoryError:
    # The readers bound their memory (poi_jax/data/json_stream.py), so this is a record larger
    # than the machine's memory or a run too big for it; a traceback would add nothing.
    line = ("error: out of memory (MemoryError): a data record, or the run itself, needs more "
            "memory than this process may use; the checkpoints saved so far are kept")
    print(line, file=sys.stderr, flush=True)
    _stop_the_other_processes(line, 1)
    return 1
  except Exception as e:
    from poi_jax.faults import watchdog
    if watchdog.active() is not None:
      # In a multi-process run an error may only be the echo of another process's loss (a
      # collective that failed): the watchdog then names that process and ends this one.
      watchdog.active().explain(e)
      traceback.print_exc()  # a fault of this process: say so, and stop the others
      first = (str(e).splitlines() or [""])[0]
      _stop_the_other_processes(f"{type(e).__name__}: {first}", 1)
    raise
  return 0


def _lost_process_first(error: BaseException) -> None:
  """Multi-process runs: a collective that failed because another process is gone raises a
  ValueError too (gloo: "Connection reset by peer"); JAX's client reports a lost coordinator
  within a second (`poi_jax.faults.coordination`), so a few seconds' wait lets that line, naming
  the process, be the last word (the process then ends there). Single process: nothing."""
  from poi_jax.faults import watchdog
  if watchdog.active() is not None:
    collective = re.search(r"gloo|connection|socket|unavailable", str(error), re.IGNORECASE)
    watchdog.active().explain(error, wait_s=None if collective else 3.0)


def _stop_the_other_processes(line: str, exit_code: int) -> None:
  """Multi-process runs: tells the other processes (through the watchdog) that this one stops
  with ``line``, so that they stop at once naming it, and leaves without the shutdown barrier
  (which would wait for processes that are stopping too). Single process: nothing."""
  from poi_jax.faults import watchdog
  if watchdog.active() is None:
    return
  os.close(watchdog.silence_output())  # the error above stays the log's last line
  watchdog.active().announce(line)
  os._exit(exit_code)


def parse_flags(argv):
  """absl flag parsing with one clear line for an override naming a key that does not exist."""
  try:
    return flags.FLAGS(argv)
  except (KeyError, AttributeError) as e:
    bad = [a for a in argv[1:] if a.startswith("--config.")]
    found = re.search(r"\w+", str(e))  # the message is a repr of a repr: first word = the key
    key = found.group(0) if found else str(e)
    hint = re.search(r'Did you mean "(\w+)"', str(e))
    sys.exit(f"error: unknown config key '{key}' in {' '.join(bad)}"
             + (f" (did you mean '{hint.group(1)}'?)" if hint else "")
             + "; the config is locked, so every --config.x.y override must name an existing field")
  except flags.Error as e:
    sys.exit(f"error: {e}")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
