"""The micro-batching worker of `poi_jax.serve`: a bounded queue of questions and the pipeline of
threads that answers them in batches with the Reader (up to ``max_batch`` items, waiting at most
``max_wait_s``: whichever comes first; featurising, model call and decoding of consecutive
batches overlap), and the warm-up that compiles every batch shape.

Isolation (issue 35): an exception inside a batch, in any stage, never settles the batch's other
questions. The stage answers the batch's questions one by one instead (the features and model
outputs cut per question, so nothing is recomputed on another thread); a question that fails
alone gets its own error: a 422 where the Reader refuses its input (``ValueError``), else a
`ServerFault` (500, logged), and every other question is answered."""
from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
import time

import numpy as np
from absl import logging

from poi_jax.inference.requests import InputError


class QueueFull(RuntimeError):
  """The queue holds ``--max_queue`` questions: answer 503."""


class ServerFault(RuntimeError):
  """A question that failed alone on something other than its input (a bug, a resource): the
  server's fault, answered 500. The traceback is in the server's log, not in the answer."""

  def __init__(self, stage: str, error: BaseException):
    super().__init__(f"internal error while {stage} this question ({type(error).__name__}; "
                     f"logged on the server)")


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
          batches = self._featurized(_Batch(kind, group, [j.record for j in group], explain,
                                            delta))
        except BaseException as e:  # a fault of this module itself: never leave a client waiting
          logging.exception("featurising a batch failed")
          for j in group:
            j.settle(ServerFault("featurising", e))
          continue
        finally:
          self.busy["featurize"] += time.perf_counter() - t
          self.host_cpu["featurize"] += time.thread_time() - c
        for batch in batches:
          self._ready.put(batch)
    self._ready.put(None)

  def _too_long(self, windows: int | None, item: int | None = None) -> InputError:
    """The 422 of a passage over ``max_windows`` windows (``windows``: None when counted by
    words, before tokenising)."""
    told = f"{windows} windows" if windows else "too many windows"
    return InputError(422, "context", f"{told} of {self.reader.config.data.max_seq_length} "
                      f"tokens, more than --max_windows={self.max_windows}", item)

  def check(self, job: Job, item: int | None = None) -> None:
    """Refuses, before queueing, a passage that cannot fit ``max_windows`` windows whatever its
    tokens: every word is at least one token (the exact count needs the tokenizer, after
    queueing)."""
    if job.kind == "answer" and self.max_windows:
      room = self.max_windows * self.reader.config.data.max_seq_length
      if len(job.record.context.split()) > room:
        raise self._too_long(None, item)

  def _featurized(self, batch: _Batch) -> list[_Batch]:
    """``batch`` with its features, less its passages over ``max_windows`` windows (refused);
    when featurising it fails, one batch per question featurised alone (each failure settled
    alone). Records are numbered 0..n-1 in the batch."""
    if batch.kind != "answer":
      return [batch]
    batch.records = _numbered(batch.jobs)
    try:
      features = self.reader.featurize(batch.records)
    except Exception as e:
      if len(batch.jobs) == 1:
        batch.jobs[0].settle(_error(e, "featurising"))
        return []
      logging.warning("featurising a batch of %d questions failed (%s: %s); featurising them one "
                      "by one", len(batch.jobs), type(e).__name__, e)
      return [b for j in batch.jobs
              for b in self._featurized(_Batch(batch.kind, [j], [j.record], batch.explain,
                                               batch.null_threshold))]
    counts = np.bincount(features.arrays["example_index"], minlength=len(batch.jobs))
    keep = []
    for i, (j, n) in enumerate(zip(batch.jobs, counts)):
      if self.max_windows and n > self.max_windows:
        j.settle(self._too_long(int(n)))
      else:
        keep.append(i)
    if not keep:
      return []
    if len(keep) < len(batch.jobs):  # cut the refused passages' windows out, nothing recomputed
      features = _take(features, keep)
      batch.jobs = [batch.jobs[i] for i in keep]
      batch.records = _numbered(batch.jobs)
    batch.features = features
    return [batch]

  # -- stages 2 and 3 ----------------------------------------------------------------------------
  def _model_stage(self) -> None:
    while (batch := self._ready.get()) is not None:
      t = time.perf_counter()
      try:
        done = self._modelled(batch)
      except BaseException as e:  # a fault of this module itself: never leave a client waiting
        logging.exception("model call failed")
        for j in batch.jobs:
          j.settle(ServerFault("running the model on", e))
        done = []
      self.busy["model"] += time.perf_counter() - t
      for b in done:
        self._done.put(b)
    self._done.put(None)

  def _run_model(self, batch: _Batch) -> None:
    """Sets ``batch.outputs``: the jitted model on its features, or for multiple choice the
    Reader's whole call (its `Choice` list)."""
    if batch.kind == "answer":
      batch.outputs = self.reader.predict(batch.features, explain=batch.explain)
    else:  # multiple choice: the whole Reader call (its tokenizer is used from this thread only)
      batch.records = _numbered(batch.jobs)
      batch.outputs = self.reader.choose_records(batch.records)

  def _modelled(self, batch: _Batch) -> list[_Batch]:
    """``[batch]`` with the model's outputs; when the call fails, the batch's questions one by
    one (``_split``), each failure settled alone."""
    try:
      self._run_model(batch)
      return [batch]
    except Exception as e:
      if len(batch.jobs) == 1:
        batch.jobs[0].settle(_error(e, "running the model on"))
        return []
      logging.warning("the model call on a batch of %d questions failed (%s: %s); calling it on "
                      "them one by one", len(batch.jobs), type(e).__name__, e)
    done = []
    for one in _split(batch):
      try:
        self._run_model(one)
        done.append(one)
      except Exception as e:
        one.jobs[0].settle(_error(e, "running the model on"))
    return done

  def _decode_stage(self) -> None:
    while (batch := self._done.get()) is not None:
      t, c = time.perf_counter(), time.thread_time()
      try:
        for j, r in self._decoded(batch):
          j.settle(r)
      except BaseException as e:  # a fault of this module itself: never leave a client waiting
        logging.exception("decoding failed")
        for j in batch.jobs:
          j.settle(ServerFault("decoding", e))
      self.questions += len(batch.jobs)
      self.busy["decode"] += time.perf_counter() - t
      self.host_cpu["decode"] += time.thread_time() - c

  def _decode(self, batch: _Batch) -> list:
    """Each job's answer dict (extractive: `Reader.decode` of the batch's outputs)."""
    if batch.kind != "answer":  # multiple choice: decoded by the model stage's Reader call
      return [_result(r, j.top_k) for j, r in zip(batch.jobs, batch.outputs)]
    answers = self.reader.decode(batch.records, batch.features, batch.outputs,
                                 null_threshold=batch.null_threshold, explain=batch.explain)
    return [_result(a, j.top_k) for j, a in zip(batch.jobs, answers)]

  def _decoded(self, batch: _Batch) -> list[tuple[Job, object]]:
    """``(job, its answer or error)`` for every job of ``batch``: decoded together, else (the
    batch failed) one by one."""
    try:
      return list(zip(batch.jobs, self._decode(batch)))
    except Exception as e:
      if len(batch.jobs) == 1:
        return [(batch.jobs[0], _error(e, "decoding"))]
      logging.warning("decoding a batch of %d questions failed (%s: %s); decoding them one by "
                      "one", len(batch.jobs), type(e).__name__, e)
    out = []
    for one in _split(batch):
      try:
        out.append((one.jobs[0], self._decode(one)[0]))
      except Exception as e:
        out.append((one.jobs[0], _error(e, "decoding")))
    return out


def _error(e: Exception, stage: str) -> Exception:
  """What a question that failed alone is answered: a 422 when the Reader refused its input
  (``ValueError``, e.g. a `DataError` naming the field), else a `ServerFault` (logged)."""
  if isinstance(e, InputError):
    return e
  if isinstance(e, ValueError):
    field = getattr(e, "field", None) or "<item>"
    return InputError(422, field, str(e))
  logging.error("%s a question failed alone", stage, exc_info=e)
  return ServerFault(stage, e)


def _numbered(jobs) -> list:
  """The jobs' records with ids ``0..n-1``: the position in the batch, what the decoder's
  predictions are keyed by (a client's own ids may repeat across requests)."""
  return [dataclasses.replace(j.record, qid=str(i)) for i, j in enumerate(jobs)]


def _take(features, examples: list[int]):
  """The `Features` of the given examples only (their windows, in order), renumbered 0..k-1:
  every array and every per-window array of the metadata is cut by rows."""
  from poi_jax.data.features.base import Features
  index = features.arrays["example_index"]
  rows = np.flatnonzero(np.isin(index, examples))
  n = len(index)
  renumber = np.zeros(max(int(index.max(initial=-1)), max(examples)) + 1, index.dtype)
  renumber[np.asarray(examples)] = np.arange(len(examples), dtype=index.dtype)

  def cut(v):
    return v[rows] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v
  arrays = {k: cut(v) for k, v in features.arrays.items()}
  arrays["example_index"] = renumber[index[rows]]
  return Features(arrays, {k: cut(v) for k, v in features.meta.items()})


def _split(batch: _Batch) -> list[_Batch]:
  """One `_Batch` per job of ``batch``: its record numbered 0, its windows' features and model
  outputs where the batch has them (so that a stage can go on one question at a time)."""
  out = []
  for i, j in enumerate(batch.jobs):
    one = _Batch(batch.kind, [j], [dataclasses.replace(j.record, qid="0")], batch.explain,
                 batch.null_threshold)
    if batch.features is not None:
      rows = np.flatnonzero(batch.features.arrays["example_index"] == i)
      one.features = _take(batch.features, [i])
      if isinstance(batch.outputs, dict):
        one.outputs = {k: v[rows] for k, v in batch.outputs.items()}
    elif batch.outputs is not None:  # multiple choice: one Choice per job
      one.outputs = [batch.outputs[i]]
    out.append(one)
  return out


def _result(out, top_k: int) -> dict:
  d = out.to_dict(nbest=True) if hasattr(out, "nbest") else out.to_dict()
  if "text" in d:
    d = {"answer": d.pop("text"), **d}
    d["nbest"] = d["nbest"][:top_k]
  return d


def warm_up(reader, max_batch: int) -> None:
  """Compiles the model for every batch shape the worker can send (powers of two up to
  ``max_batch`` rows, each length bucket; explained: one row), so that no plain request waits
  for a compilation."""
  from poi_jax.data.records import ChoiceExample, SquadExample
  # The worker's requests hold 1, 2, 4, ... max_batch questions; the Reader pads a call's rows to
  # a power of two, at most its batch size (Reader._predict).
  requests = sorted({min(1 << k, max_batch) for k in range(max(max_batch, 1).bit_length() + 1)})
  sizes = sorted({min(reader.batch_size, 1 << (n - 1).bit_length()) for n in requests})
  if reader.is_extractive and len(reader.buckets) > 1:  # every bucket x size, compiled side by
    reader.compile_shapes(sizes, explain_rows=(1,))  # side first; the calls below then hit them
  for n in requests:
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
