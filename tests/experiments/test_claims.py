"""experiments/claims.py: the paired interval on known inputs, the verdicts, merging a run's seeds
into docs/claims.json, and the committed file itself (every claim names cells its measurement
has)."""
import json
import math
import pathlib
import re

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
  assert claims.verdict(lo, hi, 3) == want


def test_no_verdict_before_three_paired_seeds():
  # DUMA's first two dreamcpubest seeds: 991 and 972 of 2,040 right against the encoder's 909
  # and 890, the same 82 questions both times, so the two-seed interval has width 0.
  comp = {"0": 100 * 991 / 2040, "1": 100 * 972 / 2040}
  abl = {"0": 100 * 909 / 2040, "1": 100 * 890 / 2040}
  mean, lo, hi, n = claims.paired_interval(comp, abl)
  assert n == 2 and hi - lo == pytest.approx(0, abs=1e-9) and lo > 0
  assert claims.verdict(lo, hi, n) == "not resolved (fewer than 3 paired seeds)"
  assert claims.verdict(None, None, 1) == "not resolved (fewer than 3 paired seeds)"
  assert claims.chance_verdict(lo, hi, 2) == "not resolved (fewer than 3 seeds)"


def test_chance_interval_and_verdicts():
  # Scores 24, 25, 29 against guessing 25: differences -1, 0, 4, mean 1, sample sd sqrt(7).
  gain, lo, hi, n = claims.chance_interval({"0": 24.0, "1": 25.0, "2": 29.0}, 25.0)
  half = 4.302653 * math.sqrt(7) / math.sqrt(3)
  assert (gain, n) == (1.0, 3)
  assert lo == pytest.approx(1 - half, abs=1e-5) and hi == pytest.approx(1 + half, abs=1e-5)
  assert claims.chance_verdict(lo, hi, n) == "not above guessing"
  assert claims.chance_verdict(0.2, 3.0, 3) == "above guessing"
  assert claims.chance_verdict(-3.0, -0.2, 5) == "below guessing"
  assert claims.chance_verdict(None, None, 1) == "not resolved (fewer than 3 seeds)"


def test_a_claim_with_chance_says_both_verdicts():
  # The component beats a baseline that falls below guessing, and is itself at guessing: the
  # table must say both, not only "consistent with the paper".
  data = {"claims": [{"id": "p", "claim": "c", "paper": "p", "setting": "s", "metric": "f1",
                      "measurement": "m", "component": "a", "component_label": "QOPN",
                      "ablation": "b", "ablation_label": "window", "chance": 25.0}],
          "measurements": {"m": {"command": "x", "device": "d", "date": "t", "cells": {
              "a": {"seeds": {"0": {"f1": 24.0}, "1": {"f1": 25.0}, "2": {"f1": 26.0}}},
              "b": {"seeds": {"0": {"f1": 10.0}, "1": {"f1": 10.5}, "2": {"f1": 9.0}}}}}}}
  row = claims.table(data).splitlines()[-1]
  assert ("| not shown: above the window, not above guessing; QOPN vs guessing (25.0): +0.00 ["
          in row)
  assert "(n=3), not above guessing |" in row
  # Every seed's score stands in its cell, in seed order, beside the mean.
  assert "| QOPN: 25.00 ± 1.00 (n=3; seeds 0-2: 24.00, 25.00, 26.00) |" in row
  assert "| window: 9.83 ± 0.76 (n=3; seeds 0-2: 10.00, 10.50, 9.00) |" in row
  # Above guessing too: the paper's claim holds on the probe.
  data["measurements"]["m"]["cells"]["a"]["seeds"] = {"0": {"f1": 40.0}, "1": {"f1": 42.0},
                                                      "2": {"f1": 41.0}}
  assert "| consistent with the paper; QOPN vs guessing (25.0): +16.00 [" in claims.table(data)


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


def test_an_arm_merged_later_keeps_its_own_command_device_and_date():
  # the encoder and POI-Net ran first on one machine; DUMA, declared later, on another
  data = {"claims": [], "measurements": {}}
  first = dict(command="ENC_LR=1e-4 ...", device="Xeon", date="11-28", software="s")
  abl = _ablation([(0, 50.0)])
  abl["cells"].append({"cell": "enc", "overrides": [], "seeds": [
      {"seed": 0, "step": 9, "wall_s": 1.0, "f1": 48.0}]})
  claims.merge(data, "m", abl, **first)
  later = dict(command="DUMA_LR=1e-4 ...", device="EPYC", date="12-07", software="s")
  duma = {**_ablation([(0, 52.0)]), "cells": [{"cell": "duma", "overrides": [], "seeds": [
      {"seed": 0, "step": 9, "wall_s": 1.0, "f1": 52.0}]}]}
  claims.merge(data, "m", duma, **later, added=True)
  m = data["measurements"]["m"]
  assert (m["command"], m["device"], m["date"]) == ("ENC_LR=1e-4 ...", "Xeon", "11-28")
  assert m["cells"]["duma"]["provenance"]["device"] == "EPYC"
  # its next seed, merged without the flag, stays its own; a first arm's seed updates the shared
  duma["cells"][0]["seeds"][0]["seed"] = 1
  claims.merge(data, "m", duma, **dict(later, date="12-08"))
  assert m["cells"]["duma"]["provenance"]["date"] == "12-08" and m["date"] == "11-28"
  assert "provenance" not in m["cells"]["enc"] and "provenance" not in m["cells"]["a"]
  with pytest.raises(ValueError, match="one of its first arms"):
    claims.merge(data, "m", abl, **later, added=True)
  data["claims"] = [
      dict(claim="DUMA beats its encoder", paper="p", setting="t", metric="f1", id="x",
           measurement="m", component="duma", component_label="DUMA", ablation="enc",
           ablation_label="plain encoder"),
      dict(claim="POI-Net beats its encoder", paper="p", setting="t", metric="f1", id="y",
           measurement="m", component="a", component_label="POI-Net", ablation="enc",
           ablation_label="plain encoder")]
  rows = claims.table(data).splitlines()
  assert rows[2].endswith("| DUMA: `DUMA_LR=1e-4 ...`, EPYC, 12-08; plain encoder: "
                          "`ENC_LR=1e-4 ...`, Xeon, 11-28 |")
  assert rows[3].endswith("| `ENC_LR=1e-4 ...`, Xeon, 11-28 |")


def test_the_merge_command_rewrites_claims_json_whole_and_readable(tmp_path):
  # the file as kept in git (indent 1, sorted keys, a final newline), with the permissions a
  # plain write gives: a temporary file's 0600 must not reach the committed file
  import os
  from poi_jax.io import default_mode
  path, abl = tmp_path / "claims.json", tmp_path / "ablation.json"
  abl.write_text(json.dumps(_ablation([(0, 50.0)])))
  assert claims.main(["merge", f"--claims={path}", "--measurement=m", f"--ablation={abl}",
                      "--command=c", "--date=2026-11-27", "--device=d"]) == 0
  text = path.read_text()
  assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
  assert os.stat(path).st_mode & 0o777 == default_mode()
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_the_committed_claims_name_cells_that_were_run():
  data = json.loads((ROOT / "docs" / "claims.json").read_text())
  declared = (ROOT / "experiments" / "ablations.sh").read_text()
  for c in data["claims"]:
    for cell, measurement, label in (
        (c["component"], c["measurement"], c["component_label"]),
        (c["ablation"], c.get("ablation_measurement", c["measurement"]), c["ablation_label"])):
      m = data["measurements"].get(measurement)
      if m is not None and cell not in m["cells"]:  # an arm of the measurement not run yet:
        # its name must be one ablations.sh declares (a typo would stay "not measured" forever)
        head, pos, lr = re.fullmatch(
            r"model\.head-(\w+)__model\.pos_embedding-(\w+)(?:__optim\.lr-([\w.-]+))?",
            cell).groups()
        assert f'"model.head={head} model.pos_embedding={pos}"' in declared, (c["id"], cell)
        if lr is not None:  # an arm at its best: at the rate its selection chose for it
          assert data["selections"][c["selection"]]["choice"][label] == lr, (c["id"], cell)
      elif m is not None:  # a measured claim: both cells there, each seed with its metric
        assert all(c["metric"] in s for s in m["cells"][cell]["seeds"].values())
  # The results page shows the table this file gives and each selection's record (make both
  # again: python experiments/claims.py table --write=docs/results.md).
  page = (ROOT / "docs" / "results.md").read_text()
  assert claims.table(data) in page
  for name in data.get("selections", {}):
    assert claims.selection_table(data, name) in page, name
  assert all(c["protocol"] in claims.PROTOCOLS for c in data["claims"])
  # the CPU selections' follow-ups were declared before their runs; `table` checked none is owed
  assert {n for n, s in data["selections"].items() if "followups" in s} == {
      "squad1cpusel", "qopncpusel", "dreamcpusel"}



def test_table_write_makes_the_pages_tables_again_and_keeps_its_text(tmp_path, capsys):
  # a stale claims table and stale selection records (a score changed in each, a row dropped
  # from one) come back as claims.json gives them, the prose around them untouched
  data = json.loads((ROOT / "docs" / "claims.json").read_text())
  fresh = (ROOT / "docs" / "results.md").read_text()
  assert claims.write_page(fresh, data) == fresh
  stale = fresh.replace(claims.table(data), claims.table(data).replace("| POI-Net: ", "| POI: ", 1))
  for name in data["selections"]:
    rec = claims.selection_table(data, name)
    lines = rec.split("\n")
    stale = stale.replace(rec, "\n".join([*lines[:2], *lines[3:]]).replace("Split:", "Held:", 1))
  assert stale != fresh
  page = tmp_path / "results.md"
  page.write_text(stale)
  assert claims.main(["table", f"--write={page}"]) == 0
  assert page.read_text() == fresh
  assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left
  # a page without a selection's record names the page and the selection
  page.write_text(fresh.replace("selection --name=dreamcpusel`):", "selection`):"))
  with pytest.raises(SystemExit):
    claims.main(["table", f"--write={page}"])
  assert f"{page}: no record of selection dreamcpusel" in capsys.readouterr().err

def test_the_learning_rate_curve_reads_every_dev_run():
  from experiments import plot_lr
  runs = plot_lr.dev_scores(json.loads((ROOT / "docs" / "claims.json").read_text()))
  assert {lr: len(a) for lr, a in runs["plain encoder"].items()} == {1e-5: 2, 2e-5: 2, 3e-5: 1,
                                                                     5e-5: 5}
  assert {lr: len(a) for lr, a in runs["POI-Net"].items()} == {1e-5: 2, 2e-5: 2, 3e-5: 6, 5e-5: 5}
  # the CPU task: the shared runs at the config's own 1e-4 (no flag) and each arm at its choice
  runs = plot_lr.dev_scores(json.loads((ROOT / "docs" / "claims.json").read_text()), "squad1cpu")
  assert {arm: {lr: len(a) for lr, a in r.items()} for arm, r in runs.items()} == {
      "plain encoder": {1e-4: 5, 2e-4: 5}, "co-attention, no POS": {1e-4: 5},
      "POI-Net": {1e-4: 5, 2e-4: 5}}
  # DREAM at CPU size: each arm at its choice, every seed merged so far (they merge as they end)
  data = json.loads((ROOT / "docs" / "claims.json").read_text())
  runs = plot_lr.dev_scores(data, "dreamcpu")
  cells = data["measurements"]["dreamcpubest"]["cells"]
  arm_of = {"head-poi": "POI-Net", "head-duma": "DUMA", "head-none": "plain encoder"}
  merged = {next(a for h, a in arm_of.items() if h in c): len(rec["seeds"])
            for c, rec in cells.items()}
  assert {arm: {lr: len(a) for lr, a in r.items()} for arm, r in runs.items()} == {
      "plain encoder": {1e-4: merged["plain encoder"]}, "POI-Net": {5e-5: merged["POI-Net"]},
      "DUMA": {1e-4: merged["DUMA"]}}
  assert merged["plain encoder"] == 5 and merged["POI-Net"] >= 2


def test_an_arm_selected_but_not_yet_evaluated_is_drawn_on_the_left_only(tmp_path):
  # DUMA chose its rate in dreamcpusel; its dreamcpubest seeds merge later. An empty plot call
  # made the right panel's axis categorical and listed DUMA's mean in its legend.
  pytest.importorskip("matplotlib", reason="the figures' optional dependency (.[plots])")
  from experiments import plot_lr
  data = json.loads((ROOT / "docs" / "claims.json").read_text())
  data["measurements"]["dreamcpubest"]["cells"] = {
      c: rec for c, rec in data["measurements"]["dreamcpubest"]["cells"].items()
      if "head-duma" not in c}
  assert "DUMA" in data["selections"]["dreamcpusel"]["arms"]
  svg = plot_lr.plot(data, "dreamcpu", out_dir=tmp_path).read_text()
  assert "<!-- DUMA -->" in svg and "<!-- POI-Net (mean) -->" in svg
  assert "DUMA (mean)" not in svg


def _selection(enc: dict, poi: dict, choice: dict) -> dict:
  return {"key": "optim.lr", "metric": "accuracy", "choice": choice,
          "arms": {"plain encoder": {"scores": enc}, "POI-Net": {"scores": poi}}}


def test_the_selection_rule_reads_held_out_scores_only_and_breaks_ties_low():
  # held-out: the encoder best at 5e-5, POI-Net tied at 2e-5 and 3e-5 (means over two seeds)
  sel = _selection({"2e-5": {"0": 40.0}, "5e-5": {"0": 47.0}, "1e-4": {"0": 44.0}},
                   {"3e-5": {"0": 45.0, "1": 44.0}, "2e-5": {"0": 44.5, "1": 44.5},
                    "5e-5": {"0": 44.0, "1": 44.9}}, {})
  assert claims.choose(sel) == {"plain encoder": "5e-5", "POI-Net": "2e-5"}


def _best_claim_data(poi_lr="3e-5", enc_extra_lr="5e-5", recorded="3e-5"):
  """A `best` claim whose dev scores would pick other rates than the held-out ones did: the
  table must follow the selection record, and refuse a row that ran another rate."""
  sel = _selection({"5e-5": {"0": 47.0}, "1e-5": {"0": 40.0}},
                   {"3e-5": {"0": 46.0}, "1e-5": {"0": 45.0}},
                   {"plain encoder": "5e-5", "POI-Net": recorded})
  sel.update(split_short="held-out", split="s", setting="t", rule="r", declared="d", seeds=[0],
             command="c", device="d", software="s", date="x", source="y")
  cell = lambda overrides, accs: {"overrides": overrides, "seeds": {  # noqa: E731
      str(i): {"accuracy": a} for i, a in enumerate(accs)}}
  return {"selections": {"sel": sel},
          "claims": [{"id": "b", "claim": "POI-Net beats its encoder", "paper": "p", "setting": "s",
                      "protocol": "best", "selection": "sel", "metric": "accuracy",
                      "component": "poi", "component_label": "POI-Net", "measurement": "best",
                      "ablation": "enc", "ablation_label": "plain encoder",
                      "ablation_measurement": "shared"}],
          "measurements": {
              "best": {"command": "c", "device": "d", "date": "x", "settings": {"extra": []},
                       "cells": {"poi": cell([f"--config.optim.lr={poi_lr}"], [43.0, 42.0, 44.0])}},
              "shared": {"command": "c", "device": "d", "date": "x",
                         "settings": {"extra": [f"--config.optim.lr={enc_extra_lr}"]},
                         "cells": {"enc": cell(["--config.optim.lr=1e-5"], [47.0, 48.0, 47.5])}}}}


def test_a_best_row_shows_its_choice_and_refuses_runs_at_another_rate():
  data = _best_claim_data()
  # the measurement's extra flags come after the cell's overrides: 5e-5 is what the encoder ran
  assert claims.ran_at(data, "shared", "enc", "optim.lr") == "5e-5"
  row = claims.table(data).splitlines()[-1]
  assert "each arm at its best (optim.lr chosen on held-out: POI-Net 3e-5, plain encoder 5e-5)" \
      in row and "| opposite |" in row
  with pytest.raises(ValueError, match="POI-Net ran at optim.lr=1e-5, its choice is 3e-5"):
    claims.table(_best_claim_data(poi_lr="1e-5"))
  with pytest.raises(ValueError, match="its rule gives"):
    claims.table(_best_claim_data(recorded="1e-5"))  # a record that is not the rule's choice
  # declared follow-ups not yet run: the encoder chose 5e-5, the grid's declared upper edge
  data["selections"]["sel"]["followups"] = {"within": 0.5, "extend": {"5e-5": "1e-4"}}
  with pytest.raises(ValueError, match=r"still owes plain encoder the runs \{'values': \['1e-4'\]"):
    claims.table(data)
  data["selections"]["sel"]["arms"]["plain encoder"]["scores"]["1e-4"] = {"0": 40.0}
  assert "| opposite |" in claims.table(data).splitlines()[-1]


def _sweep(runs):
  """An ablation.json of a held-out sweep: runs as (head, pos, lr, seed, f1)."""
  cells = {}
  for head, pos, lr, seed, f1 in runs:
    overrides = [f"--config.model.head={head}", f"--config.model.pos_embedding={pos}",
                 f"--config.optim.lr={lr}"]
    row = cells.setdefault((head, pos, lr), {"cell": f"{head}-{pos}-{lr}", "overrides": overrides,
                                             "seeds": []})
    row["seeds"].append({"seed": seed, "step": 150, "wall_s": 1.0, "f1": f1, "exact_match": 0.0})
  return {"config": "configs/squad1.py:minilm_cpu", "extra": [], "cells": list(cells.values())}


ARMS = {"plain encoder": "model.head=none model.pos_embedding=false",
        "POI-Net": "model.pos_embedding=true model.head=poi"}  # order within a cell is free
META = dict(split="two articles", split_short="held-out", setting="s", declared="d",
            command="c", date="x", device="d", software="s", source="y")


def test_select_files_every_run_under_its_arm_and_value_and_chooses_by_the_rule():
  data = {"claims": [], "measurements": {}}
  claims.select(data, "sel", _sweep([("none", "false", "5e-5", 0, 20.0),
                                     ("none", "false", "1e-4", 0, 25.0),
                                     ("poi", "true", "5e-5", 0, 30.0),
                                     ("poi", "true", "1e-4", 0, 28.0)]),
                key="optim.lr", arms=ARMS, metric="f1", meta=META)
  sel = data["selections"]["sel"]
  assert sel["arms"]["POI-Net"]["scores"] == {"5e-5": {"0": 30.0}, "1e-4": {"0": 28.0}}
  assert sel["choice"] == {"plain encoder": "1e-4", "POI-Net": "5e-5"}
  assert sel["seeds"] == [0] and "highest mean held-out f1" in sel["rule"]
  # a second selection seed for POI-Net: the means (29.0 vs 29.0) tie, the smaller rate wins
  claims.select(data, "sel", _sweep([("poi", "true", "5e-5", 1, 28.0),
                                     ("poi", "true", "1e-4", 1, 30.0)]),
                key="optim.lr", arms=ARMS, metric="f1", meta=META)
  assert sel["seeds"] == [0, 1] and sel["choice"]["POI-Net"] == "5e-5"
  unfinished = _sweep([("poi", "true", "4e-4", 0, 0.0)])
  unfinished["cells"][0]["seeds"] = []  # planned, not run: no value of its own
  claims.select(data, "sel", unfinished, key="optim.lr", arms=ARMS, metric="f1", meta=META)
  assert "4e-4" not in sel["arms"]["POI-Net"]["scores"]
  assert claims.selection_table(data, "sel").splitlines()[2] == "| 5e-5 | 20.00 | **29.00** |"
  with pytest.raises(ValueError, match="another setting is another selection"):
    claims.select(data, "sel", _sweep([]), key="optim.lr", arms=ARMS, metric="exact_match",
                  meta=META)
  with pytest.raises(ValueError, match="matches no arm"):
    claims.select(data, "sel", _sweep([("poi", "false", "5e-5", 0, 1.0)]), key="optim.lr",
                  arms=ARMS, metric="f1", meta=META)


def test_an_arm_added_later_keeps_its_own_declaration_and_runs():
  data = {"claims": [], "measurements": {}}
  claims.select(data, "sel", _sweep([("none", "false", "5e-5", 0, 20.0),
                                     ("none", "false", "1e-4", 0, 25.0)]),
                key="optim.lr", arms={"plain encoder": ARMS["plain encoder"]}, metric="f1",
                meta=META)
  later = dict(META, declared="declared later", command="ARMS=poi ...", device="another CPU",
               date="y")
  for runs in ([("poi", "true", "5e-5", 0, 30.0)], [("poi", "true", "1e-4", 0, 31.0)]):
    claims.select(data, "sel", _sweep(runs), key="optim.lr", arms={"POI-Net": ARMS["POI-Net"]},
                  metric="f1", meta=later)  # its run, then its follow-up: both its own
  sel = data["selections"]["sel"]
  assert (sel["declared"], sel["command"], sel["device"]) == ("d", "c", "d")  # the first arm's
  assert sel["arms"]["POI-Net"]["provenance"]["declared"] == "declared later"
  assert "provenance" not in sel["arms"]["plain encoder"]
  assert sel["choice"] == {"plain encoder": "1e-4", "POI-Net": "1e-4"}
  record = claims.selection_table(data, "sel").splitlines()
  assert record[-1] == ("POI-Net, added later: declared declared later. Run: `ARMS=poi ...`, "
                        "another CPU, s, y (y).")
  assert "Declared: d. Run: `c`, d, s, x (y)." in record[-2]


DREAM_EXTEND = {"1e-4": "2e-4", "2e-5": "1e-5"}  # dreamcpusel's declared edges


def test_the_follow_ups_extend_a_chosen_edge_once_then_rerun_a_close_call():
  # dreamcpusel's encoder, seed 0 (the committed record): 1e-4 chosen, so 2e-4 is owed at seed 0;
  # with 2e-4 run (34.45) nothing more: the best two (46.05, 42.69) are 3.36 apart
  enc = {"2e-5": {"0": 39.83}, "5e-5": {"0": 42.69}, "1e-4": {"0": 46.05}}
  assert claims.followup(enc, within=2, extend=DREAM_EXTEND) == {"values": ["2e-4"], "seeds": [0]}
  enc["2e-4"] = {"0": 34.45}
  assert claims.followup(enc, within=2, extend=DREAM_EXTEND) is None
  # an inner choice 2.0 points ahead: seed 1 at every value, in number order
  close = {"2e-5": {"0": 41.0}, "5e-5": {"0": 45.0}, "1e-4": {"0": 43.0}}
  assert claims.followup(close, within=2, extend=DREAM_EXTEND) == {
      "values": ["2e-5", "5e-5", "1e-4"], "seeds": [1]}
  assert claims.followup(close, within=1.9, extend=DREAM_EXTEND) is None
  for v, score in (("2e-5", 40.0), ("5e-5", 44.0), ("1e-4", 44.5)):
    close[v]["1"] = score  # seed 1 ran: never a third seed, however close
  assert claims.followup(close, within=2, extend=DREAM_EXTEND) is None
  # the low edge chosen after a close call: 1e-5 at both seeds the choice ran
  low = {"2e-5": {"0": 45.0, "1": 44.0}, "5e-5": {"0": 44.0, "1": 44.5}}
  assert claims.followup(low, within=2, extend=DREAM_EXTEND) == {"values": ["1e-5"],
                                                                 "seeds": [0, 1]}


def test_the_followup_command_prints_what_each_arm_owes_then_its_choice(tmp_path, capsys):
  sweep = _sweep([("none", "false", "2e-5", 0, 39.8), ("none", "false", "5e-5", 0, 42.7),
                  ("none", "false", "1e-4", 0, 46.1), ("poi", "true", "2e-5", 0, 41.0),
                  ("poi", "true", "5e-5", 0, 45.2), ("poi", "true", "1e-4", 0, 43.3),
                  ("duma", "false", "5e-5", 0, 50.0)])  # another arm's cells: not read
  path = tmp_path / "ablation.json"
  path.write_text(json.dumps(sweep))
  argv = ["followup", f"--ablation={path}", "--metric=f1", "--within=2",
          f"--extend={json.dumps(DREAM_EXTEND)}",
          '--arms={"enc": "model.head=none model.pos_embedding=false", '
          '"poi": "model.head=poi model.pos_embedding=true"}']
  assert claims.main(argv) == 0
  assert capsys.readouterr().out.splitlines() == [  # one run a line: one ablations.sh call each
      "ARMS=enc\tLRS=2e-4\tSEEDS=1\tSEED_VALUES=0",
      *(f"ARMS=poi\tLRS={lr}\tSEEDS=2\tSEED_VALUES=1" for lr in ("2e-5", "5e-5", "1e-4"))]
  with pytest.raises(SystemExit):  # no choice while runs are owed
    claims.main([*argv, "--choices"])
  sweep = _sweep([*((h, p, lr, s, 30.0) for h, p in (("none", "false"), ("poi", "true"))
                    for lr, s in (("3e-5", 0), ("5e-5", 0), ("5e-5", 1), ("3e-5", 1)))])
  sweep["cells"][1]["seeds"][1]["f1"] = 33.0  # the encoder at 5e-5, seed 1; POI-Net ties: 3e-5
  path.write_text(json.dumps(sweep))
  capsys.readouterr()
  assert claims.main(argv) == 0 and capsys.readouterr().out == ""
  assert claims.main([*argv, "--choices"]) == 0
  assert capsys.readouterr().out.splitlines() == ["enc=5e-5", "poi=3e-5"]


def _paired(*pairs, metric="accuracy"):
  """An ablation.json of a paired measurement: cells "a" and "b", seed i scoring pairs[i]."""
  return {"config": "configs/dream.py:minilm", "extra": [], "cells": [
      {"cell": cell, "overrides": [f"--config.model.head={cell}"],
       "seeds": [{"seed": s, "step": 9, "wall_s": 1.0, metric: pair[i]}
                 for s, pair in enumerate(pairs) if pair[i] is not None]}
      for i, cell in enumerate("ab")]}


SEED_RULE_CLAIM = {"id": "r", "measurement": "m", "component": "a", "ablation": "b",
                   "metric": "accuracy"}


def test_the_seed_rule_adds_seeds_3_and_4_only_where_the_first_three_hold_0(tmp_path, capsys):
  owed = lambda ablation, **kw: claims.seeds_owed(  # noqa: E731
      claims.merge({"claims": [SEED_RULE_CLAIM], "measurements": {}}, "m", ablation, command="",
                   device="", date="", software=""), {"m"}, **kw)
  # +1.6, +3.0, -1.0 holds 0: seeds 3 and 4 for both cells
  straddles = _paired((40.4, 38.8), (41.0, 38.0), (39.0, 40.0))
  assert owed(straddles) == [(3, "m", "a"), (3, "m", "b"), (4, "m", "a"), (4, "m", "b")]
  # +1.6, +3.0, +2.0 is above 0: none; nor before 3 paired seeds (the measurement's own come first)
  assert owed(_paired((40.4, 38.8), (41.0, 38.0), (42.0, 40.0))) == []
  assert owed(_paired((40.4, 38.8), (41.0, 38.0), (39.0, None))) == []
  # seed 3 ran for one cell: the rest only; once seed 3 has run for both, seed 4 is still owed
  # (the first three seeds decide, not the fourth)
  straddles["cells"][0]["seeds"].append({"seed": 3, "step": 9, "wall_s": 1.0, "accuracy": 50.0})
  assert owed(straddles) == [(3, "m", "b"), (4, "m", "a"), (4, "m", "b")]
  straddles["cells"][1]["seeds"].append({"seed": 3, "step": 9, "wall_s": 1.0, "accuracy": 40.0})
  assert owed(straddles) == [(4, "m", "a"), (4, "m", "b")]
  assert owed(straddles, most=4) == []
  # the command: the runs not yet merged, one line each; claims.json is not written
  path, abl = tmp_path / "claims.json", tmp_path / "ablation.json"
  path.write_text(json.dumps({"claims": [SEED_RULE_CLAIM], "measurements": {}}))
  abl.write_text(json.dumps(_paired((40.4, 38.8), (41.0, 38.0), (39.0, 40.0))))
  before = path.read_text()
  assert claims.main(["seeds", f"--claims={path}", f"--runs=m={abl}"]) == 0
  assert capsys.readouterr().out.splitlines() == ["3\tm\ta", "3\tm\tb", "4\tm\ta", "4\tm\tb"]
  assert path.read_text() == before
  with pytest.raises(SystemExit):  # a file that is not an ablation.json, named
    claims.main(["seeds", f"--claims={path}", f"--runs=m={tmp_path / 'missing.json'}"])


def test_the_seed_rule_pairs_a_baseline_from_another_measurement():
  """qopncpupaper's window runs another config: its own measurement, paired by seed number."""
  claim = {**SEED_RULE_CLAIM, "ablation_measurement": "w"}
  data = {"claims": [claim], "measurements": {}}
  both = _paired((40.0, 41.0), (40.0, 38.0), (40.0, 40.5))
  one = {**both, "cells": both["cells"][:1]}
  claims.merge(data, "m", one, command="", device="", date="", software="")
  assert claims.seeds_owed(data, {"m"}) == []  # the baseline's measurement not given
  other = {**both, "config": "configs/squad1.py:minilm", "cells": both["cells"][1:]}
  claims.merge(data, "w", other, command="", device="", date="", software="")
  assert claims.seeds_owed(data, {"m", "w"}) == [(3, "m", "a"), (3, "w", "b"), (4, "m", "a"),
                                                 (4, "w", "b")]


def test_a_run_without_the_flag_ran_at_its_config_files_value():
  """The shared protocol's runs at a config's default (squad1cpu: configs/squad1.py:minilm_cpu's
  lr 1e-4) are the evaluation stage of an arm whose choice is that default."""
  data = {"measurements": {"m": {"settings": {"config": "configs/squad1.py:minilm_cpu",
                                              "extra": ["--config.train.max_steps=150"]},
                                 "cells": {"c": {"overrides": ["--config.model.head=poi"]}}}}}
  assert float(claims.ran_at(data, "m", "c", "optim.lr")) == 1e-4
  data["measurements"]["m"]["settings"]["extra"].append("--config.optim.lr=2e-4")
  assert claims.ran_at(data, "m", "c", "optim.lr") == "2e-4"


def test_a_cells_seeds_are_listed_in_number_order_and_a_gap_is_spelt_out():
  assert claims._mean_std({"10": 3.0, "2": 1.0, "9": 2.0}) == (
      "2.00 ± 1.00 (n=3; seeds 2, 9, 10: 1.00, 2.00, 3.00)")
  assert claims._mean_std({"1": 5.0, "0": 4.0, "2": 6.0, "3": 7.0}) == (
      "5.50 ± 1.29 (n=4; seeds 0-3: 4.00, 5.00, 6.00, 7.00)")
  assert claims._mean_std({"4": 45.0}) == "45.00 (n=1; seed 4: 45.00)"
  assert claims._mean_std({}) == "not measured"
