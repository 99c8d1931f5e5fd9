"""A lost process in a multi-process run ends every other process within seconds, in one line.

Without this, when one process of a `jax.distributed` run dies (SIGKILL, OOM, a lost host) the
others either fail in a collective with a long traceback (gloo: "Connection reset by peer") and
then wait in ``jax.distributed.shutdown`` for ``shutdown_timeout_seconds``, or block in the
collective until the coordination service's heartbeat timeout aborts them with a C++ fatal log.

`Watchdog` (started by `poi_jax.main` right after ``jax.distributed.initialize``): a thread
in each process writes a counter (and its progress, below) under ``poi_jax/alive/<process>``
in the coordination service's key-value store every ``beat_s`` seconds; process 0 reads them all, and a process
whose counter has not moved for ``timeout_s`` is lost: process 0 posts that verdict under
``poi_jax/verdict/``, which every process reads each beat (so the store answers O(N) requests a
beat, not N x N). A coordinator that stops answering for ``timeout_s`` is lost too. Each
process then prints one line naming the lost one (``lost process 1 of 2: no heartbeat for 10 s
...``) and ends at once with `ProcessLost.exit_code` (``os._exit``: no atexit shutdown barrier
that would wait for the dead process). ``timeout_s`` sits below JAX's own heartbeat timeout
(``distributed.heartbeat_timeout_s``), so the one line comes before JAX's abort. The loss of
process 0 itself (the host of the coordination service) is said by
`poi_jax.faults.coordination`, which JAX's client calls within a second; it names the step from
here.

A process that is alive but stuck (a deadlocked input pipeline, a hang in Python: its heartbeat
thread still beats, so neither this nor JAX's heartbeat sees it, jax#38503) is caught by
progress: the training loop calls `progress` at every step and evaluation batch (a Python
counter, no device sync), the heartbeat publishes it, and process 0 names a process whose
progress stayed behind another's for ``stuck_timeout_s`` (``distributed.stuck_timeout_s``). The
clock starts when another process moves past it, not at its own last step, so the first step's
compilation, an evaluation or a checkpoint save (which every process does together) never
count: only a process that the others have left behind. A process whose main thread is in JAX's
compiler (`main_thread_compiling`, read once a beat) is busy, not behind: one process may
compile for minutes longer than another (a persistent-cache miss where the other hit). A hang that all processes share (a
collective every process waits in) is not named; the cluster's job time limit ends it.

The main thread may see the loss first (a collective fails); `Watchdog.explain` then waits up to
``timeout_s`` for the verdict, so the line names the lost process instead of a gloo error.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from poi_jax.faults import ProcessLost

_PREFIX = "poi_jax/alive/"
_VERDICT = "poi_jax/verdict/"
_ALL_FINISHED = "poi_jax/all_finished/"  # posted by process 0 once every process finished
_RESUME = "Checkpoints saved so far are kept: run the same command again to resume"
FINISHED = "finished"  # the phase of a process that is leaving normally (`Watchdog.finish`)


def _flush() -> None:
  try:
    sys.stdout.flush()
    sys.stderr.flush()
  except Exception:  # (a closed or busy stream: the line still goes out)
    pass


def silence_output() -> int:
  """Flushes stdout and stderr, then points both at /dev/null; returns a copy of stderr's
  descriptor. For a process about to end (``os._exit``) whose last line is being written: the
  main thread and others run on until the exit (a progress bar, a "scoring 40 of 4449 questions"
  line; process 0 first gives the others two beats to read its verdict), and nothing they print
  may land after that line in the log, whose last line names the cause (`launch/chaos.py`
  checks it)."""
  _flush()
  kept = os.dup(2)
  null = os.open(os.devnull, os.O_WRONLY)
  os.dup2(null, 1)
  os.dup2(null, 2)
  os.close(null)
  return kept


def write_line(verdict: str, *, last: bool = False) -> None:
  """Writes ``error: <verdict>. <how to resume>`` to stderr as the process's last line: with one
  ``write`` to the file descriptor (it may run in a C++ thread while the main thread holds
  Python's stderr buffer). ``last``: the process ends next, and nothing after the line reaches
  the log (`silence_output`)."""
  if last:
    out = silence_output()
  else:
    _flush()
    out = 2
  os.write(out, f"\nerror: {verdict}. {_RESUME}\n".encode(errors="replace"))


def _parse(value: str) -> tuple[int, int, int | None, str, bool]:
  """A published heartbeat ``"<beat> <progress ticks> <step> <phase> <compiling 0/1>"``
  (-1: unknown)."""
  parts = (value or "").split()
  nums = [int(p) if p.lstrip("-").isdigit() else -1 for p in parts[:3]] + [-1] * 3
  step = nums[2] if len(parts) > 2 and nums[2] >= 0 else None
  return (nums[0], nums[1], step, parts[3] if len(parts) > 3 else "training",
          len(parts) > 4 and parts[4] == "1")


# Where a main thread is compiling (or tracing / lowering for a compile): JAX's compiler module,
# and the lowering and tracing entry points of jit. A process there is busy, not stuck: its
# compile may take minutes longer than another process's (a persistent-cache miss where the
# other hit).
_COMPILER_FILE = os.path.join("jax", "_src", "compiler.py")
_COMPILE_FUNCTIONS = frozenset({"lower_sharding_computation", "_cached_lowering_to_hlo",
                                "_create_pjit_jaxpr", "trace_to_jaxpr"})


def in_compiler(frame) -> bool:
  """Whether ``frame`` or a caller of it is in JAX's compiler, or tracing / lowering for it."""
  while frame is not None:
    code = frame.f_code
    if code.co_filename.endswith(_COMPILER_FILE) or code.co_name in _COMPILE_FUNCTIONS:
      return True
    frame = frame.f_back
  return False


def main_thread_compiling() -> bool:
  """Whether the main thread is compiling now (read once a beat by the heartbeat thread)."""
  return in_compiler(sys._current_frames().get(threading.main_thread().ident))


def _client():
  from poi_jax import jax_internals  # the client jax.distributed.initialize made
  return jax_internals.distributed_client()


class Watchdog:
  """Heartbeats through the coordination service; see the module docstring.

  Args:
    process_index, process_count: this process and the number of processes.
    timeout_s: seconds without a heartbeat after which a process is lost.
    stuck_timeout_s: seconds a process may stay behind another's progress (0: not checked).
    beat_s: seconds between heartbeats.
    busy_fn: whether this process's main thread is compiling now (tests replace it).
    exit_fn: what ends the process (tests replace it); receives the exit code.
  """

  def __init__(self, process_index: int, process_count: int, *, timeout_s: float,
               stuck_timeout_s: float = 0.0, beat_s: float = 1.0, client=None,
               busy_fn=main_thread_compiling, exit_fn=os._exit):
    self.index, self.count = process_index, process_count
    self.timeout_s, self.beat_s = float(timeout_s), float(beat_s)
    now = time.monotonic()
    self.stuck_timeout_s = float(stuck_timeout_s)
    # This process's progress (`progress`): ticks count steps and evaluation batches, which
    # every process makes in the same order; the step and phase are for the lines.
    self.ticks, self.step, self.phase = 0, None, "start"
    # Process 0's view of everyone's progress: process -> (ticks, step, phase, when it changed),
    # and since when another process has been ahead of it (None: not behind).
    self._progress = {i: (0, None, "start", now) for i in range(process_count)}
    self._busy = busy_fn
    self._behind: dict[int, float | None] = {i: None for i in range(process_count)}
    self._failing = threading.Lock()
    self._client = client
    self._exit = exit_fn
    self._stop = threading.Event()
    self.verdict: str | None = None
    self._found = threading.Event()
    self._seen = {i: (-1, now) for i in range(process_count)}  # process -> (counter, when)
    self._last_ok = now
    self.posted: str | None = None  # a verdict posted by another process (or its error)
    self._threads: list[threading.Thread] = []
    self._all_finished = threading.Event()

  def start(self) -> "Watchdog":
    self._client = self._client or _client()
    for target in (self._beat, self._watch):
      t = threading.Thread(target=target, name=f"poi-jax-{target.__name__[1:]}", daemon=True)
      t.start()
      self._threads.append(t)
    return self

  def stop(self) -> None:
    self._stop.set()

  def finish(self) -> None:
    """This process leaves normally: one beat says it finished, and it waits (at most twice
    ``timeout_s``) while the others finish too, still watching, so that a process lost now (a
    kill as the run ends) is named in one line instead of leaving the others in JAX's shutdown
    barrier for ``distributed.shutdown_timeout_s``. Then its heartbeat and watch threads are
    stopped and joined, and a last beat says it finished, so the others never call it lost or
    stuck while they finish. Run at exit, before ``jax.distributed``'s own atexit shutdown
    destroys the coordination client: a heartbeat thread left running would call into the
    destroyed client during interpreter shutdown, a native crash after the run's last step
    (issue 49). A process that stops with an error (`announce`) does not wait."""
    if self._threads and not self._stop.is_set():
      self.phase = FINISHED  # published by the next beat
      self._all_finished.wait(2 * self.timeout_s + 2 * self.beat_s)
    self._stop.set()
    for t in self._threads:
      t.join(timeout=self.beat_s + 5.0)
    self._threads = [t for t in self._threads if t.is_alive()]
    self.phase = FINISHED
    try:
      self._client.key_value_set(
          f"{_PREFIX}{self.index}", f"-1 {self.ticks} {-1 if self.step is None else self.step} "
          f"{FINISHED} 0", allow_overwrite=True)
    except Exception:  # the coordinator is gone: nothing to tell
      pass

  def progress(self, step: int | None = None, phase: str = "training") -> None:
    """Called by the main thread at each training step and evaluation batch (cheap: no sync)."""
    self.ticks += 1
    if step is not None:
      self.step = step
    self.phase = phase

  def stalest(self) -> tuple[int, float] | None:
    """(process, seconds since its last heartbeat) of the longest-silent other process, as
    process 0 sees them (None elsewhere, or when every one beat within two beats)."""
    if self.index != 0:
      return None
    now = time.monotonic()
    ages = [(now - when, i) for i, (_, when) in self._seen.items() if i != self.index]
    age, i = max(ages, default=(0.0, -1))
    return (i, age) if age > 2 * self.beat_s else None

  def _observe(self, values: dict, now: float) -> None:
    """Process 0: updates the heartbeat and progress views from the published values."""
    for i in range(self.count):
      beat, ticks, step, phase, compiling = _parse(values.get(f"{_PREFIX}{i}", ""))
      if beat != self._seen[i][0]:
        self._seen[i] = (beat, now)
      if ticks != self._progress[i][0] or compiling or phase != self._progress[i][2]:
        self._progress[i] = (ticks, step, phase, now)  # (compiling is progress too)
        self._behind[i] = None
    if (not self._all_finished.is_set()
        and all(p[2] == FINISHED for p in self._progress.values())):
      self._all_finished.set()  # every process has finished: the others may leave too
      self._client.key_value_set(f"{_ALL_FINISHED}0", "1", allow_overwrite=True)
    lead = max(p[0] for p in self._progress.values())
    for i, (ticks, *_rest) in self._progress.items():
      if ticks < lead and self._behind[i] is None:  # (compiling: reset above, every beat)
        self._behind[i] = now  # another process moved past it: its clock starts now

  def _beat(self) -> None:
    beat = 0
    while not self._stop.is_set():
      beat += 1
      try:
        busy = 1 if self.stuck_timeout_s > 0 and self._busy() else 0
        published = (f"{beat} {self.ticks} {-1 if self.step is None else self.step} "
                     f"{self.phase} {busy}")
        self._client.key_value_set(f"{_PREFIX}{self.index}", published, allow_overwrite=True)
        now = time.monotonic()
        if self.index == 0:  # process 0 watches everyone (N reads a beat, not N x N)
          self._observe(dict(self._client.key_value_dir_get(_PREFIX)), now)
        verdict = dict(self._client.key_value_dir_get(_VERDICT))
        if verdict:
          self.posted = next(iter(verdict.values()))
        if self.phase == FINISHED and self.index != 0 and not self._all_finished.is_set() \
            and self._client.key_value_dir_get(_ALL_FINISHED):
          self._all_finished.set()
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
    at = f" at step {self.step}" if self.step is not None else ""
    if self.index != 0 and now - self._last_ok > self.timeout_s:
      return (f"lost process 0 of {self.count} (the coordinator: it hosts JAX's coordination "
              f"service){at}: no answer for {now - self._last_ok:.0f} s (stopped, hung, or its "
              f"host is unreachable){me}")
    for i, (_, when) in self._seen.items() if self.index == 0 else ():
      if i != self.index and now - when > self.timeout_s and self._progress[i][2] != FINISHED:
        return (f"lost process {i} of {self.count}{at}: no heartbeat for {now - when:.0f} s "
                f"(killed, crashed or its host is gone){me}")
    if self.index == 0 and self.stuck_timeout_s > 0:
      return self._stuck(now, me)
    return None

  def _stuck(self, now: float, me: str) -> str | None:
    """The line for a process left behind for ``stuck_timeout_s`` while still beating."""
    for i, since in self._behind.items():
      fresh = i == self.index or now - self._seen[i][1] <= max(3 * self.beat_s, 3.0)
      if (since is None or not fresh or now - since <= self.stuck_timeout_s
          or self._progress[i][2] == FINISHED):
        continue
      _, step, phase, changed = self._progress[i]
      lead = max(range(self.count), key=lambda j: self._progress[j][0])
      where = f"after step {step}" if step is not None else "before its first step"
      ahead = self._progress[lead][1]
      return (f"process {i} of {self.count} is stuck {where} ({phase}): no progress for "
              f"{now - changed:.0f} s while process {lead} reached "
              f"{'step %d' % ahead if ahead is not None else 'its first step'} (alive but hung: "
              f"a deadlocked input pipeline or a hang in Python; distributed.stuck_timeout_s="
              f"{self.stuck_timeout_s:g}){me}")
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
    if not self._failing.acquire(blocking=False):  # another thread is already ending it
      while True:
        time.sleep(60)
    self.verdict = verdict
    self._stop.set()
    self._found.set()
    write_line(verdict, last=self._exit is os._exit)  # (tests replace the exit: output stays)
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

  def explain(self, error: BaseException, wait_s: float | None = None) -> None:
    """Called when the main thread failed in a multi-process run: if a process was lost (now
    or within ``wait_s``, default ``timeout_s``), that is the cause, said in one line, and the
    process ends."""
    wait_s = self.timeout_s if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s + 2 * self.beat_s
    while time.monotonic() < deadline and not self._stop.is_set():
      if self._found.wait(0.2):
        break
    if self.verdict:  # `_watch` has printed it and is ending the process
      self._found.wait()
      time.sleep(5)  # (os._exit runs in the watch thread)


_ACTIVE: Watchdog | None = None


def start(process_index: int, process_count: int, *, timeout_s: float,
          stuck_timeout_s: float = 0.0) -> Watchdog | None:
  """Starts the process's watchdog (None for a single process or ``timeout_s <= 0``)."""
  global _ACTIVE
  if process_count <= 1 or timeout_s <= 0:
    return None
  _ACTIVE = Watchdog(process_index, process_count, timeout_s=timeout_s,
                     stuck_timeout_s=stuck_timeout_s).start()
  # atexit runs last-registered first: this runs before jax.distributed's shutdown (registered
  # by jax.distributed.initialize, which comes first), so the threads are gone before the client.
  atexit.register(finish)
  return _ACTIVE


def finish() -> None:
  """`Watchdog.finish` of the process's watchdog, if any (registered at exit by `start`)."""
  global _ACTIVE
  if _ACTIVE is not None:
    _ACTIVE.finish()
    _ACTIVE = None


def active() -> Watchdog | None:
  return _ACTIVE


def progress(step: int | None = None, phase: str = "training") -> None:
  """The main thread's progress mark (a no-op without a watchdog); see `Watchdog.progress`."""
  if _ACTIVE is not None:
    _ACTIVE.progress(step, phase)
