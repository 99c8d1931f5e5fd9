r"""Length buckets (issue 37): padding share, evaluation and training speed with and without.

  python bench/buckets.py                       # MiniLM POI-Net, SQuAD sample, 256 and 384 tokens
  python bench/buckets.py --lengths=384 --rounds=3 --questions=256

On the first ``--questions`` questions of the SQuAD 2.0 sample (all-MiniLM-L6-v2's tokenizer and
weights, POI-Net head, doc stride 128), for each max length:

1. the windows' real tokens and the padding share of each bucket set (evaluation batches of
   ``--eval_batch``, ordered by length) and of the training plan (``--train_batch``);
2. evaluation: `Reader.predict` over every window (the path of `Reader.answer`, the predict CLI
   and the server), ``off`` vs ``auto``, alternating ``--rounds`` times after a warm-up pass that
   compiles every shape; questions/s and the ratio, and the outputs' largest difference on real
   positions;
3. training: the engine's jitted train step (`poi_jax.train.step`) over whole epochs of the same
   questions' training windows, `TrainLoader` (off) vs `BucketedTrainLoader` (auto), alternating
   epochs after a warm-up epoch each (compilation excluded); examples/s and the ratio;
4. the compiled shapes of each.

Ratios are what to read on a loaded machine: both ways run interleaved in one process.
"""
from __future__ import annotations

import pathlib
import sys
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: configs/ and poi_jax/ from this checkout

_LENGTHS = flags.DEFINE_list("lengths", ["256", "384"], "max_seq_length values.")
_QUESTIONS = flags.DEFINE_integer("questions", 256, "Questions of the SQuAD sample.")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Timed passes per way (alternating).")
_EVAL_BATCH = flags.DEFINE_integer("eval_batch", 32, "Evaluation batch (rows).")
_TRAIN_BATCH = flags.DEFINE_integer("train_batch", 16, "Training batch (rows).")
_TRAIN = flags.DEFINE_bool("train", True, "Also time the training step.")
_SETS = flags.DEFINE_list("sets", ["off", "0.5", "auto", "0.125"],
                          "Bucket sets for the padding table: off, auto, or a fraction f "
                          "(buckets every f * max length).")


def _config(length: int):
  from configs import squad2
  from poi_jax import sample_data
  c = squad2.get_config("minilm")
  with c.unlocked():
    c.data.max_seq_length, c.data.doc_stride = length, min(128, length // 4)
    c.data.eval_file = c.data.train_file = sample_data.SQUAD2_SUBSET
    c.data.num_workers = 0
    c.train.batch_size, c.train.eval_batch_size = _TRAIN_BATCH.value, _EVAL_BATCH.value
  return c


def _spec(name: str, length: int) -> str:
  if name in ("off", "auto"):
    return name
  step = float(name) * length
  return ",".join(str(int(step * k)) for k in range(1, int(round(1 / float(name))) + 1))


def main(argv):
  del argv
  import jax
  import numpy as np
  from flax import nnx

  from poi_jax import runtime, tasks
  from poi_jax.data import buckets
  from poi_jax.data.loader import BucketedTrainLoader, TrainLoader
  from poi_jax.inference.reader import Reader
  from poi_jax.train import mesh as mesh_lib
  from poi_jax.train import optim, placement
  from poi_jax.train import step as step_lib
  from poi_jax.models.build import load_tokenizer

  runtime.configure({"cpu_malloc": "reuse"})
  print(f"device: {jax.devices()[0].device_kind} ({jax.device_count()}); "
        f"{_QUESTIONS.value} questions of the SQuAD 2.0 sample, MiniLM POI-Net")
  rows = []
  for length in map(int, _LENGTHS.value):
    config = _config(length)
    task = tasks.get_task("squad2")
    tokenizer = load_tokenizer(config)
    records = list(task.read(config, "eval"))[:_QUESTIONS.value]
    features = task.featurize(records, tokenizer, config, is_training=False)
    lengths = buckets.window_lengths(features.arrays)
    print(f"\n== max length {length}: {len(lengths)} windows, {int(lengths.sum()):,} real tokens "
          f"of {len(lengths) * length:,} computed without buckets "
          f"({1 - lengths.sum() / (len(lengths) * length):.1%} padding)")
    print(f"{'buckets':<28} {'eval padding':>12} {'train padding':>13}")
    train_features = task.featurize(records, tokenizer, config, is_training=True)
    train_lengths = buckets.window_lengths(train_features.arrays)
    for name in _SETS.value:
      bk = buckets.resolve(_spec(name, length), length)
      ev = buckets.padding_share(lengths, buckets.sorted_batches(lengths, _EVAL_BATCH.value, bk))
      steps = max(len(train_lengths) // _TRAIN_BATCH.value, 1)
      plan = BucketedTrainLoader({"x": train_lengths}, _TRAIN_BATCH.value, seed=0,
                                 lengths=train_lengths, buckets=bk, length_keys=())
      tr = buckets.padding_share(train_lengths, (plan.plan(i) for i in range(steps)))
      print(f"{name + ' ' + str(bk):<28} {ev:>12.1%} {tr:>13.1%}")

    model = task.build_model(config, nnx.Rngs(0))
    task.load_pretrained(model, config.model.init_from)
    readers = {}
    for spec in ("off", "auto"):
      c = _config(length)
      with c.unlocked():
        c.data.length_buckets = spec
      readers[spec] = Reader(c, task, model, tokenizer=tokenizer, step=0, null_threshold=0.0,
                             batch_size=_EVAL_BATCH.value)
    outs, times = {}, {"off": [], "auto": []}
    for spec, r in readers.items():  # warm-up: every shape compiled
      outs[spec] = r.predict(features)
    for _ in range(_ROUNDS.value):
      for spec, r in readers.items():
        t = time.perf_counter()
        r.predict(features)
        times[spec].append(time.perf_counter() - t)
    diff = max(float(np.abs(outs["auto"][k][i, :n] - outs["off"][k][i, :n]).max())
               for k in ("start_logits", "end_logits") for i, n in enumerate(lengths))
    best = {k: min(v) for k, v in times.items()}
    q = len(records)
    rows.append((length, "eval (Reader.predict)", q / best["off"], q / best["auto"], "q/s",
                 readers["off"].compiled_shapes, readers["auto"].compiled_shapes))
    print(f"eval: off {best['off']:.2f} s, auto {best['auto']:.2f} s "
          f"({best['off'] / best['auto']:.2f}x); max |logit diff| on real positions {diff:.1e}")

    if _TRAIN.value:
      mesh = mesh_lib.make_mesh(config.mesh)
      arrays = task.model_arrays(train_features.arrays)
      ndims = {k: v.ndim for k, v in arrays.items()}
      bk = task.buckets(config)
      loaders = {
          "off": TrainLoader(arrays, _TRAIN_BATCH.value, seed=0),
          "auto": BucketedTrainLoader(arrays, _TRAIN_BATCH.value, seed=0, lengths=train_lengths,
                                      buckets=bk, length_keys=task.length_keys,
                                      window_batches=config.data.bucket_window_batches)}
      steps = max(len(train_lengths) // _TRAIN_BATCH.value, 1)
      with jax.set_mesh(mesh):
        states = {}
        for spec in loaders:
          m = task.build_model(config, nnx.Rngs(0))
          tx, _ = optim.make_optimizer(config.optim, 10_000)
          states[spec] = step_lib.create_sharded_state(
              m, nnx.Optimizer(m, tx, wrt=nnx.Param), mesh, config.mesh.rules, ndims)
        ttimes = {"off": [], "auto": []}

        def epoch(spec):
          s = states[spec]
          t = time.perf_counter()
          out = None
          for _ in range(steps):
            s.state, out = s.train_step(s.state, placement.global_batch(next(loaders[spec]),
                                                                        mesh))
          jax.block_until_ready(out)
          return time.perf_counter() - t
        # Warm-up: an epoch each, and every bucket's shape compiled (compilation excluded).
        for spec in loaders:
          epoch(spec)
        full = {k: v[:_TRAIN_BATCH.value] for k, v in arrays.items()}
        full["example_mask"] = np.ones(_TRAIN_BATCH.value, np.float32)
        s = states["auto"]
        for L in bk:
          s.state, _ = s.train_step(s.state, placement.global_batch(
              buckets.trim(full, L, task.length_keys), mesh))
        for _ in range(_ROUNDS.value):
          for spec in loaders:
            ttimes[spec].append(epoch(spec))
        best = {k: min(v) for k, v in ttimes.items()}
        ex = steps * _TRAIN_BATCH.value
        rows.append((length, f"train ({steps} steps x {_TRAIN_BATCH.value})", ex / best["off"],
                     ex / best["auto"], "ex/s", states["off"].train_step._cache_size(),
                     states["auto"].train_step._cache_size()))
        print(f"train: off {best['off']:.2f} s, auto {best['auto']:.2f} s per epoch "
              f"({best['off'] / best['auto']:.2f}x)")

  print(f"\n{'length':>6}  {'what':<26} {'off':>9} {'auto':>9} {'unit':<5} {'ratio':>6} "
        f"{'shapes off/auto':>15}")
  for length, what, off, auto, unit, s_off, s_auto in rows:
    print(f"{length:>6}  {what:<26} {off:>9.2f} {auto:>9.2f} {unit:<5} {auto / off:>5.2f}x "
          f"{s_off:>7}/{s_auto}")


if __name__ == "__main__":
  app.run(main)
