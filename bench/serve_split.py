r"""Where a served question's time goes: the Reader's three stages (featurize, model, decode) per
question at one question a call and at 32, with glibc's malloc and with ``cpu_malloc=reuse``,
side by side in one run.

  nice python bench/serve_split.py --model=tiny:/tmp/squad-tiny --model=minilm:/tmp/squad-cpu \
      [--questions=128] [--batches=1,32]

For each model and malloc setting a fresh process (the malloc setting applies at start-up) loads
the Reader (``batch_size=32``, the passage cache on), compiles every padded batch size, then
answers the first ``--questions`` questions of the shared SQuAD 2.0 subset in file order (about 5
a passage: the cache hits for all but a passage's first) in calls of each batch size, twice; the
second pass is timed. Featurize and decode: CPU time of the calling thread (robust to other
work on a shared machine); model: wall time of the jitted calls (XLA computes on its own
threads). The model's share is what batching cannot amortise on a CPU where a call's cost grows
with its rows; XLA's operation count per window (``cost_analysis``, the same on any machine) shows
that the work per row does not shrink with the batch.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
SQUAD = ROOT.parent / "shared" / "data" / "squad2" / "squad2-dev-subset.json"

_MODELS = flags.DEFINE_multi_string("model", None, "name:path of a workdir or export/.")
_QUESTIONS = flags.DEFINE_integer("questions", 128, "Questions answered per batch size.")
_BATCHES = flags.DEFINE_list("batches", ["1", "32"], "Questions per Reader call.")
_WORKER = flags.DEFINE_string("worker", None, "Internal: path,cpu_malloc to measure.")


def _gflop_per_window(reader, features, rows: int) -> float:
  """XLA's count of the floating-point operations of a ``rows``-row model call, per row
  (``compiled.cost_analysis()``: the same on any machine, unlike a time)."""
  import numpy as np
  arrays = reader.task.model_arrays(features.arrays)
  idx = np.arange(rows) % len(next(iter(arrays.values())))
  batch = {k: v[idx] for k, v in arrays.items()}
  batch["example_mask"] = np.ones(rows, np.float32)
  cost = reader._forward.lower(reader._state, batch).compile().cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  return cost["flops"] / rows / 1e9


def _measure(path: str, cpu_malloc: str) -> dict:
  """``{batch: {stage: ms a question}}`` in this process."""
  os.environ.setdefault("TQDM_DISABLE", "1")
  from poi_jax.data import readers
  from poi_jax.data.records import SquadExample
  from poi_jax.inference.reader import Reader
  from poi_jax.serve.batching import warm_up
  reader = Reader.load(path, batch_size=32, cpu_malloc=cpu_malloc)
  warm_up(reader, 32)
  records = [SquadExample(str(i), r.question, r.context, [], False, [], "", "<bench>")
             for i, r in enumerate(list(readers.read_squad(str(SQUAD)))[:_QUESTIONS.value])]
  out = {}
  for batch in (int(b) for b in _BATCHES.value):
    for timed in (False, True):
      reader.passages = type(reader.passages)(reader.passages.size)  # each pass: cache empty
      ms = {"featurize": 0.0, "model": 0.0, "decode": 0.0}
      for s in range(0, len(records), batch):
        part = records[s:s + batch]
        c = time.thread_time()
        features = reader.featurize(part)
        ms["featurize"] += time.thread_time() - c
        t = time.perf_counter()
        outputs = reader.predict(features)
        ms["model"] += time.perf_counter() - t
        c = time.thread_time()
        reader.decode(part, features, outputs)
        ms["decode"] += time.thread_time() - c
      if timed:
        out[batch] = {k: 1000 * v / len(records) for k, v in ms.items()}
        out[batch]["gflop"] = _gflop_per_window(reader, reader.featurize(records[:4]), batch)
  return out


def main(argv):
  del argv
  if _WORKER.value:
    path, cpu_malloc = _WORKER.value.rsplit(",", 1)
    print(json.dumps(_measure(path, cpu_malloc)))
    return
  if not _MODELS.value:
    raise app.UsageError("--model=name:path (repeat for several models)")
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  env.setdefault("NLTK_DATA", str(ROOT.parent / "shared" / "data" / "nltk_data"))
  rows = []
  for spec in _MODELS.value:
    name, path = spec.split(":", 1)
    for cpu_malloc in ("system", "reuse"):
      r = subprocess.run([sys.executable, __file__, f"--worker={path},{cpu_malloc}",
                          f"--questions={_QUESTIONS.value}",
                          f"--batches={','.join(_BATCHES.value)}"],
                         env=env, capture_output=True, text=True, check=False)
      if r.returncode:
        raise RuntimeError(f"{name} {cpu_malloc}: {r.stderr[-2000:]}")
      for batch, ms in json.loads(r.stdout.strip().splitlines()[-1]).items():
        rows.append((name, cpu_malloc, batch, ms))
      print(f"{name} {cpu_malloc} done", file=sys.stderr, flush=True)
  print("| model | malloc | questions/call | featurize CPU ms/q | model ms/q | decode CPU ms/q | "
        "model share | GFLOP a window (rows = questions/call) |")
  print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
  for name, cpu_malloc, batch, ms in rows:
    total = ms["featurize"] + ms["model"] + ms["decode"]
    print(f"| {name} | {cpu_malloc} | {batch} | {ms['featurize']:.2f} | {ms['model']:.2f} | "
          f"{ms['decode']:.2f} | {ms['model'] / total:.0%} | {ms['gflop']:.4f} |")


if __name__ == "__main__":
  app.run(main)
