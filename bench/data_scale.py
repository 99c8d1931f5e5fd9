"""Does the data path stay flat as the corpus grows? `--mode=prepare` at several corpus sizes.

  NLTK_DATA=../shared/data/nltk_data nice python bench/data_scale.py \
      [--sizes=1000,4000,16000] [--squad_questions=130000] [--workers=1,2] [--out=/tmp/ds] \
      [--paragraphs_per_page=20] [--records_per_shard=0] [--shard_bytes=0] [--no_train_step]

Writes synthetic Natural Questions pages in the official full format (`tests/data/nq_synthetic`:
``--paragraphs_per_page`` consecutive SQuAD paragraphs of one article per page, HTML tokens, one
long-answer candidate per paragraph, five annotations) at each size N, and runs
``python -m poi_jax.main --config=configs/nq.py:tiny --mode=prepare`` on them with 1 and 2
worker processes (the config's ``data.records_per_shard`` and ``data.shard_bytes`` unless given),
then the first training step on the prepared shards (unless ``--no_train_step``). Reports, per
N: peak RSS summed over the process tree (sampled every 0.1 s) and the largest single process's,
pages/s, bytes per page on disk, and the peak RSS of a one-step training run; plus each size's peak RSS over the smallest size's (the target is
<= 1.25: flat). Then the same for SQuAD 2.0 at ``--squad_questions`` questions (the shared
subset's articles repeated under new ids). Prints ONE table (and writes ``results.json`` in
``--out`` after every measurement, so sizes that finished are kept if a larger one is stopped).
Not a test.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
SQUAD = SHARED / "squad2" / "squad2-dev-subset.json"


def write_nq_pages(path: pathlib.Path, n: int, paragraphs_per_page: int) -> dict:
  """``n`` pages, streamed to ``path`` (never all in memory); returns size statistics."""
  from tests.data import nq_synthetic
  with open(SQUAD) as f:
    n_articles = len(json.load(f)["data"])
  written, tokens, next_id, a = 0, 0, 1000, 0
  with gzip.open(path, "wt", encoding="utf-8") as f:
    while written < n:
      pages = nq_synthetic.page_examples(str(SQUAD), articles=[a % n_articles],
                                         paragraphs_per_page=paragraphs_per_page,
                                         max_examples=n - written, start_id=next_id)
      for page in pages:
        f.write(json.dumps(page) + "\n")
        tokens += len(page["document_tokens"])
      written += len(pages)
      next_id += len(pages) + 1
      a += 1
  return {"doc_tokens_per_page": tokens / max(written, 1), "file_bytes": path.stat().st_size}


def write_squad(path: pathlib.Path, questions: int) -> int:
  """The subset's articles repeated under new question ids up to ``questions`` questions."""
  data = json.loads(SQUAD.read_text())["data"]
  out, count, rep = [], 0, 0
  while count < questions:
    for article in data:
      paras = []
      for p in article["paragraphs"]:
        qas = []
        for qa in p["qas"]:
          if count >= questions:
            break
          qas.append(dict(qa, id=f"{qa['id']}-r{rep}"))
          count += 1
        if qas:
          paras.append(dict(p, qas=qas))
      if paras:
        out.append(dict(article, title=f"{article['title']}-r{rep}", paragraphs=paras))
      if count >= questions:
        break
    rep += 1
  path.write_text(json.dumps({"version": "v2.0", "data": out}))
  return count


def run_measured(args: list[str], code: pathlib.Path = ROOT,
                 per_process: list | None = None) -> tuple[float, float, str]:
  """(wall seconds, peak RSS in MB summed over the process and its children, stderr tail) of
  ``poi_jax.main`` run from the checkout ``code``; ``per_process``: gets the peak RSS in MB of
  the largest single process appended."""
  import psutil
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(code), TQDM_DISABLE="1",
             NLTK_DATA=os.environ.get("NLTK_DATA", str(SHARED / "nltk_data")))
  t0 = time.perf_counter()
  proc = subprocess.Popen([sys.executable, "-m", "poi_jax.main", *args], cwd=code, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  peak = [0, 0]

  def sample():
    p = psutil.Process(proc.pid)
    while proc.poll() is None:
      try:
        each = [p.memory_info().rss] + [c.memory_info().rss
                                        for c in p.children(recursive=True)]
        peak[0] = max(peak[0], sum(each))
        peak[1] = max(peak[1], max(each))
      except psutil.Error:
        pass
      time.sleep(0.1)

  thread = threading.Thread(target=sample, daemon=True)
  thread.start()
  out, err = proc.communicate()
  wall = time.perf_counter() - t0
  thread.join()
  if proc.returncode:
    raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{err[-3000:]}")
  if per_process is not None:
    per_process.append(peak[1] / 2**20)
  return wall, peak[0] / 2**20, (out + err)[-500:]


def shard_bytes(cache: pathlib.Path) -> int:
  return sum(p.stat().st_size for p in cache.rglob("shard-*") if p.is_file())


def measure(name, config, data_file, n, workers, out, per_shard, extra=(), *,
            bytes_per_shard=0, train_step=True):
  row = {"corpus": name, "n": n}
  base = [f"--config={config}", f"--config.data.train_file={data_file}",
          "--config.data.eval_file=", *extra]
  if per_shard:
    base.append(f"--config.data.records_per_shard={per_shard}")
  if bytes_per_shard:
    base.append(f"--config.data.shard_bytes={bytes_per_shard}")
  for w in workers:
    work = out / f"{name}-{n}-w{w}"
    one = []
    wall, rss, tail = run_measured([*base, f"--workdir={work}", "--mode=prepare",
                                    f"--config.data.num_workers={w}"], per_process=one)
    row[f"rss_prepare_w{w}_mb"] = rss
    row[f"rss_process_w{w}_mb"] = one[0]
    row[f"per_s_w{w}"] = n / wall
    row["bytes_per_item"] = shard_bytes(work / "cache") / n
    row["shards"] = len(list((work / "cache").rglob("shard-*.array_record")))
    last = work
  row["rss_train_step_mb"] = 0.0
  if train_step:
    _, rss, _ = run_measured([*base, f"--workdir={last}", "--mode=train",
                              "--config.train.max_steps=1", "--config.train.export_best=false",
                              f"--config.data.num_workers={workers[-1]}"])
    row["rss_train_step_mb"] = rss
  return row


def table(rows, workers) -> str:
  head = ["corpus", "N", "tokens/page"]
  for w in workers:
    head += [f"peak RSS prepare {w}w (MB; largest process)", f"items/s {w}w"]
  head += [f"speed {workers[-1]}w/{workers[0]}w", "bytes/item", "RSS 1st train step (MB)",
           "prepare RSS / smallest N"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  first = {}
  for r in rows:
    key = f"rss_prepare_w{workers[-1]}_mb"
    first.setdefault(r["corpus"], r[key])
    cells = [r["corpus"], f"{r['n']:,}", f"{r.get('doc_tokens_per_page', 0):,.0f}"]
    for w in workers:
      cells += [f"{r[f'rss_prepare_w{w}_mb']:,.0f} ({r.get(f'rss_process_w{w}_mb', 0):,.0f})",
                f"{r[f'per_s_w{w}']:.1f}"]
    cells += [f"{r[f'per_s_w{workers[-1]}'] / r[f'per_s_w{workers[0]}']:.2f}x",
              f"{r['bytes_per_item']:,.0f}", f"{r['rss_train_step_mb']:,.0f}",
              f"{r[key] / first[r['corpus']]:.2f}x"]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--sizes", default="1000,4000,16000")
  ap.add_argument("--squad_questions", type=int, default=130000)
  ap.add_argument("--workers", default="1,2")
  ap.add_argument("--paragraphs_per_page", type=int, default=20)
  ap.add_argument("--out", default="/tmp/data_scale")
  ap.add_argument("--records_per_shard", type=int, default=0, help="0: the config's")
  ap.add_argument("--shard_bytes", type=int, default=0, help="0: the config's")
  ap.add_argument("--no_train_step", action="store_true")
  args = ap.parse_args()
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  workers = [int(w) for w in args.workers.split(",")]
  rows = []

  def save():
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    print(table(rows, workers), file=sys.stderr, flush=True)

  for n in [int(s) for s in args.sizes.split(",") if s]:
    path = out / f"nq-{n}.jsonl.gz"
    stats = write_nq_pages(path, n, args.paragraphs_per_page)
    row = measure("NQ (nq.py:tiny)", "configs/nq.py:tiny", path, n, workers, out,
                  args.records_per_shard, bytes_per_shard=args.shard_bytes,
                  train_step=not args.no_train_step)
    row.update(stats)
    rows.append(row)
    save()
    path.unlink()
  if args.squad_questions:
    path = out / "squad2-repeated.json"
    n = write_squad(path, args.squad_questions)
    rows.append(measure("SQuAD 2.0 (squad2.py:tiny)", "configs/squad2.py:tiny", path, n,
                        workers, out, args.records_per_shard,
                        ["--config.data.max_train_examples=-1"],
                        bytes_per_shard=args.shard_bytes, train_step=not args.no_train_step))
    save()
  print(table(rows, workers))


if __name__ == "__main__":
  main()
