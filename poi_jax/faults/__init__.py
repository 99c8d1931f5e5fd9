"""Faults that end a run with one line a user can act on (`RunFault`; the entry point prints it
and exits with its ``exit_code``): a write that failed (full or failing disk), a non-finite loss,
no intact checkpoint to resume from, a lost process. What each keeps and how to resume:
docs/reliability.md.
"""
from __future__ import annotations

import errno
import os


class RunFault(RuntimeError):
  """A fault that stops the run; ``str(e)`` is the one line shown (``error: ...``)."""
  exit_code = 1


class WriteFailed(RunFault):
  """A checkpoint, prediction or metrics write failed (ENOSPC, EIO, ...); what was there before
  is untouched."""


class NonFiniteLoss(RunFault):
  """The loss or the gradient norm became NaN / inf (and updates are not being skipped), or the
  parameters did; nothing non-finite was saved."""


class NoIntactCheckpoint(RunFault):
  """The workdir has checkpoints but none of them can be restored."""


class ProcessLost(RunFault):
  """Another process of a multi-process run stopped (killed, crashed, its host lost)."""
  exit_code = 70  # EX_SOFTWARE-like: neither bad input (1) nor a clean preemption (143)


def cause(e: BaseException) -> str:
  """``ENOSPC: No space left on device``-style text of the first OSError in ``e``'s chain (orbax
  and tensorstore wrap the OS error), else ``str(e)``, on one line."""
  seen = e
  while seen is not None:
    if isinstance(seen, OSError) and seen.errno:
      return f"{errno.errorcode.get(seen.errno, seen.errno)}: {os.strerror(seen.errno)}"
    seen = seen.__cause__ or seen.__context__
  for code in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EROFS):  # wrapped as text only
    if os.strerror(code).lower() in str(e).lower():
      return f"{errno.errorcode[code]}: {os.strerror(code)}"
  return " ".join(str(e).split())[:300]


def is_os_failure(e: BaseException) -> bool:
  """Whether ``e`` (or what it wraps) is an operating-system I/O failure."""
  seen = e
  while seen is not None:
    if isinstance(seen, OSError):
      return True
    seen = seen.__cause__ or seen.__context__
  return any(os.strerror(c).lower() in str(e).lower()
             for c in (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EROFS))
