"""Does evaluation's memory stay flat as the evaluated split grows? `--mode=eval` at two sizes.

  NLTK_DATA=../shared/data/nltk_data nice python bench/eval_scale.py \
      [--sizes=2000,8000] [--before=/path/to/a/checkout/before/streaming] [--out=/tmp/es]

Trains ``configs/squad2.py:tiny`` for one step (on 48 questions of the shared subset), then, for
each size N, writes SQuAD 2.0 with N questions (the subset's articles repeated under new ids,
`bench.data_scale.write_squad`), prepares its feature shards (``--mode=prepare``, not measured),
and runs ``--mode=eval`` on it, measuring the peak RSS of the evaluation (summed over the
process tree, sampled every 0.1 s) and its wall time. Evaluation predicts, decodes and scores
one feature shard at a time (``data.records_per_shard``, default 1024), so its peak should not
grow with N. ``--before``: a checkout of the code before streaming evaluation (which held every
window's outputs, features and records at once); its ``--mode=eval`` on the same shards and
checkpoint is measured beside, and the two runs' prediction files are compared byte for byte.
Prints ONE table. Not a test.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.data_scale import SQUAD, run_measured, write_squad  # noqa: E402

FILES = ("predictions.json", "nbest_predictions.json", "null_odds.json", "gold.json")


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--sizes", default="2000,8000")
  ap.add_argument("--before", default="", help="a checkout before streaming evaluation")
  ap.add_argument("--out", default="/tmp/eval_scale")
  args = ap.parse_args()
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  work = out / "work"
  common = ["--config=configs/squad2.py:tiny", f"--workdir={work}",
            "--config.data.max_eval_examples=-1", "--config.data.skip_eval_examples=0"]
  run_measured([*common, "--mode=train", f"--config.data.train_file={SQUAD}",
                "--config.data.max_train_examples=48", "--config.train.max_steps=1",
                "--config.train.export_best=false"])
  codes = [("streamed", ROOT)] + ([("before", pathlib.Path(args.before))] if args.before else [])
  rows = []
  for n in [int(s) for s in args.sizes.split(",") if s]:
    path = out / f"squad2-{n}.json"
    n = write_squad(path, n)
    data = [f"--config.data.train_file={SQUAD}", f"--config.data.eval_file={path}"]
    run_measured([*common, *data, "--mode=prepare"])
    row = {"n": n}
    for name, code in codes:
      wall, rss, _ = run_measured([*common, *data, "--mode=eval",
                                f"--output_dir={out / f'{name}-{n}'}"], code)
      row[name] = (rss, wall)
    if args.before:
      row["same_files"] = all(filecmp.cmp(out / f"streamed-{n}" / f, out / f"before-{n}" / f,
                                          shallow=False) for f in FILES)
    rows.append(row)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
  head = ["questions"] + [f"{name}: peak RSS (MB), eval s" for name, _ in codes] + (
      ["before / streamed RSS", "same files"] if args.before else []) + ["RSS / smallest N"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [f"{r['n']:,}"] + [f"{r[name][0]:,.0f}, {r[name][1]:.0f}" for name, _ in codes]
    if args.before:
      cells += [f"{r['before'][0] / r['streamed'][0]:.2f}x", "yes" if r["same_files"] else "NO"]
    cells.append(" / ".join(f"{name} {r[name][0] / rows[0][name][0]:.2f}x" for name, _ in codes))
    lines.append("| " + " | ".join(cells) + " |")
  print("\n".join(lines))


if __name__ == "__main__":
  main()
