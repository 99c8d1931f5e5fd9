r"""Load on `poi_jax.serve`: K concurrent clients for a fixed time, micro-batching vs one question
per model call, side by side in one run.

  nice python bench/serve_load.py --model=tiny:/tmp/squad-tiny --model=minilm:/tmp/squad-minilm \
      [--clients=1,8,32] [--seconds=10] [--max_batch=32] [--max_wait_ms=5]

For each model, two servers run one after the other (``python -m poi_jax.serve``, warm-up
compiled before timing): ``--max_batch=<max_batch>`` (batching) and ``--max_batch=1``. Each of K
clients (asyncio, one connection each) sends the next question of the shared SQuAD 2.0 subset as
soon as its previous answer came back, for ``--seconds``; requests/s counts the answers (all must
be 200), latency is per request. One table: req/s, p50 and p99 latency per mode, and the ratio
batching / max_batch=1 of req/s. Client and server share the machine: on a 2-core CPU the
figures are relative, compare the columns of one run.
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
SQUAD = ROOT.parent / "shared" / "data" / "squad2" / "squad2-dev-subset.json"

_MODELS = flags.DEFINE_multi_string("model", None, "name:path of a workdir or export/ to serve.")
_CLIENTS = flags.DEFINE_list("clients", ["1", "8", "32"], "Concurrent clients K.")
_SECONDS = flags.DEFINE_float("seconds", 10.0, "Timed seconds per K.")
_MAX_BATCH = flags.DEFINE_integer("max_batch", 32, "--max_batch of the batching server.")
_MAX_WAIT_MS = flags.DEFINE_float("max_wait_ms", 5.0, "--max_wait_ms of both servers.")
_QUESTIONS = flags.DEFINE_integer("questions", 200, "Distinct questions cycled through.")


def _questions(n: int) -> list[dict]:
  from poi_jax.data import readers
  records = list(readers.read_squad(str(SQUAD)))[:n]
  return [{"question": r.question, "context": r.context} for r in records]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(model: str, max_batch: int, env: dict) -> tuple[subprocess.Popen, str]:
  import httpx
  port = _free_port()
  proc = subprocess.Popen(
      [sys.executable, "-m", "poi_jax.serve", f"--model={model}", f"--port={port}",
       f"--max_batch={max_batch}", f"--max_wait_ms={_MAX_WAIT_MS.value}", "--max_queue=1024"],
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


async def _load(url: str, questions: list[dict], clients: int, seconds: float):
  """``(answers per second, latencies in seconds)`` of ``clients`` closed-loop clients."""
  import httpx
  latencies: list[float] = []
  stop = time.monotonic() + seconds

  async def client(i: int):
    async with httpx.AsyncClient(timeout=300) as c:
      k = i
      while time.monotonic() < stop:
        t = time.monotonic()
        r = await c.post(f"{url}/v1/answer", json=questions[k % len(questions)])
        if r.status_code != 200:
          raise RuntimeError(f"{r.status_code}: {r.text[:300]}")
        latencies.append(time.monotonic() - t)
        k += clients

  start = time.monotonic()
  await asyncio.gather(*(client(i) for i in range(clients)))
  return len(latencies) / (time.monotonic() - start), np.array(latencies)


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
  rows = {}
  for spec in _MODELS.value:
    name, path = spec.split(":", 1)
    for mode, max_batch in modes:
      proc, url = _start(path, max_batch, env)
      try:
        asyncio.run(_load(url, questions, 1, 2.0))  # first requests: connections, caches
        for k in clients:
          rps, lat = asyncio.run(_load(url, questions, k, _SECONDS.value))
          rows[name, mode, k] = (rps, np.percentile(lat, 50), np.percentile(lat, 99))
          print(f"{name} {mode} K={k}: {rps:.1f} req/s, p50 {rows[name, mode, k][1]:.3f} s, "
                f"p99 {rows[name, mode, k][2]:.3f} s", file=sys.stderr, flush=True)
      finally:
        proc.terminate()
        proc.wait(timeout=120)
  b, one = (m for m, _ in modes)
  print(f"| model | K | {b} req/s | p50 s | p99 s | max_batch=1 req/s | p50 s | p99 s | "
        f"req/s ratio |")
  print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
  for spec in _MODELS.value:
    name = spec.split(":", 1)[0]
    for k in clients:
      x, y = rows[name, b, k], rows[name, one, k]
      print(f"| {name} | {k} | {x[0]:.1f} | {x[1]:.3f} | {x[2]:.3f} | {y[0]:.1f} | {y[1]:.3f} | "
            f"{y[2]:.3f} | {x[0] / y[0]:.2f}x |")


if __name__ == "__main__":
  app.run(main)
