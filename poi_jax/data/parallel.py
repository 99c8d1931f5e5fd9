"""Featurising in worker processes, with a progress bar.

Tokenising and NLTK tagging are pure Python/Rust work per record, so records are cut into
contiguous chunks (contiguous: the questions of one paragraph stay together and each worker's
per-text tag cache keeps working) that a `concurrent.futures.ProcessPoolExecutor` featurises; the
parts are merged in record order, so the result is identical to the in-process one.

Workers start with the ``forkserver`` method (``spawn`` where that does not exist): ``fork`` from a
process that already runs JAX's or the tokenizer's threads can deadlock. The forkserver imports the
featurizer modules once; each worker receives the tokenizer (fast tokenizers pickle their whole
``tokenizer.json``) once, through the pool initializer, not once per chunk.
"""
from __future__ import annotations

import concurrent.futures
import copyreg
import multiprocessing
import os
from typing import Any, Callable, Mapping, Sequence

from poi_jax.data.records import DataError

MIN_PER_WORKER = 500
BAR_DELAY_S = 1.0  # featurising shorter than this shows no progress bar
_PRELOAD = ["numpy", "transformers", "nltk", "poi_jax.data.features.extractive",
            "poi_jax.data.features.multiple_choice"]
_worker_tokenizer = None


def _rebuild_data_error(message, path, record, field):
  e = DataError.__new__(DataError)
  ValueError.__init__(e, message)
  e.path, e.record, e.field = path, record, field
  return e


def _reduce_data_error(e: DataError):
  return _rebuild_data_error, (str(e), e.path, e.record, e.field)


# DataError's __init__ takes four arguments, so the default exception pickling (which calls
# the class with ``args``) fails; a worker's bad-record error must reach the parent intact.
copyreg.pickle(DataError, _reduce_data_error)


def _init_worker(tokenizer) -> None:
  global _worker_tokenizer
  # One process per core already: the tokenizer's own thread pool would only oversubscribe.
  os.environ["TOKENIZERS_PARALLELISM"] = "false"
  _worker_tokenizer = tokenizer


def _run_chunk(build: Callable, records: Sequence, options: Mapping[str, Any]):
  return build(records, _worker_tokenizer, **options)


def _context() -> multiprocessing.context.BaseContext:
  if "forkserver" in multiprocessing.get_all_start_methods():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx
  return multiprocessing.get_context("spawn")


def chunk_bounds(n: int, chunk_size: int) -> list[tuple[int, int]]:
  return [(i, min(i + chunk_size, n)) for i in range(0, n, chunk_size)]


def featurize(build: Callable, merge: Callable, records: Sequence, tokenizer,
              options: Mapping[str, Any], *, num_workers: int = 0, chunk_size: int = 0,
              min_per_worker: int = MIN_PER_WORKER, desc: str = "featurising",
              progress: bool = True):
  """``merge([build(chunk, tokenizer, **options) for chunk in chunks])``, in worker processes.

  Args:
    build: a module-level featurizer ``(records, tokenizer, **options) -> Features``.
    merge: ``(list of Features, list of chunk start indices) -> Features`` in record order.
    records: the example records.
    tokenizer: a picklable (fast) tokenizer.
    options: keyword options of ``build``.
    num_workers: 0 or 1: in this process; more: up to that many worker processes, at most one
      per ``min_per_worker`` records (starting a worker costs seconds: imports and the NLTK
      tagger; a few hundred records featurise faster in this process).
    chunk_size: records per task; 0 picks ~8 chunks per worker (at most 512 records each), small
      enough for a smooth progress bar and load balance, large enough to amortise the transfer.
    desc: the progress bar's label.
    progress: show a tqdm progress bar (on stderr).

  Returns:
    The merged features, identical to ``build(records, tokenizer, **options)``.
  """
  from tqdm.auto import tqdm
  n = len(records)
  if n == 0:
    return build(records, tokenizer, **options)
  workers = min(max(int(num_workers), 0), n // max(min_per_worker, 1))
  if not chunk_size:
    chunk_size = max(1, min(512, -(-n // (max(workers, 1) * 8))))
  bounds = chunk_bounds(n, chunk_size)
  # ``disable`` only when asked: left unset, tqdm honours TQDM_DISABLE=1 from the environment.
  # ``delay``: the bar appears only once the work has lasted BAR_DELAY_S, so that the Reader's
  # and the server's per-request featurising (milliseconds) prints nothing.
  bar = tqdm(total=n, desc=desc, unit="ex", leave=False, delay=BAR_DELAY_S,
             **({} if progress else {"disable": True}))
  parts = []
  try:
    if workers <= 1 or len(bounds) <= 1:
      for s, e in bounds:
        parts.append(build(records[s:e], tokenizer, **options))
        bar.update(e - s)
    else:
      with concurrent.futures.ProcessPoolExecutor(
          max_workers=min(workers, len(bounds)), mp_context=_context(),
          initializer=_init_worker, initargs=(tokenizer,)) as pool:
        futures = [pool.submit(_run_chunk, build, records[s:e], options) for s, e in bounds]
        for fut, (s, e) in zip(futures, bounds):
          try:
            parts.append(fut.result())
          except BaseException:
            for f in futures:
              f.cancel()
            raise
          bar.update(e - s)
  finally:
    bar.close()
  return merge(parts, [s for s, _ in bounds])
