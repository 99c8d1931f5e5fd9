"""A lost process in a multi-process run ends every other process within seconds, in one line.

Without this, when one process of a `jax.distributed` run dies (SIGKILL, OOM, a lost host) the
others either fail in a collective with a long traceback (gloo: "Connection reset by peer") and
then wait in ``jax.distributed.shutdown`` for ``shutdown_timeout_seconds``, or block in the
collective until the coordination service's heartbeat timeout aborts them with a C++ fatal log.

`Watchdog` (started by `poi_jax.main` right after ``jax.distributed.initialize``): a thread
in each process writes a counter under ``poi_jax/alive/<process>`` in the coordination
service's key-value store every ``beat_s`` seconds; process 0 reads them all, and a process
whose counter has not moved for ``timeout_s`` is lost: process 0 posts that verdict under
``poi_jax/verdict/``, which every process reads each beat (so the store answers O(N) requests a
beat, not N x N). A coordinator that stops answering for ``timeout_s`` is lost too. Each
process then prints one line naming the lost one (``lost process 1 of 2: no heartbeat for 10 s
...``) and ends at once with `ProcessLost.exit_code` (``os._exit``: no atexit shutdown barrier
that would wait for the dead process). ``timeout_s`` sits below JAX's own heartbeat timeout
(``distributed.heartbeat_timeout_s``), so the one line comes before JAX's abort. A process that
is alive but stuck (a hung collective, jax#38503) still beats: the cluster's own job timeout or
the launcher's kill covers that. Nor is the loss of process 0's host one line: JAX's client
aborts every other process at once (within a second, with its own fatal log naming "the leader
task") when the coordination service it hosts disappears; its fatal-error callback cannot be
replaced from Python in jax 0.10 (the jaxlib binding aborts converting the status), so the
launchers' one line (`launch/local_multiprocess.sh`: ``process 0 failed with status 137``)
names it there.

The main thread may see the loss first (a collective fails); `Watchdog.explain` then waits up to
``timeout_s`` for the verdict, so the line names the lost process instead of a gloo error.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from poi_jax.faults import ProcessLost

_PREFIX = "poi_jax/alive/"
_VERDICT = "poi_jax/verdict/"


def _client():
  from jax._src import distributed  # the client jax.distributed.initialize made
  return distributed.global_state.client


class Watchdog:
  """Heartbeats through the coordination service; see the module docstring.

  Args:
    process_index, process_count: this process and the number of processes.
    timeout_s: seconds without a heartbeat after which a process is lost.
    beat_s: seconds between heartbeats.
    exit_fn: what ends the process (tests replace it); receives the exit code.
  """

  def __init__(self, process_index: int, process_count: int, *, timeout_s: float,
               beat_s: float = 1.0, client=None, exit_fn=os._exit):
    self.index, self.count = process_index, process_count
    self.timeout_s, self.beat_s = float(timeout_s), float(beat_s)
    self._client = client
    self._exit = exit_fn
    self._stop = threading.Event()
    self.verdict: str | None = None
    self._found = threading.Event()
    now = time.monotonic()
    self._seen = {i: (-1, now) for i in range(process_count)}  # process -> (counter, when)
    self._last_ok = now
    self.posted: str | None = None  # a verdict posted by another process (or its error)
    self._threads: list[threading.Thread] = []

  def start(self) -> "Watchdog":
    self._client = self._client or _client()
    for target in (self._beat, self._watch):
      t = threading.Thread(target=target, name=f"poi-jax-{target.__name__[1:]}", daemon=True)
      t.start()
      self._threads.append(t)
    return self

  def stop(self) -> None:
    self._stop.set()

  def _beat(self) -> None:
    beat = 0
    while not self._stop.is_set():
      beat += 1
      try:
        self._client.key_value_set(f"{_PREFIX}{self.index}", str(beat), allow_overwrite=True)
        now = time.monotonic()
        if self.index == 0:  # process 0 watches everyone (N reads a beat, not N x N)
          values = dict(self._client.key_value_dir_get(_PREFIX))
          for i in range(self.count):
            value = values.get(f"{_PREFIX}{i}", "-1")
            counter = int(value) if value.lstrip("-").isdigit() else -1
            if counter != self._seen[i][0]:
              self._seen[i] = (counter, now)
        verdict = dict(self._client.key_value_dir_get(_VERDICT))
        if verdict:
          self.posted = next(iter(verdict.values()))
        self._last_ok = now
      except Exception:  # the coordinator is gone or unreachable: `_watch` decides when
        pass
      self._stop.wait(self.beat_s)

  def check(self, now: float | None = None) -> str | None:
    """The verdict at ``now`` (monotonic seconds): a line naming the lost process (or the one
    that stopped with an error), or None."""
    now = time.monotonic() if now is None else now
    me = f"; stopping process {self.index}"
    if self.posted:  # another process's verdict, or its own error (`announce`)
      return self.posted + me
    if self.index != 0 and now - self._last_ok > self.timeout_s:
      return (f"lost process 0 of {self.count} (the coordinator): no answer for "
              f"{now - self._last_ok:.0f} s{me}")
    for i, (_, when) in self._seen.items() if self.index == 0 else ():
      if i != self.index and now - when > self.timeout_s:
        return (f"lost process {i} of {self.count}: no heartbeat for {now - when:.0f} s "
                f"(killed, crashed or its host is gone){me}")
    return None

  def _watch(self) -> None:
    while not self._stop.wait(min(self.beat_s, 1.0)):
      verdict = self.check()
      if verdict:
        self.fail(verdict)
        return

  def fail(self, verdict: str) -> None:
    """Prints ``verdict`` (the run's last word) and ends the process; process 0 first posts it
    for the others (they watch only it)."""
    self.verdict = verdict
    self._stop.set()
    self._found.set()
    print(f"\nerror: {verdict}. Checkpoints saved so far are kept: run the same command again "
          f"to resume", file=sys.stderr, flush=True)
    if not self.posted and self.index == 0:
      self._post(verdict.rsplit("; stopping process", 1)[0])
    self._exit(ProcessLost.exit_code)

  def announce(self, reason: str) -> None:
    """Tells the other processes that this one stops with ``reason`` (one line), so that they
    stop at once, naming it, instead of waiting for it in their next collective."""
    self._stop.set()
    self._post(f"process {self.index} of {self.count} stopped ({reason[:500]})")

  def _post(self, verdict: str) -> None:
    """Posts ``verdict`` for the others and gives them two beats to read it before this
    process (maybe the coordinator's host) goes; never blocks longer than that on an
    unreachable coordinator."""
    def post():
      try:
        self._client.key_value_set(f"{_VERDICT}{self.index}", verdict, allow_overwrite=True)
      except Exception:  # the coordinator is gone: the others find out by its silence
        return
      time.sleep(2 * self.beat_s)
    poster = threading.Thread(target=post, daemon=True)
    poster.start()
    poster.join(timeout=2 * self.beat_s + 2)

  def explain(self, error: BaseException) -> None:
    """Called when the main thread failed in a multi-process run: if a process was lost (now
    or within ``timeout_s``), that is the cause, said in one line, and the process ends."""
    deadline = time.monotonic() + self.timeout_s + 2 * self.beat_s
    while time.monotonic() < deadline and not self._stop.is_set():
      if self._found.wait(0.2):
        break
    if self.verdict:  # `_watch` has printed it and is ending the process
      self._found.wait()
      time.sleep(5)  # (os._exit runs in the watch thread)


_ACTIVE: Watchdog | None = None


def start(process_index: int, process_count: int, *, timeout_s: float) -> Watchdog | None:
  """Starts the process's watchdog (None for a single process or ``timeout_s <= 0``)."""
  global _ACTIVE
  if process_count <= 1 or timeout_s <= 0:
    return None
  _ACTIVE = Watchdog(process_index, process_count, timeout_s=timeout_s).start()
  return _ACTIVE


def active() -> Watchdog | None:
  return _ACTIVE
