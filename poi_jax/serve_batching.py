"""The micro-batching worker of `poi_jax.serve`: a bounded queue of questions and the one thread
that answers them in batches with the Reader (up to ``max_batch`` items, waiting at most
``max_wait_s``: whichever comes first), and the warm-up that compiles every batch shape."""
from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
import time

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


class Batcher:
  """A bounded queue of `Job`s and the one thread that answers them in batches (the Reader and
  its tokenizer are used from this thread only: fast tokenizers are not safe to share)."""

  def __init__(self, reader, *, max_batch: int, max_wait_s: float, max_queue: int,
               max_windows: int):
    self.reader, self.max_batch, self.max_wait_s = reader, max_batch, max_wait_s
    self.max_windows = max_windows
    self.queue: queue.Queue = queue.Queue(maxsize=max_queue)
    self.batches = 0  # model batches run (tests and /healthz)
    self.largest_batch = 0
    self._thread = threading.Thread(target=self._run, name="poi-jax-batcher", daemon=True)

  def start(self) -> None:
    self._thread.start()

  def stop(self) -> None:
    """Answers what is queued, then ends the thread."""
    self.queue.put(None)
    self._thread.join()

  def submit(self, jobs: list[Job]) -> None:
    """All of ``jobs`` or none (`QueueFull`); called from the event loop's thread only."""
    if self.queue.maxsize - self.queue.qsize() < len(jobs):
      raise QueueFull(f"{self.queue.qsize()} questions waiting (--max_queue="
                      f"{self.queue.maxsize})")
    for j in jobs:
      self.queue.put_nowait(j)

  def _run(self) -> None:
    stop = False
    while not stop:
      job = self.queue.get()
      if job is None:
        break
      jobs, deadline = [job], time.monotonic() + self.max_wait_s
      while len(jobs) < self.max_batch:
        try:
          nxt = self.queue.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
          break
        if nxt is None:
          stop = True
          break
        jobs.append(nxt)
      self.batches += 1
      self.largest_batch = max(self.largest_batch, len(jobs))
      try:
        self._answer(jobs)
      except BaseException as e:  # never leave a client waiting
        logging.exception("batch failed")
        for j in jobs:
          j.settle(e)

  def _windows(self, record) -> int:
    """Windows the featurizer will cut ``record``'s context into (its own tokenizer call)."""
    from poi_jax.data.features.extractive import _truncate_question
    d, tok = self.reader.config.data, self.reader.tokenizer
    question = _truncate_question(tok, record.question, d.max_query_length)
    enc = tok(question, record.context, truncation="only_second", max_length=d.max_seq_length,
              stride=d.doc_stride, return_overflowing_tokens=True)
    return len(enc["input_ids"])

  def _answer(self, jobs: list[Job]) -> None:
    ok = []
    for j in jobs:
      if j.kind == "answer" and self.max_windows:
        n = self._windows(j.record)
        if n > self.max_windows:
          j.settle(InputError(422, "context", f"{n} windows of "
                              f"{self.reader.config.data.max_seq_length} tokens, more than "
                              f"--max_windows={self.max_windows}"))
          continue
      ok.append(j)
    groups: dict[tuple, list[Job]] = {}
    for j in ok:
      groups.setdefault((j.kind, j.explain, j.null_threshold), []).append(j)
    for (kind, explain, delta), group in groups.items():
      try:
        results = self._call(kind, [j.record for j in group], explain, delta)
      except ValueError:  # a record the featurizer refuses: answer the others one by one
        results = []
        for j in group:
          try:
            results.append(self._call(kind, [j.record], explain, delta)[0])
          except ValueError as e:
            results.append(InputError(422, "<item>", str(e)))
      for j, r in zip(group, results):
        j.settle(r if isinstance(r, Exception) else _result(r, j.top_k))

  def _call(self, kind: str, records: list, explain: bool, delta):
    records = [dataclasses.replace(r, qid=str(i)) for i, r in enumerate(records)]
    if kind == "answer":
      return self.reader.answer_records(records, null_threshold=delta, explain=explain)
    return self.reader.choose_records(records)


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
