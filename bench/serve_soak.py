r"""Soak for the HTTP server: minutes of a mixed load from many concurrent clients, then SIGTERM
with requests in flight.

  python bench/serve_soak.py --minutes=10 --clients=32 --out=/tmp/soak   # trains the tiny model
  python bench/serve_soak.py --model=runs/squad2-tiny --minutes=10 --out=/tmp/soak

`python -m poi_jax.serve` runs on a trained model (``--model``; without it, the tiny SQuAD 2.0
POI-Net is trained first on the sample the package ships, 4 steps, into OUT/model) while
``--clients`` threads each send, one after another, a request drawn from this mix:

- **good** (55%): one of 20 questions of the evaluation set (passages within the window
  limit); the answer must equal the one the server
  gave that question alone at the start (text and no-answer flag). A 503 (the queue full) is
  retried after its ``Retry-After``, as a well-behaved client does; a good request failed is one
  not answered after 5 tries, or answered wrong;
- **hostile** (20%): a case of every class the fuzz tests know (tests/hostile_inputs.py: nesting,
  huge numbers, non-finite values, bad encodings, lone surrogates, wrong types, lengths), which
  must get the answer or the 4xx its case names, never a 5xx;
- **oversized** (10%): a body over ``--max_body_bytes``, a list longer than the queue, a passage
  over ``--max_windows`` windows: a 4xx;
- **slow** (10%): a good question whose body trickles in over ~1 s in five parts;
- **disconnect** (5%): a client that sends half a body and hangs up, or sends a whole request
  and hangs up before reading the answer.

Then ``--in_flight`` slow good requests send half their bodies, the server gets SIGTERM, and they
send the rest: each must get its answer or a clean 503, none dropped; the server must exit 0.
Printed (and written to OUT/soak_report.json): requests per kind and status, good requests'
throughput and p50 / p99 latency, 5xx count, good requests failed, the server's RSS at the start
of the load, at its end and its peak (sampled every 2 s), and the drain. Exit status 1 if any
5xx, any good request failed, RSS grew by more than ``--rss_growth_mb``, a request in flight at
the SIGTERM was dropped, or the server did not exit 0. docs/reliability.md has the figures.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "poi_jax" / "sample_data" / "squad2-dev-subset.json.xz"
MIX = (("good", 0.55), ("hostile", 0.20), ("oversized", 0.10), ("slow", 0.10),
       ("disconnect", 0.05))
MAX_BODY, MAX_WINDOWS, MAX_QUEUE = 40_000, 3, 256


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def rss_mb(pid: int) -> float | None:
  try:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024
  except OSError:
    return None
  return None


def train_tiny(out: pathlib.Path) -> pathlib.Path:
  """The tiny SQuAD 2.0 POI-Net of the test suite (4 steps on 48 questions), into OUT/model."""
  workdir = out / "model"
  if (workdir / "export").is_dir():
    return workdir
  r = subprocess.run(
      [sys.executable, "-m", "poi_jax.main", "--config=configs/squad2.py:tiny",
       f"--workdir={workdir}", "--mode=train_and_eval", f"--config.data.train_file={SAMPLE}",
       f"--config.data.eval_file={SAMPLE}", "--config.data.max_train_examples=48",
       "--config.data.max_eval_examples=24", "--config.train.max_steps=4",
       "--config.train.save_every=100"], cwd=ROOT, capture_output=True, text=True,
      env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT)))
  if r.returncode:
    raise RuntimeError(f"training the tiny model failed:\n{r.stderr[-3000:]}")
  return workdir


def raw_post(port: int, body: bytes, *, parts: int = 1, pause: float = 0.0,
             hang_up_after: int | None = None, read: bool = True,
             before_rest=None) -> tuple[int | None, bytes]:
  """One POST /v1/answer on its own connection, its body sent in ``parts`` with ``pause``
  seconds between them (``before_rest()`` called after the first part); ``hang_up_after``:
  close after that many body bytes; ``read=False``: close without reading the answer. Returns
  the status (None: no answer) and the answer's body."""
  head = (b"POST /v1/answer HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
          b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
  with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
    s.sendall(head)
    if hang_up_after is not None:
      s.sendall(body[:hang_up_after])
      return None, b""
    step = max(1, -(-len(body) // parts))
    for k in range(0, len(body), step):
      s.sendall(body[k:k + step])
      if k == 0 and before_rest is not None:
        before_rest()
      if k + step < len(body):
        time.sleep(pause)
    if not read:
      return None, b""
    response = b""
    while chunk := s.recv(65536):
      response += chunk
  head, _, payload = response.partition(b"\r\n\r\n")
  try:
    return int(head.split()[1]), payload
  except (IndexError, ValueError):
    return None, response


class Soak:
  """The load's state: what each kind of request got, and the good requests' latencies."""

  def __init__(self, args, url: str, port: int, goods: list[dict], expected: list[dict],
               cases: list):
    self.args, self.url, self.port = args, url, port
    self.goods, self.expected, self.cases = goods, expected, cases
    self.lock = threading.Lock()
    self.statuses = collections.Counter()  # (kind, status)
    self.latencies: list[float] = []
    self.good_failed: list[str] = []
    self.server_errors: list[str] = []
    self.retries = 0
    self.stop = threading.Event()

  def note(self, kind: str, status, problem: str | None = None, latency: float | None = None,
           fatal_5xx: bool = True):
    with self.lock:
      self.statuses[(kind, str(status))] += 1
      if latency is not None:
        self.latencies.append(latency)
      if isinstance(status, int) and status >= 500 and status != 503 and fatal_5xx:
        self.server_errors.append(f"{kind}: {status} {problem or ''}"[:300])
      elif problem:
        (self.good_failed if kind in ("good", "slow") else self.server_errors).append(
            f"{kind}: {problem}"[:300])

  def check_answer(self, k: int, payload: dict) -> str | None:
    want = self.expected[k]
    if (payload.get("answer"), payload.get("no_answer")) != (want["answer"], want["no_answer"]):
      return f"question {k}: {payload.get('answer')!r} instead of {want['answer']!r}"
    return None

  def good(self, client, rng):
    k = rng.randrange(len(self.goods))
    t0 = time.perf_counter()
    for _ in range(5):
      r = client.post(f"{self.url}/v1/answer", json=self.goods[k], timeout=300)
      if r.status_code != 503:
        break
      with self.lock:
        self.retries += 1
      time.sleep(float(r.headers.get("retry-after", "1")))
    latency = time.perf_counter() - t0
    if r.status_code != 200:
      self.note("good", r.status_code, f"question {k}: {r.status_code} {r.text[:200]}")
      return
    self.note("good", 200, self.check_answer(k, r.json()), latency)

  def hostile(self, client, rng):
    case = rng.choice(self.cases)
    r = client.post(f"{self.url}/v1/answer", content=case.data, timeout=300,
                    headers={"content-type": "application/json"})
    problem = None
    if r.status_code >= 500:
      problem = f"{case.cls} seed {case.seed} ({case.what})"
    elif case.field is None and r.status_code != 200:
      problem = f"{case.cls} seed {case.seed}: {r.status_code} for a valid request"
    elif case.field is not None and not 400 <= r.status_code < 500:
      problem = f"{case.cls} seed {case.seed}: {r.status_code}, not a 4xx"
    self.note("hostile", r.status_code, problem)

  def oversized(self, client, rng):
    g = rng.choice(self.goods)
    which = rng.randrange(3)
    if which == 0:
      body = {"question": g["question"], "context": "x " * MAX_BODY}
    elif which == 1:
      body = [g] * (MAX_QUEUE + 1)
    else:
      body = {"question": g["question"], "context": " ".join([g["context"]] * 20)}
    r = client.post(f"{self.url}/v1/answer", json=body, timeout=300)
    self.note("oversized", r.status_code,
              None if 400 <= r.status_code < 500 else f"{r.status_code}: not a 4xx")

  def slow(self, client, rng):
    k = rng.randrange(len(self.goods))
    status, payload = raw_post(self.port, json.dumps(self.goods[k]).encode(), parts=5,
                               pause=rng.uniform(0.1, 0.3))
    if status != 200:
      self.note("slow", status, f"question {k}: {status} {payload[:200]!r}")
      return
    self.note("slow", 200, self.check_answer(k, json.loads(payload)))

  def disconnect(self, client, rng):
    body = json.dumps(rng.choice(self.goods)).encode()
    try:
      if rng.random() < 0.5:
        raw_post(self.port, body, hang_up_after=len(body) // 2)
      else:
        raw_post(self.port, body, read=False)
    except OSError:
      pass
    self.note("disconnect", "hung up")

  def client(self, seed: int):
    import httpx
    rng = random.Random(seed)
    kinds, weights = zip(*MIX)
    with httpx.Client() as client:
      while not self.stop.is_set():
        kind = rng.choices(kinds, weights)[0]
        try:
          getattr(self, kind)(client, rng)
        except Exception as e:  # a transport error: the server dropped or refused a request
          self.note(kind, "no answer", f"{type(e).__name__}: {e}")


def drain(port: int, proc: subprocess.Popen, goods: list[dict], expected: list[dict], n: int):
  """``n`` requests in flight (half their bodies sent) when the server gets SIGTERM."""
  sent_half = threading.Barrier(n + 1)
  results = [None] * n

  def one(i):
    k = i % len(goods)
    try:
      status, payload = raw_post(port, json.dumps(goods[k]).encode(), parts=2, pause=1.5,
                                 before_rest=sent_half.wait)
      ok = status == 200 and json.loads(payload).get("answer") == expected[k]["answer"]
      results[i] = "answered" if ok else ("503" if status == 503 else f"{status} {payload[:100]!r}")
    except Exception as e:
      results[i] = f"dropped: {type(e).__name__}: {e}"

  threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
  for t in threads:
    t.start()
  sent_half.wait(timeout=120)
  t_term = time.time()
  proc.send_signal(signal.SIGTERM)
  for t in threads:
    t.join(timeout=300)
  try:
    code = proc.wait(timeout=120)
  except subprocess.TimeoutExpired:
    proc.kill()
    code = "did not exit in 120 s"
  return {"in_flight": n, "outcomes": dict(collections.Counter(
      r if r in ("answered", "503") else "other" for r in results)),
          "not_answered": [r for r in results if r not in ("answered", "503")],
          "exit_status": code, "exit_s": round(time.time() - t_term, 2)}


def percentile(xs: list[float], q: float) -> float | None:
  if not xs:
    return None
  xs = sorted(xs)
  return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run(args) -> dict:
  import httpx

  from poi_jax import tasks
  from poi_jax.data import readers
  from tests.hostile_inputs import Fuzzer
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  model = pathlib.Path(args.model) if args.model else train_tiny(out)
  port = free_port()
  log = open(out / "server.log", "w")
  proc = subprocess.Popen(
      [sys.executable, "-m", "poi_jax.serve", f"--model={model}", f"--port={port}",
       f"--max_batch={args.max_batch}", "--max_wait_ms=20", f"--max_body_bytes={MAX_BODY}",
       f"--max_windows={MAX_WINDOWS}", f"--max_queue={MAX_QUEUE}"],
      cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=log,
      stderr=subprocess.STDOUT)
  url = f"http://127.0.0.1:{port}"
  deadline = time.monotonic() + 600
  while True:
    if proc.poll() is not None:
      raise RuntimeError(f"the server exited {proc.returncode}; see {out}/server.log")
    try:
      if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
        break
    except httpx.TransportError:
      pass
    if time.monotonic() > deadline:
      proc.kill()
      raise RuntimeError(f"the server did not start in 600 s; see {out}/server.log")
    time.sleep(0.5)

  config = json.loads((model / "config.json").read_text())["data"]
  # 20 questions the server answers (passages within --max_windows), each answer alone
  goods, expected = [], []
  for r in tasks.cap(list(readers.read_squad(config["eval_file"])), 200, 0):
    body = {"question": r.question, "context": r.context}
    alone = httpx.post(f"{url}/v1/answer", json=body, timeout=300)
    if alone.status_code == 200:
      goods.append(body)
      expected.append(alone.json())
    if len(goods) == 20:
      break
  fuzzer = Fuzzer(goods[0], max_body=MAX_BODY, max_items=MAX_QUEUE,
                  too_many_words=MAX_WINDOWS * config["max_seq_length"] + 1)
  cases = fuzzer.cases(args.seed, 20)
  soak = Soak(args, url, port, goods, expected, cases)

  rss = [(0.0, rss_mb(proc.pid))]
  t0 = time.time()
  threads = [threading.Thread(target=soak.client, args=(args.seed * 1000 + i,), daemon=True)
             for i in range(args.clients)]
  for t in threads:
    t.start()
  last_print = t0
  while time.time() - t0 < args.minutes * 60:
    time.sleep(2)
    rss.append((round(time.time() - t0, 1), rss_mb(proc.pid)))
    if time.time() - last_print >= 60:
      last_print = time.time()
      with soak.lock:
        n = sum(soak.statuses.values())
      print(f"  {time.time() - t0:5.0f} s: {n} requests, RSS {rss[-1][1]:.0f} MB, "
            f"5xx {len(soak.server_errors)}, good failed {len(soak.good_failed)}", flush=True)
  soak.stop.set()
  for t in threads:
    t.join(timeout=300)
  load_s = time.time() - t0
  rss.append((round(load_s, 1), rss_mb(proc.pid)))
  healthy = httpx.get(f"{url}/healthz", timeout=30).status_code == 200
  drained = drain(port, proc, goods, expected, args.in_flight)
  log.close()

  good = soak.statuses[("good", "200")] + soak.statuses[("slow", "200")]
  # RSS is compared from the load's first minute on (caches and allocator pools fill first)
  settled = [m for t, m in rss if t >= min(60.0, load_s / 4) and m is not None]
  growth = (rss[-1][1] - settled[0]) if settled and rss[-1][1] else None
  report = {
      "minutes": args.minutes, "clients": args.clients, "seed": args.seed,
      "model": str(model), "load_s": round(load_s, 1),
      "requests": sum(soak.statuses.values()),
      "by_kind_and_status": {f"{k} {s}": n for (k, s), n in sorted(soak.statuses.items())},
      "good_answered_per_s": round(good / load_s, 2),
      "good_latency_s": {"p50": percentile(soak.latencies, 0.5),
                         "p99": percentile(soak.latencies, 0.99),
                         "max": max(soak.latencies, default=None)},
      "retries_after_503": soak.retries,
      "server_errors_5xx": soak.server_errors, "good_failed": soak.good_failed,
      "rss_mb": {"start": rss[0][1], "settled": settled[0] if settled else None,
                 "end": rss[-1][1], "peak": max(m for _, m in rss if m is not None),
                 "growth_after_settling": growth, "bound": args.rss_growth_mb},
      "healthy_after_load": healthy, "drain": drained,
  }
  report["ok"] = (not soak.server_errors and not soak.good_failed and healthy
                  and growth is not None and growth <= args.rss_growth_mb
                  and not drained["not_answered"] and drained["exit_status"] == 0)
  return report


def markdown(r: dict) -> str:
  lat, mem, d = r["good_latency_s"], r["rss_mb"], r["drain"]
  fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
  lines = [f"soak: {r['minutes']} min, {r['clients']} clients, {r['requests']} requests "
           f"({r['load_s']} s of load)", "", "| kind | status | requests |", "| --- | --- | ---: |"]
  lines += [f"| {k.split(' ', 1)[0]} | {k.split(' ', 1)[1]} | {n} |"
            for k, n in r["by_kind_and_status"].items()]
  lines += ["", f"good answered {r['good_answered_per_s']}/s, latency p50 {fmt(lat['p50'])} s, "
            f"p99 {fmt(lat['p99'])} s, max {fmt(lat['max'])} s; retries after a 503: "
            f"{r['retries_after_503']}",
            f"5xx: {len(r['server_errors_5xx'])}; good requests failed: {len(r['good_failed'])}",
            f"RSS MB: start {mem['start']:.0f}, after the first minute {mem['settled']:.0f}, "
            f"end {mem['end']:.0f}, peak {mem['peak']:.0f} (growth "
            f"{mem['growth_after_settling']:+.0f}, bound {mem['bound']})",
            f"SIGTERM with {d['in_flight']} requests in flight: {d['outcomes']}, server exit "
            f"{d['exit_status']} after {d['exit_s']} s"]
  lines += [f"- {p}" for p in r["server_errors_5xx"][:10] + r["good_failed"][:10]
            + d["not_answered"][:10]]
  lines.append("verdict: " + ("every check passed" if r["ok"] else "FAILED"))
  return "\n".join(lines)


def main(argv=None) -> int:
  from poi_jax.io import write_json_atomic
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--model", default="", help="a trained workdir (default: train the tiny one)")
  ap.add_argument("--out", required=True)
  ap.add_argument("--minutes", type=float, default=10.0)
  ap.add_argument("--clients", type=int, default=32)
  ap.add_argument("--in_flight", type=int, default=16,
                  help="requests in flight when the server gets SIGTERM")
  ap.add_argument("--max_batch", type=int, default=8)
  ap.add_argument("--rss_growth_mb", type=float, default=64.0,
                  help="most RSS growth allowed from the end of the first minute to the end")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args(argv)
  report = run(args)
  path = pathlib.Path(args.out) / "soak_report.json"
  write_json_atomic(str(path), report)
  print(markdown(report))
  print(f"report: {path}")
  return 0 if report["ok"] else 1


if __name__ == "__main__":
  sys.exit(main())
