r"""The learning-rate curves of the claims measured with each arm at its best (docs/results.md),
from docs/claims.json: the selection stage's held-out score (left) and the evaluation set's
(right), each seed a dot and the mean a line, every arm.

  pip install -c constraints.txt -e ".[plots]"
  python experiments/plot_lr.py                    # every figure of `FIGURES`
  python experiments/plot_lr.py --figure=dream     # docs/figures/dream_lr.svg only

Evaluation scores come from every train -> evaluation run of an arm at one rate with the
figure's settings, whichever protocol ran it: for DREAM the rates no protocol chose (`dreamlr`),
the shared-setting cells at 5e-5 (`dream1`, `dream2`) and POI-Net at its chosen 3e-5
(`dreambest`); for the CPU task the shared cells at 1e-4 (`squad1cpu`) and each arm at its
choice (`squad1cpubest`); for DREAM at CPU size each arm at its choice (`dreamcpubest`: one rate
an arm, so its right panel is a mark per arm, not a curve).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


@dataclasses.dataclass(frozen=True)
class Figure:
  selection: str  # its record in claims.json's "selections"
  arms: dict[str, tuple[str, str]]  # label -> (model.head, model.pos_embedding)
  evaluation: tuple[str, ...]  # the measurements whose runs give the right panel
  metric: str
  label: str  # the metric's axis label
  held_title: str
  eval_title: str
  title: str


FIGURES = {
    "dream": Figure(
        selection="dreamsel", arms={"plain encoder": ("none", "false"),
                                    "POI-Net": ("poi", "true")},
        evaluation=("dreamlr", "dream1", "dream2", "dreambest"), metric="accuracy",
        label="accuracy (%)",
        held_title="selection: 10% of training dialogues held out\n(seed 0; star = the choice)",
        eval_title="DREAM dev (dots: seeds; line: mean)",
        title="DREAM, all-MiniLM-L6-v2, 3 epochs, 256 tokens, batch 16 (H200)"),
    "squad1cpu": Figure(
        selection="squad1cpusel", arms={"plain encoder": ("none", "false"),
                                        "co-attention, no POS": ("poi", "false"),
                                        "POI-Net": ("poi", "true")},
        evaluation=("squad1cpu", "squad1cpubest"), metric="f1", label="F1",
        held_title="selection: 2 of 9 training articles held out\n(mean of the selection seeds; "
                   "star = the choice)",
        eval_title="601 questions of articles 10-12 (dots: seeds; line: mean)",
        title="SQuAD 1.1-style CPU task, all-MiniLM-L6-v2, 150 steps, batch 16, 192 tokens "
              "(2-core CPU)"),
    "dreamcpu": Figure(
        selection="dreamcpusel", arms={"plain encoder": ("none", "false"),
                                       "POI-Net": ("poi", "true"),
                                       # declared later (session 64): drawn once selected
                                       "DUMA": ("duma", "false"),
                                       "co-attention, no POS": ("poi", "false"),
                                       "POS, no co-attention": ("none", "true")},
        evaluation=("dreamcpubest",), metric="accuracy", label="accuracy (%)",
        held_title="selection: 10% of training dialogues held out\n(seed 0; star = the choice)",
        eval_title="DREAM dev, each arm at its choice (dots: seeds; mark: mean)",
        title="DREAM at CPU size, all-MiniLM-L6-v2, 2 epochs, 128 tokens, batch 16 "
              "(2-core CPU)"),
}


def dev_scores(data: dict, figure: str = "dream") -> dict[str, dict[float, list[float]]]:
  """arm -> rate -> the evaluation score of every seed run at it (the figure's settings); an
  arm with no run yet is left out."""
  sys.path.insert(0, str(ROOT / "experiments"))
  import claims
  fig = FIGURES[figure]
  out = {arm: collections.defaultdict(list) for arm in fig.arms}
  for name in fig.evaluation:
    m = data["measurements"].get(name, {})
    for cell, rec in m.get("cells", {}).items():
      flags = [*rec["overrides"], *m["settings"]["extra"]]
      for arm, (head, pos) in fig.arms.items():
        if (f"--config.model.head={head}" in flags and f"--config.model.pos_embedding={pos}"
            in flags):
          lr = float(claims.ran_at(data, name, cell, "optim.lr"))
          out[arm][lr] += [s[fig.metric] for s in rec["seeds"].values()]
  return {arm: runs for arm, runs in out.items() if runs}


def plot(data: dict, name: str, out_dir: pathlib.Path = ROOT / "docs" / "figures") -> pathlib.Path:
  import matplotlib
  matplotlib.use("svg")
  import matplotlib.pyplot as plt
  import matplotlib.ticker
  plt.rcParams["svg.hashsalt"] = "poi-jax"  # the same file for the same numbers
  fig_spec = FIGURES[name]
  sel = data["selections"][fig_spec.selection]
  fig, (held, dev) = plt.subplots(1, 2, figsize=(9, 3.6), sharey=False)
  runs_by_arm = dev_scores(data, name)
  for arm, c in zip(fig_spec.arms, COLOURS):
    if arm not in sel["arms"]:  # declared, not selected yet
      continue
    pts = sorted((float(v), statistics.fmean(s.values())) for v, s in
                 sel["arms"][arm]["scores"].items())
    held.plot(*zip(*pts), "o-", color=c, label=arm)
    chosen = float(sel["choice"][arm])
    held.plot([chosen], [dict(pts)[chosen]], "*", color=c, markersize=14)
    runs = runs_by_arm.get(arm, {})
    if not runs:  # selected, not evaluated yet: nothing to draw on the right
      continue
    for lr, scores in runs.items():
      dev.plot([lr] * len(scores), scores, ".", color=c, alpha=0.6)
    means = sorted((lr, statistics.fmean(a)) for lr, a in runs.items())
    # a line through two or more rates; one rate gets a mark (a line of one point draws nothing)
    dev.plot(*zip(*means), "-" if len(means) > 1 else "_", color=c, markersize=16,
             label=f"{arm} (mean)")
  held.set_title(fig_spec.held_title, fontsize=9)
  dev.set_title(fig_spec.eval_title, fontsize=9)
  held_rates = sorted({float(v) for arm in fig_spec.arms for v in
                       sel["arms"].get(arm, {}).get("scores", {})})
  dev_rates = sorted({lr for runs in runs_by_arm.values() for lr in runs})
  for ax, rates in ((held, held_rates), (dev, dev_rates)):
    ax.set_xscale("log")
    # ticks at the rates run, named as the configs write them (log axes label minor ticks
    # over less than a decade, on top of one another)
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks(rates, [f"{r:.0e}".replace("e-0", "e-") for r in rates])  # 5e-5, 1e-4
    ax.tick_params(axis="x", labelsize=7)  # 8e-5 and 1e-4 sit close on a log axis
    ax.margins(x=0.15)
    ax.set_xlabel("learning rate")
    ax.set_ylabel(fig_spec.label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle(fig_spec.title, fontsize=10)
  fig.tight_layout()
  out = out_dir / f"{name}_lr.svg"
  tmp = out.with_name(f".{out.name}.tmp")  # written whole, then renamed: never half a figure
  fig.savefig(tmp, format="svg", metadata={"Date": None})
  plt.close(fig)
  os.replace(tmp, out)
  return out


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--figure", choices=sorted(FIGURES), action="append",
                 help="one figure (repeatable); default: every one")
  args = p.parse_args(argv)
  data = json.loads((ROOT / "docs" / "claims.json").read_text())
  for name in args.figure or FIGURES:
    print(f"wrote {plot(data, name)}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
