r"""The learning-rate curve of DREAM's POI-Net vs its encoder (docs/results.md), from
docs/claims.json: held-out accuracy of the selection stage (left) and dev accuracy (right), each
seed a dot and the mean a line, both arms.

  pip install -c constraints.txt -e ".[plots]"
  python experiments/plot_lr.py            # writes docs/figures/dream_lr.svg

Dev scores come from every train -> dev run at one rate with the `dream` settings: the rates no
protocol chose (`dreamlr`), the shared-setting cells at 5e-5 (`dream1`, `dream2`) and POI-Net at
its chosen 3e-5 (`dreambest`).
"""
from __future__ import annotations

import collections
import json
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARMS = {"plain encoder": ("none", "false"), "POI-Net": ("poi", "true")}
COLOURS = {"plain encoder": "#1f77b4", "POI-Net": "#d62728"}
DEV = ("dreamlr", "dream1", "dream2", "dreambest")


def dev_scores(data: dict) -> dict[str, dict[float, list[float]]]:
  """arm -> rate -> the dev accuracy of every seed run at it (the `dream` settings)."""
  sys.path.insert(0, str(ROOT / "experiments"))
  import claims
  out = {arm: collections.defaultdict(list) for arm in ARMS}
  for name in DEV:
    m = data["measurements"].get(name, {})
    for cell, rec in m.get("cells", {}).items():
      flags = [*rec["overrides"], *m["settings"]["extra"]]
      for arm, (head, pos) in ARMS.items():
        if (f"--config.model.head={head}" in flags and f"--config.model.pos_embedding={pos}"
            in flags):
          lr = float(claims.ran_at(data, name, cell, "optim.lr"))
          out[arm][lr] += [s["accuracy"] for s in rec["seeds"].values()]
  return out


def main() -> int:
  import matplotlib
  matplotlib.use("svg")
  import matplotlib.pyplot as plt
  plt.rcParams["svg.hashsalt"] = "poi-jax"  # the same file for the same numbers
  data = json.loads((ROOT / "docs" / "claims.json").read_text())
  sel = data["selections"]["dreamsel"]
  fig, (held, dev) = plt.subplots(1, 2, figsize=(9, 3.6), sharey=False)
  for arm in ARMS:
    c = COLOURS[arm]
    pts = sorted((float(v), statistics.fmean(s.values())) for v, s in
                 sel["arms"][arm]["scores"].items())
    held.plot(*zip(*pts), "o-", color=c, label=arm)
    chosen = float(sel["choice"][arm])
    held.plot([chosen], [dict(pts)[chosen]], "*", color=c, markersize=14)
    runs = dev_scores(data)[arm]
    for lr, accs in runs.items():
      dev.plot([lr] * len(accs), accs, ".", color=c, alpha=0.6)
    means = sorted((lr, statistics.fmean(a)) for lr, a in runs.items())
    dev.plot(*zip(*means), "-", color=c, label=f"{arm} (mean)")
  held.set_title("selection: 10% of training dialogues held out\n(seed 0; star = the choice)",
                 fontsize=9)
  dev.set_title("DREAM dev (dots: seeds; line: mean)", fontsize=9)
  for ax in (held, dev):
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.suptitle("DREAM, all-MiniLM-L6-v2, 3 epochs, 256 tokens, batch 16 (H200)", fontsize=10)
  fig.tight_layout()
  out = ROOT / "docs" / "figures" / "dream_lr.svg"
  fig.savefig(out, metadata={"Date": None})
  print(f"wrote {out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
