"""Two real processes joined by `jax.distributed` (the coordination service, its C++ client, gloo
collectives), without a model (tests/train/distributed_driver.py: every step reports progress
and all-gathers, as the training loop does). Four pairs run at once, sharing the start-up:

* process 0, the coordinator, is SIGKILLed: the other prints one line naming it and exits 70
  within seconds, instead of JAX's C++ fatal log (`poi_jax.faults.coordination`); SIGSTOPped
  (the coordination service freezes with it): named after the watchdog's timeout (3 s here);
* process 1 is SIGKILLed: process 0 names it after the watchdog's timeout (3 s here);
* process 1 deadlocks at step 20 while alive: both name it after ``stuck_timeout_s`` (3 s here);
* process 1 gets SIGTERM outside a training loop (as while a run starts up): it ends, and process
  0 names it (JAX's preemption service used to catch the signal and let the process run on).

The same with a training run and a resume: tests/train/test_distributed.py.
"""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.train import engine_runs as er

# name: (mode, (the process to signal, the signal) or None, watchdog timeout, stuck timeout)
SCENARIOS = {
    # the defaults: JAX's client, not a timeout, notices
    "coordinator_killed": ("run", (0, signal.SIGKILL), 30, 300),
    "coordinator_stopped": ("run", (0, signal.SIGSTOP), 3, 300),  # the service itself freezes
    "process_killed": ("run", (1, signal.SIGKILL), 3, 300),
    "stuck": ("hang", None, 30, 3),
    # SIGTERM before a training loop's preemption watcher is set (start-up, compiling)
    "process_terminated": ("run", (1, signal.SIGTERM), 3, 300),
}
LOST = 70  # poi_jax.faults.ProcessLost.exit_code


def _start(name, index):
  mode, _, watchdog_s, stuck_s = SCENARIOS[name]
  port = 20000 + (os.getpid() * 7 + 100 + index * 13) % 20000
  env = er.env(1)
  env["PYTHONUNBUFFERED"] = "1"
  return [subprocess.Popen([sys.executable, "-m", "tests.train.distributed_driver", str(port),
                            str(i), mode, str(watchdog_s), str(stuck_s)],
                           cwd=er.ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
          for i in range(2)]


def _read_until(proc, marker, deadline, lines):
  while time.time() < deadline:
    line = proc.stdout.readline()
    if not line:
      return False
    lines.append(line)
    if marker in line:
      return True
  return False


@pytest.fixture(scope="module")
def runs():
  """name -> {"rc": [rc0, rc1], "out": [out0, out1], "took": seconds from the fault to the last
  exit}."""
  pairs = {name: _start(name, k) for k, name in enumerate(SCENARIOS)}
  results = {}
  try:
    for name, procs in pairs.items():
      mode, fault, _, _ = SCENARIOS[name]
      lines = [[], []]
      watched = 1 if mode == "hang" or fault[0] == 0 else 0
      marker = "hanging at step 20" if mode == "hang" else "step 20"
      assert _read_until(procs[watched], marker, time.time() + 240, lines[watched]), \
          (name, "".join(lines[watched])[-3000:])
      if fault is not None:
        procs[fault[0]].send_signal(fault[1])
      results[name] = {"at": time.time(), "lines": lines}
    for name, procs in pairs.items():
      res = results[name]
      fault = SCENARIOS[name][1]
      order = [1 - fault[0], fault[0]] if fault else [0, 1]  # the survivor first
      res["rc"], res["out"] = [None, None], [None, None]
      for i in order:
        if i != order[0] and fault and fault[1] == signal.SIGSTOP:
          procs[i].kill()  # (a stopped process never ends by itself)
        rest, _ = procs[i].communicate(timeout=90)  # never a hang
        res["rc"][i] = procs[i].returncode
        res["out"][i] = "".join(res["lines"][i]) + rest
        if i == order[0]:
          res["took"] = time.time() - res["at"]
  finally:
    for procs in pairs.values():
      for p in procs:
        if p.poll() is None:
          p.kill()
  return results


def _clean(out):
  """No C++ fatal log, abort or Python traceback in a process's output."""
  assert "Traceback" not in out and "Check failure" not in out, out[-3000:]
  assert "terminate called" not in out and "bad_cast" not in out, out[-3000:]
  assert not re.search(r"^F\d{4} ", out, re.MULTILINE), out[-3000:]  # absl FATAL lines


def test_a_killed_coordinator_is_one_line_naming_it(runs):
  run = runs["coordinator_killed"]
  assert run["rc"] == [-signal.SIGKILL, LOST], run["out"][1][-3000:]
  assert run["took"] < 60, run["took"]
  out = run["out"][1]
  _clean(out)
  naming = [l for l in out.splitlines() if "process 0" in l]
  assert len(naming) == 1, out[-3000:]
  assert out.strip().splitlines()[-1] == naming[0]
  assert re.match(r"error: lost process 0 of 2 \(the coordinator: it hosts JAX's coordination "
                  r"service\) at step \d+: 127\.0\.0\.1:\d+ no longer answers \(killed, crashed "
                  r"or its host is gone\); stopping process 1\. Checkpoints saved so far are "
                  r"kept: run the same command again to resume$", naming[0]), naming[0]


def test_a_stopped_coordinator_is_named_after_the_watchdogs_timeout(runs):
  run = runs["coordinator_stopped"]
  assert run["rc"] == [-signal.SIGKILL, LOST], run["out"][1][-3000:]
  assert run["took"] < 3 + 20, run["took"]
  _clean(run["out"][1])
  last = run["out"][1].strip().splitlines()[-1]
  assert re.match(r"error: lost process 0 of 2 \(the coordinator: it hosts JAX's coordination "
                  r"service\) at step \d+: no answer for \d+ s \(stopped, hung, or its host is "
                  r"unreachable\); stopping process 1\.", last), last


def test_a_killed_process_is_named_by_the_watchdog(runs):
  run = runs["process_killed"]
  assert run["rc"] == [LOST, -signal.SIGKILL], run["out"][0][-3000:]
  assert run["took"] < 3 + 20, run["took"]  # the watchdog's timeout, a few beats
  _clean(run["out"][0])
  last = run["out"][0].strip().splitlines()[-1]
  assert re.match(r"error: lost process 1 of 2 at step \d+: no heartbeat for \d+ s", last), last


def test_an_alive_but_stuck_process_is_named_by_both(runs):
  run = runs["stuck"]
  assert run["rc"] == [LOST, LOST], run["out"]
  assert run["took"] < 3 + 20, run["took"]  # stuck_timeout_s, a few beats (process 0's exit)
  for i, out in enumerate(run["out"]):
    _clean(out)
    last = out.strip().splitlines()[-1]
    assert last.startswith("error: process 1 of 2 is stuck after step 19 (training): no "
                           "progress for "), (i, last)
    assert "while process 0 reached step 20" in last and "stuck_timeout_s=3" in last
    assert f"stopping process {i}." in last


def test_a_sigterm_outside_the_training_loop_ends_the_process(runs):
  # jax's preemption service (on by default) caught SIGTERM and only logged it
  # ("preemption_notifier.cc: SIGTERM caught"): a run signalled while it started up ran on to
  # its end, past a scheduler's grace period
  run = runs["process_terminated"]
  assert run["rc"] == [LOST, -signal.SIGTERM], run["out"][1][-3000:]
  assert "SIGTERM caught" not in run["out"][1]
  assert run["took"] < 3 + 20, run["took"]
  _clean(run["out"][0])
  last = run["out"][0].strip().splitlines()[-1]
  assert re.match(r"error: lost process 1 of 2 at step \d+: no heartbeat for \d+ s", last), last
