"""experiments/claims.py: the paired interval on known inputs, the verdicts, merging a run's seeds
into docs/claims.json, and the committed file itself (every claim names cells its measurement
has)."""
import json
import math
import pathlib

import pytest

from experiments import claims

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_paired_interval_on_known_inputs():
  # Differences 1, 2, 3: mean 2, sample sd 1, t(0.975, 2 df) = 4.302653 (statistical tables).
  mean, lo, hi, n = claims.paired_interval({"0": 11, "1": 22, "2": 33}, {"0": 10, "1": 20, "2": 30})
  half = 4.302653 / math.sqrt(3)
  assert (mean, n) == (2, 3)
  assert lo == pytest.approx(2 - half, abs=1e-5) and hi == pytest.approx(2 + half, abs=1e-5)
  # Only the seeds both cells ran are paired; one pair has no spread to measure.
  assert claims.paired_interval({"0": 5.0, "7": 1.0}, {"0": 4.0, "3": 9.0}) == (1.0, None, None, 1)


@pytest.mark.parametrize("lo,hi,want", [(0.5, 2.0, "consistent with the paper"),
                                        (-3.0, -0.1, "opposite"),
                                        (-1.0, 1.0, "not resolved at this scale")])
def test_verdicts(lo, hi, want):
  assert claims.verdict(lo, hi) == want


def _ablation(seeds, config="configs/squad2.py:minilm", extra=("--x=1",)):
  return {"config": config, "extra": list(extra), "metrics": ["f1"],
          "cells": [{"cell": "a", "overrides": [["model.head", "poi"]],
                     "seeds": [{"seed": s, "step": 9, "wall_s": 1.0, "f1": v} for s, v in seeds]}]}


def test_merge_adds_seeds_and_refuses_other_settings(tmp_path):
  data = {"claims": [], "measurements": {}}
  meta = dict(command="c", device="d", date="2026-11-25", software="s")
  claims.merge(data, "m", _ablation([(0, 50.0), (1, 51.0)]), **meta)
  claims.merge(data, "m", _ablation([(1, 52.0), (2, 53.0)]), **meta)  # a resumed, longer sweep
  assert {s: v["f1"] for s, v in data["measurements"]["m"]["cells"]["a"]["seeds"].items()} == {
      "0": 50.0, "1": 52.0, "2": 53.0}
  with pytest.raises(ValueError, match="another setting is another measurement"):
    claims.merge(data, "m", _ablation([(3, 1.0)], extra=("--x=2",)), **meta)
  path = tmp_path / "claims.json"
  assert claims.main(["table", f"--claims={path}"]) == 0  # no file yet: an empty table


def test_the_committed_claims_name_cells_that_were_run():
  data = json.loads((ROOT / "docs" / "claims.json").read_text())
  for c in data["claims"]:
    for cell, measurement in ((c["component"], c["measurement"]),
                              (c["ablation"], c.get("ablation_measurement", c["measurement"]))):
      m = data["measurements"].get(measurement)
      if m is not None:  # a measured claim: both cells there, each seed with its metric
        assert cell in m["cells"], f"{c['id']}: {measurement} has no cell {cell}"
        assert all(c["metric"] in s for s in m["cells"][cell]["seeds"].values())
  # The results page shows the table this file gives (regenerate:
  # python experiments/claims.py table).
  assert claims.table(data) in (ROOT / "docs" / "results.md").read_text()
