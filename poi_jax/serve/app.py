r"""Serves a trained model over HTTP, batching concurrent requests, with a demo page.

  python -m poi_jax.serve --model=/tmp/squad-tiny [--host=127.0.0.1] [--port=8080]

``--model``: a workdir or its ``export/`` directory, as `poi_jax.inference.reader.Reader.load`
takes.
Endpoints (``/docs``: OpenAPI; ``/openapi.json``: the schema):

* ``POST /v1/answer`` (extractive models): ``{"question", "context"}`` or a list of them ->
  the predict CLI's fields (``answer``, ``start``, ``end``, ``score``, ``probability``,
  ``no_answer``, ``null_score_diff``, ``no_candidate``) and ``nbest`` (its ``top_k`` best,
  default 5). Optional: ``top_k``, ``explain`` (``tokens``: every context sub-token's character
  offsets, co-attention score and POS tag), ``null_threshold`` (δ for this request).
* ``POST /v1/choose`` (multiple-choice models): ``{"passage" (or "context"), "question",
  "options": [...]}`` or a list -> ``index``, ``option``, ``probabilities``, ``logits``.
* ``GET /healthz``: the model (task, step, head, path) and the batcher's counters (batches,
  questions, each stage's busy and CPU seconds and thread id, ``compiled_shapes``, the passage
  cache's size, hits and misses: what ``bench/serve_load.py`` reads); ``GET /``: the demo page
  (static files of the package, no CDN: works offline).

Micro-batching: a request's items wait in a bounded queue (``--max_queue``; when full the
server answers 503 with ``Retry-After`` rather than growing without bound); a worker thread
takes the first waiting item, gathers more for at most ``--max_wait_ms`` or up to
``--max_batch`` items (Ray Serve's ``@serve.batch`` rule: whichever comes first) and featurises
them as one batch; a second thread runs the jitted model on their windows while the first
featurises the next batch, and a third decodes the spans (`poi_jax.serve.batching`): the
stages of `Reader.answer_records`, so every answer equals `Reader.answer` on the same input.
The model is compiled at start-up for every padded batch size (1, 2, 4, ... ``--max_batch``
rows), so that no request waits for a compilation (``/healthz``: ``compiled_shapes``).
Passages are analysed once (NLTK tags, per-character lookups) and kept for the
``--passage_cache`` most recent passages (0: none), since an application asks several
questions about one passage. ``--cpu_malloc=reuse`` (default, CPU only) keeps the pages of
the model's temporaries between calls: with glibc's defaults a large batch's temporaries are
fresh ``mmap``s that every call first-touches (`poi_jax.runtime`); the price is the peak heap
kept (docs/results.md).

Bad input: a 4xx JSON ``{"error", "field", "item"}`` naming the field and, in a list request,
the item (400 not UTF-8 or not JSON; 413 a body over ``--max_body_bytes`` or a list of more
questions than ``--max_queue`` can ever hold; 422 arrays/objects nested deeper than
``requests.MAX_DEPTH``, a missing, ill-typed or empty field, a number the field cannot use
(an integer of more than ``requests.MAX_NUMBER_CHARS`` digits, ``1e400``, ``NaN``), a text
with a lone surrogate, more than ``requests.MAX_OPTIONS`` options, or a passage longer than
``--max_windows`` windows), all checked before the request is queued; fields the server does not
read are ignored. 503 (with ``Retry-After``) only when the queue is full for now. No client input
gives a 5xx: a 500 is a fault of the server, for the one question it hit. An exception inside a
batch falls back to answering the batch's questions one by one (`poi_jax.serve.batching`), so a
question never fails because of another. SIGTERM (or Ctrl-C): the server stops accepting
connections, answers the requests in flight, and exits 0.
"""

import asyncio
import json
import os
import signal
import sys
from importlib import resources

from absl import app, flags, logging

from poi_jax.serve.batching import Batcher, Job, QueueFull, ServerFault, warm_up  # noqa: F401
from poi_jax.inference.requests import (DEFAULT_TOP_K, InputError, JSONProblem,  # noqa: F401
                                    _items, body_error, loads, parse_answer, parse_choose)

STATIC = "static"  # package data: poi_jax/serve/static/{index.html,demo.js,demo.css}


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
  from fastapi.responses import FileResponse, JSONResponse, Response
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
  static = resources.files("poi_jax.serve") / STATIC

  @api.exception_handler(Exception)
  async def fault(request: Request, e: Exception):
    """A fault of the server's own code: a JSON 500 as every other error (Starlette logs it)."""
    return _json_error({"error": f"internal error ({type(e).__name__}; logged on the server)",
                        "field": None, "item": None}, 500)

  def error(e: InputError) -> Response:
    return _json_error(e.body(), e.status)

  async def read_json(request: Request):
    declared = request.headers.get("content-length")
    # A declared length of 5,000 digits is over any limit: compared by its length first, as
    # converting it would itself be refused (Python's int digits limit).
    if declared is not None and declared.isascii() and declared.isdigit() and (
        len(declared) > 18 or int(declared) > max_body_bytes):
      raise InputError(413, "<body>", f"{_clip(declared, 24)} bytes, more than --max_body_bytes="
                                      f"{max_body_bytes}")
    body = bytearray()
    async for chunk in request.stream():
      body += chunk
      if len(body) > max_body_bytes:
        raise InputError(413, "<body>", f"more than --max_body_bytes={max_body_bytes} bytes")
    try:
      return loads(body)
    except JSONProblem as e:
      raise body_error(e) from None

  async def serve(request: Request, kind: str, parse):
    try:
      if (kind == "answer") != reader.is_extractive:
        other = "/v1/answer" if reader.is_extractive else "/v1/choose"
        raise InputError(404, "<endpoint>", f"this is a {reader.config.task} model: use {other}")
      # Everything about the request is checked before anything is queued: its body, its size
      # against the queue (a list that can never fit is a 413, not a 503 to retry), each item.
      objs, single = _items(await read_json(request), max_items=max_queue)
      loop = asyncio.get_running_loop()
      jobs = []
      for i, o in enumerate(objs):
        item = None if single else i
        record, (explain, delta, top_k) = parse(o, item)
        job = Job(kind, record, explain, delta, top_k, loop.create_future(), loop)
        batcher.check(job, item)
        jobs.append(job)
      try:
        batcher.submit(jobs)
      except QueueFull as e:
        return _json_error({"error": f"server busy: {e}; retry later", "field": None,
                            "item": None}, 503, headers={"Retry-After": "1"})
      # Every item's outcome (a failed item does not leave the others' errors unread); the
      # request fails on its first bad item (4xx), else on its first server fault (500).
      outcomes = await asyncio.gather(*(j.future for j in jobs), return_exceptions=True)
      failed = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, BaseException)]
      bad = [(i, o) for i, o in failed if isinstance(o, InputError)]
      if bad:
        i, e = bad[0]  # raised by the worker: name the item of a list request
        raise (e if single else InputError(e.status, e.field, e.problem, i))
      if failed:
        i, e = failed[0]
        if not isinstance(e, ServerFault):
          logging.error("answering a question failed", exc_info=e)
        return _json_error({"error": str(e) if isinstance(e, ServerFault) else
                            f"internal error ({type(e).__name__}; logged on the server)",
                            "field": None, "item": None if single else i}, 500)
      return JSONResponse(outcomes[0] if single else outcomes)
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
            "batches": batcher.batches, "largest_batch": batcher.largest_batch,
            "compiled_shapes": getattr(reader, "compiled_shapes", None),
            "questions": batcher.questions,
            "busy_seconds": {k: round(v, 4) for k, v in batcher.busy.items()},
            "host_cpu_seconds": {k: round(v, 4) for k, v in batcher.host_cpu.items()},
            "pid": os.getpid(), "thread_ids": batcher.thread_ids,
            "passage_cache": _cache_stats(getattr(reader, "passages", None))}

  @api.get("/", include_in_schema=False)
  async def index():
    return FileResponse(str(static / "index.html"))

  api.mount("/static", StaticFiles(directory=str(static)), name="static")
  return api


def _json_error(content: dict, status: int, headers: dict | None = None):
  """An error answer as ASCII JSON: it may quote a client's key or value, and escaped it is
  valid JSON whatever the client sent (Starlette's JSONResponse writes UTF-8, which a lone
  surrogate cannot be)."""
  from fastapi.responses import Response
  return Response(json.dumps(content, ensure_ascii=True, allow_nan=False), status_code=status,
                  media_type="application/json", headers=headers)


def _clip(text: str, limit: int) -> str:
  """``text`` cut to ``limit`` characters for a message, saying how long it was."""
  return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _cache_stats(cache) -> dict | None:
  if cache is None:
    return None
  return {"size": cache.size, "kept": len(cache), "hits": cache.hits, "misses": cache.misses}


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
  flags.DEFINE_string(
      "length_buckets", None, "Override the model's data.length_buckets: off, auto or lengths "
      "such as 128,256 (same answers; each bucket x batch size compiled at start-up).")
  flags.DEFINE_integer(
      "passage_cache", 256, "Passages whose analysis (NLTK tags, per-character lookups) is kept "
      "for the next question about them, least recently used out first; 0: none.")
  flags.DEFINE_enum(
      "cpu_malloc", "reuse", ["reuse", "system"], "CPU only: reuse keeps freed memory in the "
      "process, so that large batches do not first-touch their temporaries every call "
      "(poi_jax/runtime.py); system: glibc's defaults.")
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
  if FLAGS.passage_cache < 0:
    raise app.UsageError(f"--passage_cache={FLAGS.passage_cache} must be >= 0")
  try:
    import fastapi  # noqa: F401
    import uvicorn  # noqa: F401
  except ModuleNotFoundError as e:
    print(f"error: {e}: install the serve extra (pip install -e '.[serve]')", file=sys.stderr)
    return 1
  from poi_jax.data.pos import NltkResourceError
  from poi_jax.models.encoders import CheckpointError
  from poi_jax.inference.reader import Reader
  try:
    # batch_size = max_batch: a batch of one-window questions is one model call.
    reader = Reader.load(FLAGS.model, null_threshold=FLAGS.null_threshold,
                         batch_size=FLAGS.max_batch, passage_cache=FLAGS.passage_cache,
                         length_buckets=FLAGS.length_buckets, cpu_malloc=FLAGS.cpu_malloc)
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

