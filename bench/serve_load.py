r"""Load on `poi_jax.serve`: K concurrent clients for a fixed time, micro-batching vs one question
per model call, side by side in one run.

  nice python bench/serve_load.py --model=tiny:/tmp/squad-tiny --model=minilm:/tmp/squad-minilm \
      [--clients=1,8,32] [--seconds=10] [--max_batch=32] [--max_wait_ms=5] [--mix=squad,distinct]
  python bench/serve_load.py --model=off:/tmp/squad-minilm --model=auto:/tmp/squad-minilm \
      --model_flags=off:--length_buckets=off --model_flags=auto:--length_buckets=auto

For each model, two servers run one after the other (``python -m poi_jax.serve``, warm-up
compiled before timing): ``--max_batch=<max_batch>`` (batching) and ``--max_batch=1``. Each of K
clients (asyncio, one keep-alive connection each, a minimal HTTP/1.1 client: `_Connection`)
sends the next question as soon as its previous answer
came back, for ``--seconds``; requests/s counts the answers (all must be 200), latency is per
request.

Question mix (``--mix``): ``squad``: the shared SQuAD 2.0 subset's first ``--questions``
questions in file order, cycled (about 5 questions a passage, asked one after the other, as the
data has them: the server's passage cache hits for all but a passage's first question);
``distinct``: the same questions, each request's passage made unique (a reference number
appended), so that no passage repeats and the cache never hits. The questions go on across K (no
question is asked twice until the list wraps), in the same order for both servers.

Tables: req/s, p50 and p99 latency per mode and the ratio batching / max_batch=1 of req/s; then
where the server's CPU went, in milliseconds a request by thread (``/proc/<pid>/task``: the event
loop, each pipeline stage, XLA's compute threads; CPU time is robust to other work on a shared
machine, wall time is not) and the clients', with the mean questions per batch, the passage
cache's hit rate, shapes compiled during the load (0: every batch size was compiled at
start-up; ``/healthz``), the server's peak RSS and its start-up time (to the first ``/healthz``
200: loading and compiling every bucket x batch size). Client and server share the machine: on a
2-core CPU the figures are relative, compare the columns of one run.
"""
from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: poi_jax/ from this checkout, as the servers
SQUAD = ROOT.parent / "shared" / "data" / "squad2" / "squad2-dev-subset.json"

_MODELS = flags.DEFINE_multi_string("model", None, "name:path of a workdir or export/ to serve.")
_CLIENTS = flags.DEFINE_list("clients", ["1", "8", "32"], "Concurrent clients K.")
_SECONDS = flags.DEFINE_float("seconds", 10.0, "Timed seconds per K.")
_MAX_BATCH = flags.DEFINE_integer("max_batch", 32, "--max_batch of the batching server.")
_MAX_WAIT_MS = flags.DEFINE_float("max_wait_ms", 5.0, "--max_wait_ms of both servers.")
_QUESTIONS = flags.DEFINE_integer("questions", 2000, "Questions cycled through, in file order.")
_MIX = flags.DEFINE_list("mix", ["squad"], "Question mixes: squad (passages repeat as in the "
                         "data), distinct (every request a new passage).")
_EXTRA = flags.DEFINE_list("server_flags", [], "More flags for both servers (e.g. "
                           "--passage_cache=0,--cpu_malloc=system).")
_MODEL_FLAGS = flags.DEFINE_multi_string(
    "model_flags", [], "name:--flag=value[,--flag=value]: more flags for one --model's servers, "
    "e.g. the same path twice as off and auto with --model_flags=off:--length_buckets=off.")


def _questions(n: int) -> list[dict]:
  from poi_jax.data import readers
  records = list(readers.read_squad(str(SQUAD)))[:n]
  return [{"question": r.question, "context": r.context} for r in records]


class _Asker:
  """The next question of the mix, in order, wrapping around (one per request)."""

  def __init__(self, questions: list[dict], mix: str):
    self.questions, self.mix, self.n = questions, mix, 0

  def next(self) -> dict:
    q = self.questions[self.n % len(self.questions)]
    self.n += 1
    if self.mix == "distinct":  # a new passage: nothing cached helps
      q = {**q, "context": f"{q['context']} (Ref. {self.n}.)"}
    return q


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(model: str, max_batch: int, env: dict, extra: list[str] = ()
           ) -> tuple[subprocess.Popen, str]:
  import httpx
  port = _free_port()
  proc = subprocess.Popen(
      [sys.executable, "-m", "poi_jax.serve", f"--model={model}", f"--port={port}",
       f"--max_batch={max_batch}", f"--max_wait_ms={_MAX_WAIT_MS.value}", "--max_queue=1024",
       *_EXTRA.value, *extra],
      cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  url = f"http://127.0.0.1:{port}"
  while True:
    if proc.poll() is not None:
      raise RuntimeError(f"server for {model} exited {proc.returncode}: "
                         f"{proc.stderr.read()[-2000:]}")
    try:
      if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
        return proc, url
    except httpx.TransportError:
      pass
    time.sleep(0.5)


class _Connection:
  """One keep-alive HTTP/1.1 connection that POSTs JSON and reads the status and body: the
  least client work per request (httpx spends ~3 ms of CPU a request, as much as the tiny
  model's server: on 2 shared cores the clients' CPU is taken from the server)."""

  def __init__(self, url: str):
    self.host, self.port = url.split("//", 1)[1].split(":")
    self.reader = self.writer = None

  async def post(self, path: str, body: dict) -> tuple[int, bytes]:
    if self.writer is None:
      self.reader, self.writer = await asyncio.open_connection(self.host, int(self.port))
    data = json.dumps(body).encode()
    self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: "
                      f"application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
    head = await self.reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(v) for k, _, v in (h.partition(":") for h in lines[1:])
                  if k.lower() == "content-length")
    return int(lines[0].split()[1]), await self.reader.readexactly(length)

  def close(self) -> None:
    if self.writer is not None:
      self.writer.close()


async def _load(url: str, asker: _Asker, clients: int, seconds: float):
  """``(answers per second, latencies in seconds)`` of ``clients`` closed-loop clients."""
  latencies: list[float] = []
  stop = time.monotonic() + seconds

  async def client():
    c = _Connection(url)
    try:
      while time.monotonic() < stop:
        t = time.monotonic()
        status, body = await c.post("/v1/answer", asker.next())
        if status != 200:
          raise RuntimeError(f"{status}: {body[:300]}")
        latencies.append(time.monotonic() - t)
    finally:
      c.close()

  start = time.monotonic()
  await asyncio.gather(*(client() for _ in range(clients)))
  return len(latencies) / (time.monotonic() - start), np.array(latencies)


def _health(url: str) -> dict:
  import httpx
  return httpx.get(f"{url}/healthz", timeout=30).json()


def _peak_rss_mb(pid: int) -> float:
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) / 1024
  return float("nan")


def _cpu_seconds(pid: int | None = None) -> float:
  """CPU seconds (user + system, all threads) of process ``pid`` (None: this one, the clients)."""
  if pid is None:
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu(health: dict) -> dict:
  """CPU seconds of the server's threads: ``http`` (the main thread: uvicorn's event loop, the
  HTTP parsing and JSON), each pipeline stage's thread, and ``xla`` (all the others: XLA's
  compute threads, i.e. the model's work)."""
  pid, total = health["pid"], _cpu_seconds(health["pid"])
  out = {"http": _task_cpu(pid, pid)}
  for stage, tid in health["thread_ids"].items():
    out[stage] = _task_cpu(pid, tid)
  out["xla"] = total - sum(out.values())
  return out


def _task_cpu(pid: int, tid: int) -> float:
  with open(f"/proc/{pid}/task/{tid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _split(before: dict, after: dict) -> dict:
  """The server's split over one load: questions a batch, ms a question per stage, cache hits."""
  n = max(after["questions"] - before["questions"], 1)
  # The model stage's wall time (XLA computes on its own threads); the host stages' CPU time.
  ms = {k: 1000 * (after[f][k] - before[f][k]) / n for f, keys in (
      ("busy_seconds", ["model"]), ("host_cpu_seconds", ["featurize", "decode"])) for k in keys}
  cache = [(after["passage_cache"] or {}).get(k, 0) - (before["passage_cache"] or {}).get(k, 0)
           for k in ("hits", "misses")]
  return {"batch": n / max(after["batches"] - before["batches"], 1), **ms,
          "hit": cache[0] / max(sum(cache), 1),
          "compiled": after["compiled_shapes"] - before["compiled_shapes"]}


def main(argv):
  del argv
  import logging
  logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
  if not _MODELS.value:
    raise app.UsageError("--model=name:path (repeat for several models)")
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.setdefault("NLTK_DATA", str(ROOT.parent / "shared" / "data" / "nltk_data"))
  env.setdefault("JAX_PLATFORMS", "cpu")
  questions = _questions(_QUESTIONS.value)
  clients = [int(k) for k in _CLIENTS.value]
  modes = [(f"batch<={_MAX_BATCH.value}", _MAX_BATCH.value), ("max_batch=1", 1)]
  per_model = {}
  for item in _MODEL_FLAGS.value:
    name, _, more = item.partition(":")
    per_model.setdefault(name, []).extend(f for f in more.split(",") if f)
  rows, splits, rss, ready = {}, {}, {}, {}
  for spec in _MODELS.value:
    name, path = spec.split(":", 1)
    for mix in _MIX.value:
      for mode, max_batch in modes:
        t0 = time.perf_counter()
        proc, url = _start(path, max_batch, env, per_model.get(name, []))
        # Start-up to the first 200 from /healthz: loading, and compiling every bucket x batch
        # size; the shapes compiled then.
        ready[name, mix, mode] = time.perf_counter() - t0, _health(url).get("compiled_shapes")
        asker = _Asker(questions, mix)
        try:
          asyncio.run(_load(url, asker, 1, 2.0))  # first requests: connections, caches
          for k in clients:
            before = _health(url)
            cpu = _cpu_seconds(proc.pid), _cpu_seconds(), _thread_cpu(before)
            rps, lat = asyncio.run(_load(url, asker, k, _SECONDS.value))
            after = _health(url)
            threads = {t: 1000 * (v - cpu[2][t]) / len(lat)
                       for t, v in _thread_cpu(after).items()}
            cpu = _cpu_seconds(proc.pid) - cpu[0], _cpu_seconds() - cpu[1]
            key = (name, mix, mode, k)
            rows[key] = (rps, np.percentile(lat, 50), np.percentile(lat, 99))
            splits[key] = {**_split(before, after), "threads": threads}
            # CPU milliseconds a request, server (all its threads) and clients: what the two
            # shared cores can give, whatever else runs on them.
            splits[key]["server_cpu"] = 1000 * cpu[0] / len(lat)
            splits[key]["client_cpu"] = 1000 * cpu[1] / len(lat)
            print(f"{name} {mix} {mode} K={k}: {rps:.1f} req/s, p50 {rows[key][1]:.3f} s, "
                  f"p99 {rows[key][2]:.3f} s, {splits[key]}", file=sys.stderr, flush=True)
          rss[name, mix, mode] = _peak_rss_mb(proc.pid)
        finally:
          proc.terminate()
          proc.wait(timeout=120)
  b, one = (m for m, _ in modes)
  print(f"| model | mix | K | {b} req/s | p50 s | p99 s | max_batch=1 req/s | p50 s | p99 s | "
        f"req/s ratio |")
  print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for name, mix, k in [(n, m, k) for n, m, _, k in rows if _ == b]:
    x, y = rows[name, mix, b, k], rows[name, mix, one, k]
    print(f"| {name} | {mix} | {k} | {x[0]:.1f} | {x[1]:.3f} | {x[2]:.3f} | {y[0]:.1f} | "
          f"{y[1]:.3f} | {y[2]:.3f} | {x[0] / y[0]:.2f}x |")
  print()
  print("Server CPU ms a request by thread (http: the event loop; model: the model stage's thread "
        "+ XLA's; the clients' for comparison), questions a batch, passage cache hits, shapes "
        "compiled during the load, the server's peak RSS, and its start-up (seconds to the first "
        "/healthz 200: loading and compiling; the shapes compiled then):")
  print()
  print("| model | mix | mode | K | questions/batch | http | featurize | model | decode | "
        "server total | clients | cache hits | compiled | peak RSS MB | start-up s (shapes) |")
  print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        "---: | ---: |")
  for (name, mix, mode, k), sp in splits.items():
    t = sp["threads"]
    print(f"| {name} | {mix} | {mode} | {k} | {sp['batch']:.1f} | {t['http']:.2f} | "
          f"{t['featurize']:.2f} | {t['model'] + t['xla']:.2f} | {t['decode']:.2f} | "
          f"{sp['server_cpu']:.2f} | {sp['client_cpu']:.2f} | {sp['hit']:.0%} | "
          f"{sp['compiled']} | {rss[name, mix, mode]:.0f} | {ready[name, mix, mode][0]:.1f} "
          f"({ready[name, mix, mode][1]}) |")


if __name__ == "__main__":
  app.run(main)
