"""The lost-process watchdog's verdicts, with a fake coordination service (the real one, with a
SIGKILLed process: tests/train/test_distributed.py)."""
import threading
import time

from poi_jax.faults import ProcessLost
from poi_jax.faults.watchdog import Watchdog


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


def test_a_silent_process_is_named_and_the_other_exits(capfd):
  kv = _FakeKV()
  dogs, exits = _pair(kv)
  for d in dogs:
    d.start()
  time.sleep(0.8)  # longer than the timeout: both beat, nobody is lost
  assert exits == {0: [], 1: []}
  dogs[1].stop()  # process 1 dies: its beats stop
  assert _wait(lambda: exits[0] == [ProcessLost.exit_code])
  assert dogs[0].verdict.startswith("lost process 1 of 2: no heartbeat for")
  err = capfd.readouterr().err.strip().splitlines()
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


def _two_started(stuck_timeout_s):
  """Watchdogs of processes 0 and 1 on one fake KV store, started; ``(dogs, exits)`` with each
  process's exit codes."""
  kv = _FakeKV()
  exits = {0: [], 1: []}
  dogs = [Watchdog(i, 2, timeout_s=30, stuck_timeout_s=stuck_timeout_s, beat_s=0.05, client=kv,
                   exit_fn=exits[i].append) for i in range(2)]
  for d in dogs:
    d.start()
  return dogs, exits


def _stepping(dog, steps, pause=0.0):
  for s in steps:
    dog.progress(s)
    time.sleep(pause)


def test_a_process_left_behind_while_alive_is_named_by_both():
  """Process 1 stops making progress after step 5 (its heartbeat thread still beats: alive but
  hung); process 0 moves on to step 6 and waits; after ``stuck_timeout_s`` both end, naming 1."""
  dogs, exits = _two_started(stuck_timeout_s=0.5)
  for s in range(1, 6):
    for d in dogs:
      d.progress(s)
    time.sleep(0.06)
  dogs[0].progress(6)  # process 0 reached step 6 (then waits in its all-gather)
  time.sleep(0.3)
  assert exits == {0: [], 1: []}  # not yet: behind for less than stuck_timeout_s
  assert _wait(lambda: exits[0] == exits[1] == [ProcessLost.exit_code])
  assert dogs[0].verdict.startswith("process 1 of 2 is stuck after step 5 (training): no "
                                    "progress for ")
  assert "while process 0 reached step 6" in dogs[0].verdict
  assert dogs[1].verdict.endswith("stuck_timeout_s=0.5); stopping process 1")


def test_a_pause_every_process_shares_is_not_stuck_and_the_clock_starts_when_one_moves_on():
  """A long first step (compilation) or evaluation pauses every process: nobody is behind. When
  process 0 then moves on, process 1 (whose last progress is long past) follows within the
  timeout: no verdict, because the clock starts when process 0 moved, not at 1's last step."""
  dogs, exits = _two_started(stuck_timeout_s=0.5)
  time.sleep(1.2)  # the shared pause, well over stuck_timeout_s
  dogs[0].progress(1)
  time.sleep(0.3)  # process 1 is slower (a contended step) but well within the timeout
  dogs[1].progress(1)
  dogs[1].progress(phase="evaluating")  # evaluation batches count as progress too
  dogs[0].progress(phase="evaluating")
  time.sleep(0.8)
  assert exits == {0: [], 1: []}, (dogs[0].verdict, dogs[1].verdict)
  for d in dogs:
    d.stop()


def test_stuck_timeout_0_turns_the_check_off():
  dogs, exits = _two_started(stuck_timeout_s=0)
  dogs[0].progress(1)  # process 1 never follows
  time.sleep(1.0)
  assert exits == {0: [], 1: []}
  for d in dogs:
    d.stop()


def test_the_coordinators_loss_is_named_from_its_silent_address():
  """`poi_jax.faults.coordination.verdict`: what JAX's client callback (or the terminate guard)
  prints. The real thing, with a SIGKILLed process 0: tests/faults/test_lost_process.py."""
  from poi_jax.faults.coordination import coordinator_answers, verdict
  dog = Watchdog(1, 2, timeout_s=30, client=_FakeKV(), exit_fn=lambda code: None)
  dog.progress(7)
  line = verdict(1, 2, "10.0.0.1:1234", watchdog=dog, answers=lambda address: False)
  assert line == ("lost process 0 of 2 (the coordinator: it hosts JAX's coordination service) "
                  "at step 7: 10.0.0.1:1234 no longer answers (killed, crashed or its host is "
                  "gone)")
  dog.posted = "process 0 of 2 stopped (error: non-finite loss at step 7 ...)"  # said, then gone
  assert verdict(1, 2, "10.0.0.1:1234", watchdog=dog, answers=lambda a: False) == dog.posted
  # Process 0 (the service answers): the process whose heartbeat stopped is the one named.
  zero = Watchdog(0, 2, timeout_s=30, client=_FakeKV(), exit_fn=lambda code: None)
  zero._seen[1] = (5, time.monotonic() - 40)
  assert verdict(0, 2, "127.0.0.1:1", watchdog=zero).startswith(
      "lost process 1 of 2: JAX's coordination service declared it dead (no heartbeat for 40 s)")
  assert not coordinator_answers("127.0.0.1:1", tries=1)  # (port 1: nothing listens)


def test_the_client_gets_the_callback_only_during_initialize():
  """`coordination._client_callback` hands JAX's client our callback (jax.distributed.initialize
  passes none) and puts the jaxlib function back afterwards; a jaxlib without the argument is
  left alone."""
  import types
  from poi_jax.faults import coordination
  calls = []

  def client(address, node_id, **kwargs):
    """get_distributed_runtime_client(..., missed_heartbeat_callback=None, ...)"""
    calls.append(kwargs)

  fake = types.SimpleNamespace(_jax=types.SimpleNamespace(get_distributed_runtime_client=client))
  with coordination._client_callback(fake, coordination._on_service_error):
    fake._jax.get_distributed_runtime_client("127.0.0.1:1", 1, heartbeat_timeout=100)
  assert calls == [{"heartbeat_timeout": 100,
                    "missed_heartbeat_callback": coordination._on_service_error}]
  assert fake._jax.get_distributed_runtime_client is client
  client.__doc__ = "get_distributed_runtime_client(address, node_id)"  # an older jaxlib
  with coordination._client_callback(fake, coordination._on_service_error):
    assert fake._jax.get_distributed_runtime_client is client


def test_a_process_compiling_longer_than_the_others_is_not_stuck():
  """Process 1's compile takes far longer than process 0's (a persistent-cache miss where 0
  hit): while its main thread is in JAX's compiler it counts as progressing; once it leaves it
  without progress, the clock starts."""
  kv = _FakeKV()
  exits = {0: [], 1: []}
  compiling = [True]
  dogs = [Watchdog(i, 2, timeout_s=30, stuck_timeout_s=0.5, beat_s=0.05, client=kv,
                   busy_fn=(lambda: False) if i == 0 else (lambda: compiling[0]),
                   exit_fn=exits[i].append) for i in range(2)]
  for d in dogs:
    d.start()
  dogs[0].progress(1)  # process 0 compiled and ran step 1
  time.sleep(1.5)  # process 1 still compiling: three times the timeout
  assert exits == {0: [], 1: []}, dogs[0].verdict
  compiling[0] = False  # ... and now hung right after it
  assert _wait(lambda: exits[0] == exits[1] == [ProcessLost.exit_code])
  assert dogs[0].verdict.startswith("process 1 of 2 is stuck before its first step")


def test_the_main_thread_is_seen_compiling_from_its_frames():
  """`in_compiler` finds JAX's compiler (or jit's tracing / lowering) among a frame's callers;
  a real compile seen from another thread, as the heartbeat thread sees it."""
  import sys

  import jax
  import jax.numpy as jnp

  from poi_jax.faults.watchdog import in_compiler
  namespace: dict = {}
  exec(compile("import sys\nframe = sys._getframe()",
               "/site-packages/jax/_src/compiler.py", "exec"), namespace)
  assert in_compiler(namespace["frame"])
  assert not in_compiler(sys._getframe())
  seen = []
  main = threading.get_ident()
  stop = threading.Event()

  def look():
    while not stop.is_set():
      seen.append(in_compiler(sys._current_frames().get(main)))
      time.sleep(0.001)

  looker = threading.Thread(target=look)
  looker.start()
  try:
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum() * 3.0 + jnp.cos(x).mean())
    f.lower(jnp.ones((64, 64))).compile()
  finally:
    stop.set()
    looker.join()
  assert any(seen)  # during the compile
  after = []
  later = threading.Thread(target=lambda: after.append(in_compiler(sys._current_frames()[main])))
  later.start()
  later.join()
  assert after == [False]  # and not once it returned


def test_a_finished_process_is_neither_lost_nor_stuck_and_its_threads_are_gone():
  """`Watchdog.finish` (at exit): the threads are joined, and a last beat says the process
  finished, so the other process, still at work, never names it lost or stuck."""
  kv = _FakeKV()
  dogs, exits = _pair(kv)
  dogs[0].stuck_timeout_s = 0.3
  for d in dogs:
    d.start()
  time.sleep(0.2)
  dogs[1].finish()
  assert not any(t.is_alive() for t in dogs[1]._threads)
  assert kv.values["poi_jax/alive/1"].split()[3] == "finished"
  for _ in range(20):  # process 0 goes on stepping, far past process 1
    dogs[0].progress(step=_)
    time.sleep(0.05)
  assert exits == {0: [], 1: []} and dogs[0].verdict is None
  dogs[0].finish()


def test_processes_finishing_together_leave_at_once():
  kv = _FakeKV()
  dogs, exits = _pair(kv, timeout_s=5.0)
  for d in dogs:
    d.start()
  t0 = time.monotonic()
  leaving = [threading.Thread(target=d.finish) for d in dogs]
  for t in leaving:
    t.start()
  for t in leaving:
    t.join(timeout=30)
  assert time.monotonic() - t0 < 2.0  # not the 2 x 5 s bound: each saw the other finish
  assert exits == {0: [], 1: []}


def test_a_process_lost_while_the_others_finish_is_named(capfd):
  """A kill as the run ends (found by launch/chaos.py): process 1 dies while process 0 is
  leaving. Process 0 still watches while it waits for the others to finish, so it names the
  lost process within the timeout instead of waiting in JAX's shutdown barrier (300 s)."""
  kv = _FakeKV()
  dogs, exits = _pair(kv, timeout_s=0.5)
  for d in dogs:
    d.start()
  time.sleep(0.2)
  dogs[1].stop()  # killed: silent, and never says it finished
  t0 = time.monotonic()
  dogs[0].finish()
  assert exits[0] == [ProcessLost.exit_code], capfd.readouterr().err
  assert time.monotonic() - t0 < 2.0
  assert "lost process 1 of 2" in capfd.readouterr().err


def test_no_heartbeat_reaches_the_client_after_jax_destroys_it_at_exit(tmp_path):
  """The race behind the resumed task's segmentation fault (issue 49): jax.distributed's atexit
  shutdown destroys the coordination client while the heartbeat thread, a daemon, may still be
  inside it. Here a fake client that was destroyed aborts the process when called, as a freed
  C++ client would crash it; `poi_jax.faults.watchdog.start` registers `finish` at exit, after
  the client's own shutdown (as jax.distributed.initialize's comes first), so it runs first and
  the process exits cleanly. Without it (the old code) the beat thread, beating every
  millisecond, calls the destroyed client and the process aborts. The timeout is far beyond the
  script's life and the fake says every process finished, so no verdict can end the process
  instead (with a 0.5 s timeout a loaded CI host once starved the beat thread into one)."""
  import subprocess
  import sys
  script = tmp_path / "race.py"
  script.write_text(
      "import atexit, functools, os, time\n"
      "from poi_jax.faults import watchdog\n"
      "class Client:\n"
      "  destroyed = False\n"
      "  def key_value_set(self, *a, **k):\n"
      "    if self.destroyed: os.abort()\n"
      "    time.sleep(0.0005)\n"
      "  def key_value_dir_get(self, prefix):\n"
      "    if self.destroyed: os.abort()\n"
      "    return [(prefix + '0', '1')] if prefix == watchdog._ALL_FINISHED else []\n"
      "client = Client()\n"
      "def shutdown():  # jax.distributed's atexit shutdown\n"
      "  client.destroyed = True\n"
      "  time.sleep(0.2)  # the rest of interpreter shutdown, threads still scheduled\n"
      "atexit.register(shutdown)\n"
      "watchdog._client = lambda: client\n"
      "watchdog.Watchdog = functools.partial(watchdog.Watchdog, beat_s=0.001)\n"
      "dog = watchdog.start(1, 2, timeout_s=60)\n"
      "time.sleep(0.2)\n")
  r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                     cwd=str(tmp_path), env={**__import__("os").environ,
                                             "PYTHONPATH": str(__import__("pathlib").Path(
                                                 __file__).resolve().parents[2])})
  assert r.returncode == 0, (r.returncode, r.stderr[-2000:])


def test_the_verdict_stays_the_last_line_while_the_main_thread_prints(tmp_path):
  """The failure of CI stop 58 (launch/chaos.py: "no one-line cause ... last line 'scoring 40 of
  4449 questions'"): process 0 found process 1 lost while its main thread was still starting up
  and printing; the verdict went out, and during the two beats process 0 gives the others to read
  it, the main thread's next line landed after it. Here the real exit (os._exit) of process 0
  of 2, a fake coordination service in which process 1 never beats, and a main thread that
  prints without pause into the same file as stderr (as launch/local_multiprocess.sh's logs)."""
  import subprocess
  import sys
  script = tmp_path / "printing.py"
  script.write_text(
      "import time\n"
      "from poi_jax.faults import watchdog\n"
      "class Client:\n"
      "  values = {}\n"
      "  def key_value_set(self, key, value, allow_overwrite=True):\n"
      "    self.values[key] = value\n"
      "  def key_value_dir_get(self, prefix):\n"
      "    return [(k, v) for k, v in list(self.values.items()) if k.startswith(prefix)]\n"
      "watchdog._client = lambda: Client()\n"
      "watchdog.start(0, 2, timeout_s=0.5)\n"
      "while True:\n"
      "  print('scoring 40 of 4449 questions', flush=True)\n"
      "  time.sleep(0.001)\n")
  log = tmp_path / "proc0.log"
  with open(log, "w") as out:
    r = subprocess.run([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT,
                       timeout=60, cwd=str(tmp_path),
                       env={**__import__("os").environ, "PYTHONUNBUFFERED": "1",
                            "PYTHONPATH": str(__import__("pathlib").Path(
                                __file__).resolve().parents[2])})
  lines = [l for l in log.read_text().splitlines() if l.strip()]
  assert r.returncode == ProcessLost.exit_code, lines[-5:]
  assert lines[0].startswith("scoring"), lines[:3]  # the main thread did print before the end
  assert lines[-1].startswith("error: lost process 1 of 2: no heartbeat"), lines[-3:]
