"""The slow suite's data sets as files, for `experiments/ablation.py` runs (docs/ablations.md).

  python experiments/ablation_data.py --out=DIR [--shared=../shared/data] [--only=squad2,qopn,nq]
                                                              # (or qopncpu, qopncpusel)

writes, from ../shared/data/squad2/squad2-dev-subset.json (12 Wikipedia articles), exactly what the
slow tests build in their temporary directories:

* ``squad2/{train,eval}.json``: articles 0-8 -> 9-11 (`tests/slow/test_real_results.py`);
* ``qopn/{newsqa-train,newsqa-dev}.json`` and ``qopn/{squad-train,squad-dev}.json``: 6-paragraph
  long articles of articles 0-8 -> 9-11, answerable questions, in NewsQA and SQuAD v1.1 format
  (`tests/slow/test_qopn_vs_sliding_window.py`);
* ``qopncpu/...``: the same four files of 2-paragraph articles, articles 0-6 -> 9-11: the CPU-sized
  `qopn` (docs/ablations.md; chosen on a pilot that evaluated articles 7-8);
* ``qopncpusel/...``: the same of articles 0, 2, 3, 4, 6 -> 1 and 5: ``qopncpu``'s training
  articles, less the two that ``squad1cpusel`` held out, scored on those two (the selection
  stage of issue 50's "each arm at its best"; articles 9-11 are never read);
* ``nq/{train,dev}.jsonl.gz``: synthetic NQ pages of articles 0-9 (400) -> 10-11 (80)
  (`tests/slow/test_nq_minilm.py`).

DREAM needs no preparation (``dream/train.json`` -> ``dream/dev.json`` as they are). Prints the
files written.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from experiments import holdout  # noqa: E402
from tests.data import nq_synthetic, qopn_fixtures  # noqa: E402  (the slow tests' builders)


def selection_articles(squad: pathlib.Path) -> list[int]:
  """The indices of the two articles ``squad1cpusel`` held out of articles 0-8
  (`experiments/holdout.py`, fraction 0.2, seed 0: Computational complexity theory and European
  Union law), which ``qopncpusel`` holds out of ``qopncpu``'s training articles 0-6, so that both
  CPU selections score on the same held-out Wikipedia articles."""
  titles = [a["title"] for a in json.loads(squad.read_text())["data"][:9]]
  held = sorted(holdout._held_out([f"{t}#{i}" for i, t in enumerate(titles)], 0.2, 0, str(squad)))
  if not all(i < 7 for i in held):
    raise ValueError(f"{squad}: squad1cpusel's held-out articles {held} are not all among "
                     "qopncpu's training articles 0-6")
  return held


def write(out: pathlib.Path, shared: pathlib.Path, only: set[str]) -> list[str]:
  squad = shared / "squad2" / "squad2-dev-subset.json"
  written = []
  if "squad2" in only:
    (out / "squad2").mkdir(parents=True, exist_ok=True)
    data = json.loads(squad.read_text())
    for name, arts in (("train", data["data"][:9]), ("eval", data["data"][9:])):
      path = out / "squad2" / f"{name}.json"
      path.write_text(json.dumps({"version": "v2.0", "data": arts}))
      written.append(str(path))
  held = selection_articles(squad)
  for name, paragraphs, train_articles, dev_articles in (
      ("qopn", 6, range(0, 9), range(9, 12)), ("qopncpu", 2, range(0, 7), range(9, 12)),
      ("qopncpusel", 2, [i for i in range(0, 7) if i not in held], held)):
    if name not in only:
      continue
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    train, dev = ([chunk for i in articles for chunk in qopn_fixtures.long_articles(
        squad, paragraphs_per_article=paragraphs, articles=(i, i + 1))]
        for articles in (train_articles, dev_articles))
    written += [qopn_fixtures.write_newsqa(d / "newsqa-train.json", train, "train"),
                qopn_fixtures.write_newsqa(d / "newsqa-dev.json", dev, "dev"),
                qopn_fixtures.write_nlquad(d / "squad-train.json", train),
                qopn_fixtures.write_nlquad(d / "squad-dev.json", dev)]
  if "nq" in only:
    (out / "nq").mkdir(parents=True, exist_ok=True)
    train = nq_synthetic.page_examples(str(squad), articles=range(0, 10), max_examples=400)
    dev = nq_synthetic.page_examples(str(squad), articles=range(10, 12), max_examples=80,
                                     start_id=900000)
    written += [nq_synthetic.write_jsonl_gz(out / "nq" / "train.jsonl.gz", train),
                nq_synthetic.write_jsonl_gz(out / "nq" / "dev.jsonl.gz", dev)]
  return [str(w) for w in written]


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", required=True)
  p.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
  p.add_argument("--only", default="squad2,qopn,nq")
  a = p.parse_args()
  print(*write(pathlib.Path(a.out), pathlib.Path(a.shared), set(a.only.split(","))), sep="\n")
