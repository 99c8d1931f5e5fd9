"""`jax.distributed.initialize` with one line, instead of JAX's C++ fatal log, when the
coordination service is lost (process 0, which hosts it, was killed or its host is gone) or
reports a dead process.

Why this module: JAX's client (jaxlib 0.10) ends the process as soon as its coordination service
reports an error or stops answering, by default with ``LOG(FATAL)`` ("Terminating process because
the JAX distributed service detected fatal errors", a C++ stack trace, SIGABRT), measured 0.01 to
0.1 s after process 0 is SIGKILLed: before the watchdog (`poi_jax.faults.watchdog`) can speak. The
client takes a ``missed_heartbeat_callback`` for that moment, but `jax.distributed.initialize`
does not pass one, and the jaxlib 0.10 binding cannot hand the C++ ``absl::Status`` to a Python
callback: the conversion throws (``std::bad_cast``) in the client's thread, which ends in
``std::terminate``. So `initialize`

1. passes `_on_service_error` as that callback (the seam: ``get_distributed_runtime_client`` of
   the jaxlib module that ``jax._src.distributed`` calls, wrapped for the duration of the call);
2. installs a ``std::terminate`` handler (ctypes, libstdc++'s ``std::set_terminate``) that acts
   only on that failed conversion (a cast error in flight, the callback registered) and does
   what the callback would; any other terminate goes to the previous handler unchanged.

Either way the process prints one line naming the lost process and ends at once with
`ProcessLost.exit_code` (``os._exit``: the shutdown barrier would wait for the dead). Which
process: process 0 (the coordinator) when its address no longer accepts a connection; else the
one the watchdog saw go silent; else "a process" with the service's words. When a later jaxlib
converts the status, step 1 alone does it and step 2 never fires. Where the handler cannot be
installed (no libstdc++), JAX's own fatal log stays, as before.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import socket
import sys
import threading
import time

from poi_jax.faults import ProcessLost

_CALLBACK_ARG = "missed_heartbeat_callback"
_STATE: dict = {"address": None, "index": None, "count": None, "fired": threading.Lock()}


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, **timeouts) -> None:
  """`jax.distributed.initialize(coordinator_address, num_processes, process_id, **timeouts)`
  (None: detected from the cluster's environment) with the one-line end described above."""
  import jax

  from poi_jax import jax_internals
  distributed = jax_internals.distributed_module()
  # JAX's preemption service installs a SIGTERM handler that only notes the signal for its own
  # sync points, which poi-jax does not use (the training loop's PreemptionWatcher agrees on a
  # step itself). Left on, a SIGTERM before the loop's watcher was set (start-up, compiling) was
  # swallowed: the process logged "SIGTERM caught" and ran on to its end. Off, such a SIGTERM
  # ends the process as in a one-process run, and the others name it.
  jax.config.update("jax_enable_preemption_service", False)
  with _client_callback(distributed, _on_service_error):
    jax.distributed.initialize(coordinator_address, num_processes, process_id, **timeouts)
  _STATE.update(address=distributed.global_state.coordinator_address,
                index=jax.process_index(), count=jax.process_count())
  _TerminateGuard.install()


@contextlib.contextmanager
def _client_callback(distributed, callback):
  """While inside, the jaxlib client that `jax.distributed.initialize` creates gets
  ``callback`` as its ``missed_heartbeat_callback`` (when this jaxlib takes one)."""
  module = getattr(distributed, "_jax", None)  # jaxlib's extension module (jax._src.lib._jax)
  original = getattr(module, "get_distributed_runtime_client", None)
  if original is None or _CALLBACK_ARG not in (original.__doc__ or ""):  # another jax: as is
    yield
    return

  def with_callback(*args, **kwargs):
    kwargs.setdefault(_CALLBACK_ARG, callback)
    return original(*args, **kwargs)

  module.get_distributed_runtime_client = with_callback
  try:
    yield
  finally:
    module.get_distributed_runtime_client = original


def _on_service_error(status=None) -> None:
  """The client's callback: the coordination service reported an error or is gone."""
  _end(str(status) if status is not None else "")


def coordinator_answers(address: str | None, timeout_s: float = 1.0, tries: int = 4) -> bool:
  """Whether ``host:port`` accepts a TCP connection on each of ``tries`` attempts, 0.3 s apart
  (the service is up). Several: the client sees its connection drop a moment before a killed
  process's listening socket closes."""
  if not address or ":" not in address:
    return True  # nothing to probe: do not accuse the coordinator
  host, port = address.rsplit(":", 1)
  for attempt in range(tries):
    try:
      with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
        pass
    except (OSError, ValueError):
      return False
    if attempt + 1 < tries:
      time.sleep(0.3)
  return True


def verdict(index: int, count: int, address: str | None, detail: str = "", *,
            watchdog=None, answers=coordinator_answers) -> str:
  """The line naming the lost process, seen from process ``index`` of ``count``."""
  at = f" at step {watchdog.step}" if watchdog is not None and watchdog.step is not None else ""
  if watchdog is not None and watchdog.posted:  # process 0 said why it stops, then went
    return watchdog.posted
  if index != 0 and not answers(address):
    return (f"lost process 0 of {count} (the coordinator: it hosts JAX's coordination service)"
            f"{at}: {address} no longer answers (killed, crashed or its host is gone)")
  silent = watchdog.stalest() if watchdog is not None else None
  said = " ".join(detail.split())[:200]
  if silent is not None:
    return (f"lost process {silent[0]} of {count}{at}: JAX's coordination service declared it "
            f"dead (no heartbeat for {silent[1]:.0f} s)")
  return (f"lost a process{at}: JAX's coordination service reported "
          f"{said or 'a dead process'}; see the other processes' logs")


def _end(detail: str) -> None:
  """Prints the verdict (through the watchdog when there is one) and ends the process."""
  if not _STATE["fired"].acquire(blocking=False):  # another thread is ending the process
    while True:
      time.sleep(60)
  from poi_jax.faults import watchdog as watchdog_lib
  dog = watchdog_lib.active()
  index, count = _STATE["index"] or 0, _STATE["count"] or 0
  line = verdict(index, count, _STATE["address"], detail, watchdog=dog)
  if dog is not None:
    dog.fail(f"{line}; stopping process {index}")  # prints, (posts,) and ends the process
  watchdog_lib.write_line(f"{line}; stopping process {index}", last=True)
  os._exit(ProcessLost.exit_code)


_TERMINATE_FN = ctypes.CFUNCTYPE(None)


class _TerminateGuard:
  """``std::terminate`` handler for the failed status conversion (see the module docstring)."""

  _installed: "_TerminateGuard | None" = None

  def __init__(self, libstdcxx: ctypes.CDLL):
    self._lib = libstdcxx
    set_terminate = libstdcxx["_ZSt13set_terminatePFvvE"]  # std::set_terminate(void (*)())
    set_terminate.restype = ctypes.c_void_p
    set_terminate.argtypes = [_TERMINATE_FN]
    self._handler = _TERMINATE_FN(self._on_terminate)  # kept alive: C++ holds the pointer
    previous = set_terminate(self._handler)
    self._previous = _TERMINATE_FN(previous) if previous else None
    self._type = libstdcxx["__cxa_current_exception_type"]  # const std::type_info* (C ABI)
    self._type.restype = ctypes.c_void_p

  @classmethod
  def install(cls) -> None:
    if cls._installed is not None or not sys.platform.startswith("linux"):
      return
    try:
      cls._installed = cls(ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6"))
    except (OSError, AttributeError):  # no libstdc++: JAX's own fatal log stays
      cls._installed = None

  def exception_name(self) -> str:
    """The mangled name of the C++ exception in flight ("" if none): the Itanium ABI's
    ``std::type_info`` is a vtable pointer followed by the name."""
    info = self._type()
    if not info:
      return ""
    name = ctypes.cast(info + ctypes.sizeof(ctypes.c_void_p), ctypes.POINTER(ctypes.c_char_p))
    return (name[0] or b"").decode(errors="replace")

  def _on_terminate(self) -> None:
    if "bad_cast" in self.exception_name() or "cast_error" in self.exception_name():
      _end("")  # the status conversion for `_on_service_error` failed: the same verdict
    if self._previous is not None:
      self._previous()  # another C++ failure: the previous handler (prints it and aborts)
    os.abort()
