"""The lost-process watchdog's verdicts, with a fake coordination service (the real one, with a
SIGKILLed process: tests/train/test_distributed.py)."""
import threading
import time

from poi_jax.faults import ProcessLost
from poi_jax.train.watchdog import Watchdog


class _FakeKV:
  """A key-value store shared by the watchdogs of one 'run'; ``down`` = the coordinator is gone."""

  def __init__(self):
    self.values, self.down, self.lock = {}, False, threading.Lock()

  def key_value_set(self, key, value, allow_overwrite=False):
    if self.down:
      raise RuntimeError("UNAVAILABLE: failed to connect")
    with self.lock:
      self.values[key] = value

  def key_value_dir_get(self, prefix):
    if self.down:
      raise RuntimeError("UNAVAILABLE: failed to connect")
    with self.lock:
      return [(k, v) for k, v in self.values.items() if k.startswith(prefix)]


def _pair(kv, timeout_s=0.5):
  exits = {0: [], 1: []}
  dogs = [Watchdog(i, 2, timeout_s=timeout_s, beat_s=0.05, client=kv,
                   exit_fn=exits[i].append) for i in range(2)]
  return dogs, exits


def _wait(cond, seconds=5.0):
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline and not cond():
    time.sleep(0.02)
  return cond()


def test_a_silent_process_is_named_and_the_other_exits(capsys):
  kv = _FakeKV()
  dogs, exits = _pair(kv)
  for d in dogs:
    d.start()
  time.sleep(0.8)  # longer than the timeout: both beat, nobody is lost
  assert exits == {0: [], 1: []}
  dogs[1].stop()  # process 1 dies: its beats stop
  assert _wait(lambda: exits[0] == [ProcessLost.exit_code])
  assert dogs[0].verdict.startswith("lost process 1 of 2: no heartbeat for")
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("error: lost process 1 of 2") and "resume" in err[-1]


def test_a_lost_coordinator_is_named():
  kv = _FakeKV()
  dogs, exits = _pair(kv)
  for d in dogs:
    d.start()
  time.sleep(0.2)
  kv.down = True  # process 0 hosted the coordination service
  dogs[0].stop()
  assert _wait(lambda: exits[1] == [ProcessLost.exit_code])
  assert dogs[1].verdict.startswith("lost process 0 of 2")  # (its silence or its service's)


def test_an_announced_error_stops_the_others_at_once():
  kv = _FakeKV()
  dogs, exits = _pair(kv, timeout_s=30)  # far longer than the test: the announcement decides
  for d in dogs:
    d.start()
  time.sleep(0.2)
  dogs[1].announce("error: could not write checkpoint 20 to /x/20: ENOSPC")
  assert _wait(lambda: exits[0] == [ProcessLost.exit_code])
  assert dogs[0].verdict == ("process 1 of 2 stopped (error: could not write checkpoint 20 to "
                             "/x/20: ENOSPC); stopping process 0")


def test_process_0_posts_the_verdict_for_the_others():
  """Three processes: 2 dies; 0 (which alone reads every heartbeat) finds it and posts the
  verdict; 1 prints the same cause with its own index."""
  kv = _FakeKV()
  exits = {i: [] for i in range(3)}
  dogs = [Watchdog(i, 3, timeout_s=0.5, beat_s=0.05, client=kv, exit_fn=exits[i].append)
          for i in range(3)]
  for d in dogs:
    d.start()
  time.sleep(0.3)
  dogs[2].stop()
  assert _wait(lambda: exits[0] == exits[1] == [ProcessLost.exit_code])
  assert dogs[0].verdict.startswith("lost process 2 of 3: no heartbeat")
  assert dogs[0].verdict.endswith("stopping process 0")
  assert dogs[1].verdict.startswith("lost process 2 of 3: no heartbeat")
  assert dogs[1].verdict.endswith("gone); stopping process 1")
