"""A stand-in for a multi-process training run, without a model: joins `jax.distributed`
through `poi_jax.faults.coordination` (as `poi_jax.main` does), starts the watchdog, and makes
"steps" that each report progress and all-gather across processes, as the training loop does.
Run by tests/faults/test_lost_process.py, two at a time:

  python -m tests.train.distributed_driver PORT PROCESS_ID MODE WATCHDOG_S STUCK_S

MODE ``run``: steps until killed; ``hang``: process 1 stops in a deadlocked "input pipeline" at
step 20 (alive: its heartbeat thread still beats).
"""
import os
import sys
import threading
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "gloo")


def main(port: str, process_id: int, mode: str, watchdog_s: float, stuck_s: float) -> int:
  import jax
  import numpy as np
  from jax.experimental import multihost_utils

  from poi_jax.faults import coordination
  from poi_jax.faults import watchdog
  coordination.initialize(f"127.0.0.1:{port}", 2, process_id, heartbeat_timeout_seconds=100)
  dog = watchdog.start(jax.process_index(), jax.process_count(), timeout_s=watchdog_s,
                       stuck_timeout_s=stuck_s)
  step = 0
  try:
    while True:
      step += 1
      if mode == "hang" and process_id == 1 and step == 20:
        print("hanging at step 20", flush=True)
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # a deadlock: alive, no progress
      watchdog.progress(step)
      multihost_utils.process_allgather(np.asarray([step]))
      if step % 10 == 0:
        print(f"step {step}", flush=True)
      time.sleep(0.05)
  except Exception as e:  # as poi_jax.main: a lost process is the cause, said by the watchdog
    dog.explain(e)
    raise


if __name__ == "__main__":
  sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]),
                float(sys.argv[5])))
