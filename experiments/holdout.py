"""A held-out split carved from the training data, for choosing hyper-parameters.

  python experiments/holdout.py --train_file=../shared/data/dream/train.json --fraction=0.1 \
      --out=DIR

writes ``DIR/train.<ext>`` and ``DIR/holdout.<ext>`` and prints them. Hyper-parameters must be
chosen on such a split, never on the articles that are finally evaluated (POI-Net, DUMA and QOPN
report dev/test scores; a setting picked on them overstates the score). `experiments/ablation.py
--holdout=F` calls :func:`carve` and passes the two files as ``data.train_file``/``eval_file``.

Grouping: whole passages go to one side, so that no passage (and none of its questions) is on both:

* SQuAD format (``{"version", "data": [article, ...]}``; SQuAD 1.1/2.0, NLQuAD; also NewsQA's
  combined JSON, one story per item): by article;
* DREAM format (a JSON list of ``[dialogue, questions, id]``): by dialogue;
* a JSON-lines file (``.jsonl``/``.jsonl.gz``; NQ): by line (one page per line);
* a RACE directory (``*/*.txt``, one passage per file): by file (symbolic links in two directories).

The held-out groups are the ``round(fraction * n)`` (at least 1, at most n - 1) groups whose
SHA-1 of ``seed:key`` is smallest (key: the article's title, or the story's ``storyId``, and
index; the dialogue's id; the line's ``example_id``; the file's path): the same file gives the
same split on every machine.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os


def _held_out(keys: list[str], fraction: float, seed: int, source: str) -> set[int]:
  """Indices of the held-out groups (see the module docstring)."""
  if not 0.0 < fraction < 1.0:
    raise ValueError(f"holdout fraction must be in (0, 1), got {fraction}")
  n = len(keys)
  if n < 2:
    raise ValueError(f"{source}: {n} passage(s); a holdout split needs at least 2")
  k = min(max(round(fraction * n), 1), n - 1)
  order = sorted(range(n), key=lambda i: (hashlib.sha1(f"{seed}:{keys[i]}".encode()).hexdigest(),
                                          i))
  return set(order[:k])


def _write_text(path: str, text: str) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.write(text)
  os.replace(tmp, path)


def _split(items: list, keys: list[str], fraction, seed, source):
  held = _held_out(keys, fraction, seed, source)
  return ([x for i, x in enumerate(items) if i not in held],
          [x for i, x in enumerate(items) if i in held])


def _carve_json(path, out_dir, fraction, seed):
  with open(path) as f:
    data = json.load(f)
  if isinstance(data, dict) and isinstance(data.get("data"), list):  # SQuAD format
    # NewsQA's stories have a storyId where SQuAD's articles have a title: a story and the same
    # passage in SQuAD format (the QOPN-vs-window pairs of experiments/ablation_data.py) land on
    # the same side
    keys = [str(a.get("title", a.get("storyId", i))) + f"#{i}" for i, a in enumerate(data["data"])]
    train, held = _split(data["data"], keys, fraction, seed, path)
    wrap = lambda arts: dict(data, data=arts)
  elif isinstance(data, list) and all(isinstance(d, list) and len(d) == 3 for d in data):  # DREAM
    keys = [str(d[2]) for d in data]
    train, held = _split(data, keys, fraction, seed, path)
    wrap = lambda items: items
  else:
    raise ValueError(f"{path}: neither SQuAD format (a 'data' list of articles) nor DREAM format "
                     "(a list of [dialogue, questions, id]); holdout cannot group it by passage")
  outs = []
  for name, part in (("train", train), ("holdout", held)):
    outs.append(os.path.join(out_dir, f"{name}.json"))
    _write_text(outs[-1], json.dumps(wrap(part)))
  return tuple(outs)


def _carve_jsonl(path, out_dir, fraction, seed):
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "rt") as f:
    lines = [l for l in f if l.strip()]
  keys = [str(json.loads(l).get("example_id", i)) for i, l in enumerate(lines)]
  ext = ".jsonl.gz" if path.endswith(".gz") else ".jsonl"
  outs = []
  for name, part in zip(("train", "holdout"), _split(lines, keys, fraction, seed, path)):
    outs.append(os.path.join(out_dir, name + ext))
    tmp = outs[-1] + ".tmp"
    with opener(tmp, "wt") as f:
      f.writelines(part)
    os.replace(tmp, outs[-1])
  return tuple(outs)


def _carve_dir(path, out_dir, fraction, seed):
  files = sorted(os.path.relpath(os.path.join(d, f), path)
                 for d, _, fs in os.walk(path) for f in fs if f.endswith(".txt"))
  if not files:
    raise ValueError(f"{path}: a directory without *.txt passages (RACE layout expected)")
  outs = []
  for name, part in zip(("train", "holdout"), _split(files, files, fraction, seed, path)):
    outs.append(os.path.join(out_dir, name))
    for rel in part:
      dst = os.path.join(outs[-1], rel)
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      if not os.path.lexists(dst):
        os.symlink(os.path.abspath(os.path.join(path, rel)), dst)
  return tuple(outs)


def carve(train_file: str, out_dir: str, fraction: float, seed: int = 0) -> tuple[str, str]:
  """Writes ``(train, holdout)`` carved from ``train_file`` into ``out_dir``; returns their paths."""
  if not os.path.exists(train_file):
    raise FileNotFoundError(f"holdout: training data {train_file!r} does not exist")
  os.makedirs(out_dir, exist_ok=True)
  if os.path.isdir(train_file):
    return _carve_dir(train_file, out_dir, fraction, seed)
  if train_file.endswith((".jsonl", ".jsonl.gz")):
    return _carve_jsonl(train_file, out_dir, fraction, seed)
  return _carve_json(train_file, out_dir, fraction, seed)


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--train_file", required=True)
  p.add_argument("--fraction", type=float, default=0.1)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", required=True)
  a = p.parse_args()
  print(*carve(a.train_file, a.out, a.fraction, a.seed), sep="\n")
