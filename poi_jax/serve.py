r"""Serves a trained model over HTTP, batching concurrent requests, with a demo page.

  python -m poi_jax.serve --model=/tmp/squad-tiny [--host=127.0.0.1] [--port=8080]

``--model``: a workdir or its ``export/`` directory, as `poi_jax.reader.Reader.load` takes.
Endpoints (``/docs``: OpenAPI; ``/openapi.json``: the schema):

* ``POST /v1/answer`` (extractive models): ``{"question", "context"}`` or a list of them ->
  the predict CLI's fields (``answer``, ``start``, ``end``, ``score``, ``probability``,
  ``no_answer``, ``null_score_diff``, ``no_candidate``) and ``nbest`` (its ``top_k`` best,
  default 5). Optional: ``top_k``, ``explain`` (``tokens``: every context sub-token's character
  offsets, co-attention score and POS tag), ``null_threshold`` (δ for this request).
* ``POST /v1/choose`` (multiple-choice models): ``{"passage" (or "context"), "question",
  "options": [...]}`` or a list -> ``index``, ``option``, ``probabilities``, ``logits``.
* ``GET /healthz``: the model (task, step, head, path); ``GET /``: the demo page (static files
  of the package, no CDN: works offline).

Micro-batching: a request's items wait in a bounded queue (``--max_queue``; when full the
server answers 503 with ``Retry-After`` rather than growing without bound); one worker thread
takes the first waiting item, gathers more for at most ``--max_wait_ms`` or up to
``--max_batch`` items (Ray Serve's ``@serve.batch`` rule: whichever comes first), and answers
them with one `Reader.answer_records` call: one featurisation and jitted model calls over all
their windows, so every answer equals `Reader.answer` on the same input.

Bad input: a 4xx JSON ``{"error", "field", "item"}`` naming the field (400 not JSON or not an
object, 413 a body over ``--max_body_bytes``, 422 a missing, non-string or empty field, or a
passage longer than ``--max_windows`` windows); the server keeps serving. SIGTERM (or Ctrl-C):
the server stops accepting connections, answers the requests in flight, and exits 0.
"""

import asyncio
import dataclasses
import json
import os
import queue
import signal
import sys
import threading
import time
from importlib import resources

from absl import app, flags, logging

STATIC = "static"  # package data: poi_jax/static/{index.html,demo.js,demo.css}
DEFAULT_TOP_K = 5


class InputError(ValueError):
  """A bad request: its HTTP status, the field and the item (index in a list request)."""

  def __init__(self, status: int, field: str, problem: str, item: int | None = None):
    where = f"item {item}: " if item is not None else ""
    super().__init__(f"{where}field {field!r}: {problem}")
    self.status, self.field, self.problem, self.item = status, field, problem, item

  def body(self) -> dict:
    return {"error": str(self), "field": self.field, "item": self.item}


class QueueFull(RuntimeError):
  """The queue holds ``--max_queue`` questions: answer 503."""


# ------------------------------------------------------------------------------------------------
# Requests -> records
# ------------------------------------------------------------------------------------------------
def _text(obj: dict, field: str, item, *alternatives: str) -> str:
  for name in (field, *alternatives):
    if name in obj:
      value = obj[name]
      if not isinstance(value, str):
        raise InputError(422, name, f"must be a string, got {type(value).__name__}", item)
      if not value.strip():
        raise InputError(422, name, "must not be empty", item)
      return value
  raise InputError(422, field, "missing", item)


def _items(body) -> tuple[list[dict], bool]:
  """``(objects, single)``: one JSON object or a non-empty list of them."""
  if isinstance(body, dict):
    return [body], True
  if isinstance(body, list) and body:
    for i, o in enumerate(body):
      if not isinstance(o, dict):
        raise InputError(422, "<body>", f"expected a JSON object, got {type(o).__name__}", i)
    return body, False
  raise InputError(422, "<body>", "expected a JSON object or a non-empty list of objects")


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


def _options(obj: dict, item) -> tuple[bool, float | None, int]:
  explain = obj.get("explain", False)
  if not isinstance(explain, bool):
    raise InputError(422, "explain", f"must be true or false, got {explain!r}", item)
  delta = obj.get("null_threshold")
  if delta is not None and (isinstance(delta, bool) or not isinstance(delta, (int, float))):
    raise InputError(422, "null_threshold", f"must be a number, got {delta!r}", item)
  top_k = obj.get("top_k", DEFAULT_TOP_K)
  if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
    raise InputError(422, "top_k", f"must be a positive integer, got {top_k!r}", item)
  return explain, None if delta is None else float(delta), top_k


def parse_answer(obj: dict, item):
  from poi_jax.data.records import SquadExample
  question, context = _text(obj, "question", item), _text(obj, "context", item)
  return SquadExample("0", question, context, [], False, [], "", "<serve>"), _options(obj, item)


def parse_choose(obj: dict, item):
  from poi_jax.data.records import ChoiceExample
  question = _text(obj, "question", item)
  passage = _text(obj, "passage", item, "context")
  options = obj.get("options")
  if not isinstance(options, list) or len(options) < 2:
    raise InputError(422, "options", f"must be a list of at least 2 strings, got {options!r}",
                     item)
  for o in options:
    if not isinstance(o, str):
      raise InputError(422, "options", f"holds {o!r}, not a string", item)
  return ChoiceExample("0", passage, question, list(options), 0, "<serve>"), (False, None, 0)


# ------------------------------------------------------------------------------------------------
# The batching worker
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# The ASGI app
# ------------------------------------------------------------------------------------------------
def _json_schema(single: dict) -> dict:
  return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
      "oneOf": [single, {"type": "array", "items": single}]}}}}}


_ANSWER_SCHEMA = {"type": "object", "required": ["question", "context"], "properties": {
    "question": {"type": "string"}, "context": {"type": "string"},
    "top_k": {"type": "integer", "default": DEFAULT_TOP_K},
    "explain": {"type": "boolean", "default": False},
    "null_threshold": {"type": "number"}}}
_CHOOSE_SCHEMA = {"type": "object", "required": ["passage", "question", "options"],
                  "properties": {"passage": {"type": "string"}, "question": {"type": "string"},
                                 "options": {"type": "array", "items": {"type": "string"}}}}


def create_app(reader, *, max_batch: int = 16, max_wait_ms: float = 5.0, max_queue: int = 256,
               max_body_bytes: int = 1 << 20, max_windows: int = 16, warmup: bool = True,
               model_path: str = ""):
  """The FastAPI app serving ``reader``; its lifespan starts the batching thread (after
  compiling every batch shape when ``warmup``) and, at shutdown, answers what is queued."""
  import contextlib

  from fastapi import FastAPI, Request
  from fastapi.responses import FileResponse, JSONResponse
  from fastapi.staticfiles import StaticFiles

  batcher = Batcher(reader, max_batch=max_batch, max_wait_s=max_wait_ms / 1000.0,
                    max_queue=max_queue, max_windows=max_windows)

  @contextlib.asynccontextmanager
  async def lifespan(_):
    if warmup:
      await asyncio.to_thread(warm_up, reader, max_batch)
    batcher.start()
    yield
    await asyncio.to_thread(batcher.stop)

  api = FastAPI(title="poi-jax", lifespan=lifespan,
                description="Reading comprehension with a trained poi-jax model "
                            "(`python -m poi_jax.serve`).")
  api.state.batcher = batcher
  static = resources.files("poi_jax") / STATIC

  def error(e: InputError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)

  async def read_json(request: Request):
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
      raise InputError(413, "<body>", f"{declared} bytes, more than --max_body_bytes="
                                      f"{max_body_bytes}")
    body = bytearray()
    async for chunk in request.stream():
      body += chunk
      if len(body) > max_body_bytes:
        raise InputError(413, "<body>", f"more than --max_body_bytes={max_body_bytes} bytes")
    try:
      return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise InputError(400, "<body>", f"not JSON ({e})") from None

  async def serve(request: Request, kind: str, parse):
    try:
      if (kind == "answer") != reader.is_extractive:
        other = "/v1/answer" if reader.is_extractive else "/v1/choose"
        raise InputError(404, "<endpoint>", f"this is a {reader.config.task} model: use {other}")
      objs, single = _items(await read_json(request))
      loop = asyncio.get_running_loop()
      jobs = []
      for i, o in enumerate(objs):
        record, (explain, delta, top_k) = parse(o, None if single else i)
        jobs.append(Job(kind, record, explain, delta, top_k, loop.create_future(), loop))
      try:
        batcher.submit(jobs)
      except QueueFull as e:
        return JSONResponse({"error": f"server busy: {e}; retry later", "field": None,
                             "item": None}, status_code=503, headers={"Retry-After": "1"})
      results = []
      for i, j in enumerate(jobs):
        try:
          results.append(await j.future)
        except InputError as e:  # raised by the worker: name the item of a list request
          raise (e if single else InputError(e.status, e.field, e.problem, i)) from None
      return JSONResponse(results[0] if single else results)
    except InputError as e:
      return error(e)

  @api.post("/v1/answer", openapi_extra=_json_schema(_ANSWER_SCHEMA))
  async def answer(request: Request):
    """Extractive answer(s) with the n-best list (``explain``: per-token scores and tags)."""
    return await serve(request, "answer", parse_answer)

  @api.post("/v1/choose", openapi_extra=_json_schema(_CHOOSE_SCHEMA))
  async def choose(request: Request):
    """Option probabilities for multiple-choice models."""
    return await serve(request, "choose", parse_choose)

  @api.get("/healthz")
  async def healthz():
    """The loaded model."""
    c = reader.config
    return {"status": "ok", "task": c.task, "kind": "extractive" if reader.is_extractive
            else "multiple_choice", "step": reader.step, "head": c.model.head,
            "encoder": c.model.init_from or "random", "model": model_path,
            "explain": reader.has_token_scores, "pos_tags": bool(c.model.pos_embedding),
            "null_threshold": reader.null_threshold, "max_batch": max_batch,
            "batches": batcher.batches, "largest_batch": batcher.largest_batch}

  @api.get("/", include_in_schema=False)
  async def index():
    return FileResponse(str(static / "index.html"))

  api.mount("/static", StaticFiles(directory=str(static)), name="static")
  return api


def run(api, *, host: str, port: int) -> int:
  """Serves until SIGTERM/SIGINT, then drains the requests in flight; returns 0."""
  import uvicorn
  server = uvicorn.Server(uvicorn.Config(api, host=host, port=port, log_level="warning",
                                         timeout_graceful_shutdown=60))
  # uvicorn re-raises the signal it caught once it has shut down (so that the default handler
  # kills the process, exit -15); a drained shutdown is a success, so the re-raised signal
  # lands on these no-op handlers instead.
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *_: None)
  server.run()
  return 0


def define_flags() -> None:
  """The command line's flags; defined when run as a program only, so that importing this
  module (tests, an app of your own) does not clash with other modules' absl flags."""
  flags.DEFINE_string("model", None, "A poi-jax workdir or its export/ directory.")
  flags.DEFINE_string("host", "127.0.0.1", "Interface to listen on.")
  flags.DEFINE_integer("port", 8080, "Port to listen on.")
  flags.DEFINE_integer("max_batch", 16, "Most questions answered by one model call.")
  flags.DEFINE_float(
      "max_wait_ms", 5.0, "Longest a question waits for others to fill its batch (questions "
      "that arrive while the model is busy are batched anyway).")
  flags.DEFINE_integer(
      "max_queue", 256, "Most questions waiting; beyond, 503 with Retry-After.")
  flags.DEFINE_integer("max_body_bytes", 1 << 20, "Largest request body (413 beyond).")
  flags.DEFINE_integer(
      "max_windows", 16, "Most windows (data.max_seq_length tokens, data.doc_stride apart) one "
      "passage may take (422 beyond).")
  flags.DEFINE_float("null_threshold", None, "SQuAD 2.0: override δ.")
  flags.DEFINE_bool(
      "warmup", True, "Compile every batch shape before serving (else the first requests of each "
      "size wait for a compilation).")


def main(argv):
  FLAGS = flags.FLAGS
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax logs every file operation at INFO
  # A batch of questions that takes over a second to featurise would draw the featurizer's
  # progress bar on the server's stderr: no bars in a server.
  os.environ.setdefault("TQDM_DISABLE", "1")
  for name, value in (("max_batch", FLAGS.max_batch), ("max_queue", FLAGS.max_queue),
                      ("max_body_bytes", FLAGS.max_body_bytes)):
    if value < 1:
      raise app.UsageError(f"--{name}={value} must be positive")
  try:
    import fastapi  # noqa: F401
    import uvicorn  # noqa: F401
  except ModuleNotFoundError as e:
    print(f"error: {e}: install the serve extra (pip install -e '.[serve]')", file=sys.stderr)
    return 1
  from poi_jax.data.pos import NltkResourceError
  from poi_jax.models.encoders import CheckpointError
  from poi_jax.reader import Reader
  try:
    # batch_size = max_batch: a batch of one-window questions is one model call.
    reader = Reader.load(FLAGS.model, null_threshold=FLAGS.null_threshold,
                         batch_size=FLAGS.max_batch)
  except (CheckpointError, FileNotFoundError, ValueError, NltkResourceError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  api = create_app(reader, max_batch=FLAGS.max_batch, max_wait_ms=FLAGS.max_wait_ms,
                   max_queue=FLAGS.max_queue, max_body_bytes=FLAGS.max_body_bytes,
                   max_windows=FLAGS.max_windows, warmup=FLAGS.warmup,
                   model_path=os.path.abspath(FLAGS.model))
  print(f"serving {reader.config.task} (step {reader.step}) on http://{FLAGS.host}:"
        f"{FLAGS.port}/ (API docs: /docs)", flush=True)
  return run(api, host=FLAGS.host, port=FLAGS.port)


if __name__ == "__main__":
  define_flags()
  flags.mark_flags_as_required(["model"])
  app.run(main)
