"""Every private JAX API poi_jax uses, in one place (issue 48): a jax release that moves one
breaks this module's test (tests/test_jax_internals.py), not a run in the field.

* `compiled_shape_count`: a jitted function's number of compiled signatures (``_cache_size``),
  which the loop, the evaluation and the Reader report (one per length bucket and batch shape).
  No public API counts them; ``jax.stages`` exposes one compilation at a time.
* `distributed_module`: ``jax._src.distributed``, whose ``global_state`` holds the coordination
  client that ``jax.distributed.initialize`` made (the watchdog's heartbeats go through its
  key-value store) and the coordinator's address, and whose ``_jax`` is the jaxlib extension
  that creates the client (`poi_jax.faults.coordination` passes it a callback). JAX documents
  ``jax.distributed.initialize`` but not the client it holds.
"""
from __future__ import annotations

from typing import Any


def compiled_shape_count(fn: Any) -> int | None:
  """How many input signatures the jitted ``fn`` has compiled in this process; None when this
  jax does not say (the callers then print nothing)."""
  size = getattr(fn, "_cache_size", None)
  return int(size()) if callable(size) else None


def distributed_module():
  """``jax._src.distributed``: ``global_state.client``, ``global_state.coordinator_address``,
  ``_jax.get_distributed_runtime_client``."""
  from jax._src import distributed  # pylint: disable=import-outside-toplevel,protected-access
  return distributed


def distributed_client():
  """The coordination-service client of ``jax.distributed.initialize`` (None before it)."""
  return distributed_module().global_state.client
