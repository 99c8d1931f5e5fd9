"""Input pipeline throughput: does featurising keep up, and what do the feature shards save?

  NLTK_DATA=../shared/data/nltk_data python bench/data.py [--max_examples=N] [--workers=1,2]

Prints one table: for the SQuAD 2.0 subset and RACE dev (all-MiniLM-L6-v2's tokenizer, the
``minilm`` configs' lengths), examples/s for tokenise-only and tokenise+tag with 1 and 2 worker
processes (1 = in this process; the 2-worker time includes starting the workers and loading the
tagger in each), and the start-up time of a cold run (featurise + write the feature shards) against a
prepared one (check and read the shards), with the ratios side by side. Every timing starts with NLTK's
per-text tag cache cleared. Not a test.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: configs/ and poi_jax/ from this checkout
SHARED = ROOT.parent / "shared" / "data"


def _time(fn) -> tuple[float, object]:
  from poi_jax.data import pos
  pos.tag_words.cache_clear()
  t0 = time.perf_counter()
  out = fn()
  return time.perf_counter() - t0, out


def _bench(name, task, config, records, tokenizer, workers, cache_root):
  """One dataset's row: examples/s per (mode, workers) and cold/cached start-up seconds."""
  row = {"dataset": name, "examples": len(records)}
  config.data.cache_dir = ""
  for with_pos in (False, True):
    config.model.pos_embedding = with_pos
    for w in workers:
      config.data.num_workers = w
      secs, feats = _time(lambda: task.featurize(records, tokenizer, config, is_training=False))
      row[("tag" if with_pos else "tok", w)] = len(records) / secs
  row["features"] = len(feats.arrays["input_ids"])
  config.model.pos_embedding = True
  config.data.num_workers = max(workers)
  config.data.cache_dir = os.path.join(cache_root, name)
  from poi_jax.prepare import splits as splits_lib

  def shards():  # build the missing feature shards (none the 2nd time) and load them
    split = splits_lib.prepare_split(task, config, "eval", tokenizer, records=iter(records),
                                   progress=False)
    return [split.shard_features(i) for i in range(split.manifest["num_shards"])]
  row["cold"], _ = _time(shards)
  row["cached"], _ = _time(shards)
  return row


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--max_examples", type=int, default=-1, help="< 0: all")
  parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
  args = parser.parse_args()
  os.environ.setdefault("NLTK_DATA", str(SHARED / "nltk_data"))
  os.environ["TQDM_DISABLE"] = "1"  # one table, no progress bars in between
  import logging

  from absl import logging as absl_logging
  from transformers.utils import logging as hf_logging

  from configs import race, squad2
  from poi_jax.data.readers import read_race, read_squad
  from poi_jax.models.encoders.load import load_tokenizer, resolve_checkpoint
  from poi_jax.tasks import choice as choice_task
  from poi_jax.tasks import squad as squad_task
  hf_logging.set_verbosity_error()
  absl_logging.set_verbosity(absl_logging.ERROR)
  logging.getLogger("poi_jax").setLevel(logging.ERROR)
  workers = [int(w) for w in args.workers.split(",")]
  tokenizer = load_tokenizer(resolve_checkpoint("minilm"))
  cap = (lambda r: list(r)) if args.max_examples < 0 else (lambda r: list(r)[:args.max_examples])
  jobs = [("squad2-subset", squad_task, squad2.get_config("minilm"),
           cap(read_squad(SHARED / "squad2" / "squad2-dev-subset.json"))),
          ("race-dev", choice_task, race.get_config("minilm"),
           cap(read_race(SHARED / "race" / "dev", "all")))]
  rows = []
  with tempfile.TemporaryDirectory(prefix="poi-bench-data-") as cache_root:
    for name, task, config, records in jobs:
      config.unlock()
      print(f"{name}: {len(records)} examples, max_seq_length {config.data.max_seq_length} ...",
            flush=True)
      rows.append(_bench(name, task, config, records, tokenizer, workers, cache_root))
  w1, wn = workers[0], workers[-1]
  head = (f"{'dataset':<14} {'examples':>8} {'features':>8} | "
          + " ".join(f"{f'tok w{w}':>9}" for w in workers)
          + f" {f'w{wn}/w{w1}':>7} | " + " ".join(f"{f'tag w{w}':>9}" for w in workers)
          + f" {f'w{wn}/w{w1}':>7} | {'cold s':>7} {'cached s':>8} {'ratio':>7}")
  print(f"\nexamples/s (tokenise-only `tok`, tokenise+tag `tag`; wN = N worker processes), "
        f"start-up cold vs cached ({os.cpu_count()} CPU cores)")
  print(head)
  print("-" * len(head))
  for r in rows:
    print(f"{r['dataset']:<14} {r['examples']:>8} {r['features']:>8} | "
          + " ".join(f"{r[('tok', w)]:>9.1f}" for w in workers)
          + f" {r[('tok', wn)] / r[('tok', w1)]:>6.2f}x | "
          + " ".join(f"{r[('tag', w)]:>9.1f}" for w in workers)
          + f" {r[('tag', wn)] / r[('tag', w1)]:>6.2f}x | {r['cold']:>7.2f} {r['cached']:>8.3f}"
          f" {r['cold'] / r['cached']:>6.0f}x")


if __name__ == "__main__":
  main()
