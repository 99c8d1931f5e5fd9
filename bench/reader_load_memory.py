r"""Peak RSS of `Reader.load` on a workdir: restoring the model only (today's `Reader.load`) vs
restoring the engine's whole (model, optimizer) checkpoint and keeping the model (how it loaded
before), each in a fresh process, side by side in one run.

  python bench/reader_load_memory.py --workdir=/tmp/squad-minilm

Each child loads, answers one question (so that both include the same compiled model call) and
reports its peak resident set size (``ru_maxrss``) and load time.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
_WORKDIR = flags.DEFINE_string("workdir", None, "A poi-jax workdir with checkpoints.")
_REPEATS = flags.DEFINE_integer("repeats", 1, "Children per way (the table shows the median).")

_CHILD = r"""
import json, os, resource, sys, time
from flax import nnx
from poi_jax.inference import load as reader_lib
from poi_jax.inference.reader import Reader

way, path = sys.argv[1], sys.argv[2]
if way == "model+optimizer":  # the restore Reader.load did before: both, then keep the model
  def _from_workdir(path, step):
    from poi_jax import tasks
    from poi_jax.model_files import export as export_files
    from poi_jax.model_files import checkpoint as ckpt_lib
    from poi_jax.train import optim
    raw = json.load(open(os.path.join(path, "config.json")))
    config = reader_lib._for_reading(raw, path)
    reader_lib._point_at_export(config, os.path.join(path, "export"))
    task = tasks.get_task(config.task)
    model = reader_lib._build(config, task)
    optimizer = nnx.Optimizer(model, optim.make_optimizer(config.optim, 1)[0], wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    ck = ckpt_lib.Checkpointer(path, keep=config.train.keep_checkpoints,
                               best_metric=config.train.best_metric or task.metric,
                               higher_is_better=task.higher_is_better)
    step = ck.best_step() or ck.latest_step()
    state, _ = ck.restore(step, state)
    scores = ck.manager.metrics(step)
    ck.close()
    model, _ = nnx.merge(graphdef, state)
    return config, task, model, step, export_files.null_threshold(raw, scores)[0]
  reader_lib._from_workdir = _from_workdir
t = time.perf_counter()
r = Reader.load(path)
load_s = time.perf_counter() - t
r.answer("Who won?", "The Denver Broncos defeated the Carolina Panthers 24-10.")
print(json.dumps({"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "load_s": load_s}))
"""


def main(argv):
  del argv
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  env.setdefault("NLTK_DATA", str(ROOT.parent / "shared" / "data" / "nltk_data"))
  rows = {}
  for way in ("model+optimizer", "model only"):
    runs = []
    for _ in range(_REPEATS.value):
      out = subprocess.run([sys.executable, "-c", _CHILD, way, _WORKDIR.value], env=env,
                           capture_output=True, text=True, cwd=ROOT, check=True)
      runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    runs.sort(key=lambda x: x["rss_mib"])
    rows[way] = runs[len(runs) // 2]
  base = rows["model+optimizer"]
  print("| Reader.load restores | peak RSS MiB | vs model+optimizer | load s |")
  print("| --- | ---: | ---: | ---: |")
  for way, x in rows.items():
    print(f"| {way} | {x['rss_mib']:.0f} | {x['rss_mib'] / base['rss_mib']:.2f}x | "
          f"{x['load_s']:.1f} |")


if __name__ == "__main__":
  flags.mark_flags_as_required(["workdir"])
  app.run(main)
