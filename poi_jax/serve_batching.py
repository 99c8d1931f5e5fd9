"""The micro-batching worker of `poi_jax.serve`: a bounded queue of questions and the pipeline of
threads that answers them in batches with the Reader (up to ``max_batch`` items, waiting at most
``max_wait_s``: whichever comes first; featurising, model call and decoding of consecutive
batches overlap), and the warm-up that compiles every batch shape."""
from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
import time

import numpy as np
from absl import logging

from poi_jax.serve_requests import InputError


class QueueFull(RuntimeError):
  """The queue holds ``--max_queue`` questions: answer 503."""


@dataclasses.dataclass
class Job:
  """One question waiting for the worker: ``kind`` answer|choose, the record, the per-request
  options, and the future its result (a dict) or error is set on."""
  kind: str
  record: object
  explain: bool
  null_threshold: float | None
  top_k: int
  future: asyncio.Future
  loop: asyncio.AbstractEventLoop

  def settle(self, result) -> None:
    def _set():
      if self.future.done():  # the client went away
        return
      if isinstance(result, BaseException):
        self.future.set_exception(result)
      else:
        self.future.set_result(result)
    self.loop.call_soon_threadsafe(_set)


@dataclasses.dataclass
class _Batch:
  """One group of gathered jobs on its way through the pipeline: the same kind and options,
  their records, then their features (stage 1) and the model's outputs (stage 2)."""
  kind: str
  jobs: list
  records: list
  explain: bool
  null_threshold: float | None
  features: object = None
  outputs: object = None


class Batcher:
  """A bounded queue of `Job`s and a three-stage pipeline of threads that answers them in
  batches, so that the host work of one batch overlaps the model call of another:

  1. *featurize* (``poi-jax-featurize``): takes the first waiting question, gathers more for at
     most ``max_wait_s`` or up to ``max_batch`` (whichever comes first), refuses passages over
     ``max_windows`` windows and builds the batch's windows (`Reader.featurize`: the tokenizer
     is used from this thread only, as fast tokenizers are not safe to share; passages through
     the Reader's `PassageCache`);
  2. *model* (``poi-jax-model``): `Reader.predict`, the jitted call on rows padded to a power of
     two (compiled at start-up by `warm_up`); JAX releases the GIL while it computes, so stages
     1 and 3 run meanwhile (a multiple-choice model's whole `Reader.choose_records` runs here:
     its tokenizer is then used from this thread only);
  3. *decode* (``poi-jax-decode``): `Reader.decode` and each client's answer.

  Between stages, queues of one batch: a stage that runs ahead waits, and questions that arrive
  meanwhile gather into the next batch. Every answer is `Reader.answer_records`' on the same
  record (the same three calls).
  """

  def __init__(self, reader, *, max_batch: int, max_wait_s: float, max_queue: int,
               max_windows: int):
    self.reader, self.max_batch, self.max_wait_s = reader, max_batch, max_wait_s
    self.max_windows = max_windows
    self.queue: queue.Queue = queue.Queue(maxsize=max_queue)
    self.batches = 0  # model batches run (tests and /healthz)
    self.largest_batch = 0
    # Seconds each stage was busy, and questions answered (/healthz; bench/serve_load.py
    # divides them: host vs model milliseconds a question).
    self.busy = {"featurize": 0.0, "model": 0.0, "decode": 0.0}
    # CPU seconds of the host stages' own threads (their busy time less waiting for the GIL or a
    # core: the machine may be shared).
    self.host_cpu = {"featurize": 0.0, "decode": 0.0}
    self.questions = 0
    self.thread_ids: dict[str, int] = {}  # stage -> native thread id (/proc/<pid>/task/<id>)
    self._ready: queue.Queue = queue.Queue(maxsize=1)  # featurized, waiting for the model
    self._done: queue.Queue = queue.Queue(maxsize=1)  # model outputs, waiting for decoding
    self._threads = [threading.Thread(target=self._stage, args=(n, f), name=f"poi-jax-{n}",
                                      daemon=True)
                     for f, n in ((self._featurize_stage, "featurize"),
                                  (self._model_stage, "model"), (self._decode_stage, "decode"))]

  def _stage(self, name: str, run) -> None:
    self.thread_ids[name] = threading.get_native_id()
    run()

  def start(self) -> None:
    for t in self._threads:
      t.start()

  def stop(self) -> None:
    """Answers what is queued, then ends the threads."""
    self.queue.put(None)
    for t in self._threads:
      t.join()

  def submit(self, jobs: list[Job]) -> None:
    """All of ``jobs`` or none (`QueueFull`); called from the event loop's thread only."""
    if self.queue.maxsize - self.queue.qsize() < len(jobs):
      raise QueueFull(f"{self.queue.qsize()} questions waiting (--max_queue="
                      f"{self.queue.maxsize})")
    for j in jobs:
      self.queue.put_nowait(j)

  # -- stage 1 -----------------------------------------------------------------------------------
  def _gather(self) -> tuple[list[Job], bool]:
    """``(jobs, stop)``: the first waiting job and those that come within ``max_wait_s``."""
    job = self.queue.get()
    if job is None:
      return [], True
    jobs, deadline = [job], time.monotonic() + self.max_wait_s
    while len(jobs) < self.max_batch:
      try:
        nxt = self.queue.get(timeout=max(deadline - time.monotonic(), 0.0))
      except queue.Empty:
        break
      if nxt is None:
        return jobs, True
      jobs.append(nxt)
    return jobs, False

  def _featurize_stage(self) -> None:
    stop = False
    while not stop:
      jobs, stop = self._gather()
      if not jobs:
        break
      self.batches += 1
      self.largest_batch = max(self.largest_batch, len(jobs))
      groups: dict[tuple, list[Job]] = {}
      for j in jobs:
        groups.setdefault((j.kind, j.explain, j.null_threshold), []).append(j)
      for (kind, explain, delta), group in groups.items():
        t, c = time.perf_counter(), time.thread_time()
        try:
          batch = self._featurized(_Batch(kind, group, [j.record for j in group], explain,
                                          delta))
        except BaseException as e:  # never leave a client waiting
          logging.exception("featurising a batch failed")
          for j in group:
            j.settle(e)
          continue
        finally:
          self.busy["featurize"] += time.perf_counter() - t
          self.host_cpu["featurize"] += time.thread_time() - c
        if batch is not None:
          self._ready.put(batch)
    self._ready.put(None)

  def _refuse(self, job: Job, windows: int | None) -> None:
    told = f"{windows} windows" if windows else "too many windows"
    job.settle(InputError(422, "context", f"{told} of {self.reader.config.data.max_seq_length} "
                          f"tokens, more than --max_windows={self.max_windows}"))

  def _featurized(self, batch: _Batch) -> _Batch | None:
    """``batch`` with its features (None when every job was refused), numbered records."""
    if batch.kind != "answer":
      return batch
    if self.max_windows:  # every word is at least one token: refused before any tokenising
      room = self.max_windows * self.reader.config.data.max_seq_length
      for j in [j for j in batch.jobs if len(j.record.context.split()) > room]:
        self._refuse(j, None)
        batch.jobs.remove(j)
    while batch.jobs:
      batch.records = [dataclasses.replace(j.record, qid=str(i))
                       for i, j in enumerate(batch.jobs)]
      try:
        features = self.reader.featurize(batch.records)
      except ValueError:  # a record the featurizer refuses: answer the others without it
        return self._featurized(self._without_refused(batch))
      counts = np.bincount(features.arrays["example_index"], minlength=len(batch.jobs))
      over = [(j, int(n)) for j, n in zip(batch.jobs, counts)
              if self.max_windows and n > self.max_windows]
      for j, n in over:
        self._refuse(j, n)
      if not over:
        batch.features = features
        return batch
      refused = {id(j) for j, _ in over}
      batch.jobs = [j for j in batch.jobs if id(j) not in refused]
    return None

  def _without_refused(self, batch: _Batch) -> _Batch:
    kept = []
    for j in batch.jobs:
      try:
        self.reader.featurize([dataclasses.replace(j.record, qid="0")])
        kept.append(j)
      except ValueError as e:
        j.settle(InputError(422, "<item>", str(e)))
    batch.jobs = kept
    return batch

  # -- stages 2 and 3 ----------------------------------------------------------------------------
  def _model_stage(self) -> None:
    while (batch := self._ready.get()) is not None:
      t = time.perf_counter()
      try:
        if batch.kind == "answer":
          batch.outputs = self.reader.predict(batch.features, explain=batch.explain)
        else:
          records = [dataclasses.replace(j.record, qid=str(i)) for i, j in enumerate(batch.jobs)]
          batch.outputs = self.reader.choose_records(records)
      except BaseException as e:  # never leave a client waiting
        logging.exception("model call failed")
        batch.outputs = e
      self.busy["model"] += time.perf_counter() - t
      self._done.put(batch)
    self._done.put(None)

  def _decode_stage(self) -> None:
    while (batch := self._done.get()) is not None:
      t, c = time.perf_counter(), time.thread_time()
      results = batch.outputs
      if isinstance(results, BaseException):  # the model call failed (logged)
        results = [results] * len(batch.jobs)
      elif batch.kind == "answer":
        try:
          results = self.reader.decode(batch.records, batch.features, batch.outputs,
                                       null_threshold=batch.null_threshold,
                                       explain=batch.explain)
        except BaseException as e:  # never leave a client waiting
          logging.exception("decoding failed")
          results = [e] * len(batch.jobs)
      for j, r in zip(batch.jobs, results):
        j.settle(r if isinstance(r, BaseException) else _result(r, j.top_k))
      self.questions += len(batch.jobs)
      self.busy["decode"] += time.perf_counter() - t
      self.host_cpu["decode"] += time.thread_time() - c


def _result(out, top_k: int) -> dict:
  d = out.to_dict(nbest=True) if hasattr(out, "nbest") else out.to_dict()
  if "text" in d:
    d = {"answer": d.pop("text"), **d}
    d["nbest"] = d["nbest"][:top_k]
  return d


def warm_up(reader, max_batch: int) -> None:
  """Compiles the model for every batch shape the worker can send (powers of two up to
  ``max_batch`` rows; explained: one row), so that no plain request waits for a compilation."""
  from poi_jax.data.records import ChoiceExample, SquadExample
  size = 1
  while True:
    n = min(size, max_batch)
    if reader.is_extractive:
      recs = [SquadExample(str(i), "What is this?", "This is a warm-up passage.", [], False, [],
                           "", "<warmup>") for i in range(n)]
      reader.answer_records(recs)
      if reader.has_token_scores and n == 1:  # the demo page's one question; other explained
        reader.answer_records(recs, explain=True)  # batch sizes compile on first use
    else:
      opts = ["yes", "no"]  # other option counts compile on first use
      reader.choose_records([ChoiceExample(str(i), "A warm-up passage.", "What is it?", opts, 0,
                                           "<warmup>") for i in range(n)])
    if n >= max_batch:
      break
    size *= 2
