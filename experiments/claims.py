r"""The papers' claims as paired comparisons, with their per-seed scores kept in the repository.

  python experiments/claims.py merge --measurement=squad2 --ablation=DIR/ablation.json \
      --date=2026-11-25 --command="bash experiments/ablations.sh run squad2"  # a run's rows in
  python experiments/claims.py table                        # the claims table of docs/results.md
  python experiments/claims.py table --write=docs/results.md  # it and the selections, in place
  python experiments/claims.py select --name=squad1cpusel --ablation=DIR/ablation.json \
      --metric=f1 --arms='{"POI-Net": "model.head=poi model.pos_embedding=true", ...}' \
      --split=... --split_short=... --setting=... --declared=... --command=... --date=...
                                                            # a held-out sweep's selection record
  python experiments/claims.py selection --name=dreamsel    # a selection's record, for the same
  python experiments/claims.py followup --ablation=DIR/ablation.json --metric=accuracy \
      --arms='{"duma": "model.head=duma model.pos_embedding=false"}' --within=2 \
      --extend='{"1e-4": "2e-4", "2e-5": "1e-5"}'       # the runs a sweep's follow-ups still owe
  python experiments/claims.py seeds --runs=dreamcpupaper=DIR/ablation.json
                                                            # the seeds a measurement still owes

``merge`` takes the device and the software versions from what the runs recorded (each run's
``environment.json``, carried into ``ablation.json``); ``--device`` and ``--software`` give them
for runs of an engine that recorded none.

``docs/claims.json`` holds two things:

* ``claims``: each claim as two cells of one measurement (the component and its ablation; an
  ``ablation_measurement`` when the baseline runs another config), the metric that decides it
  and the paper's own numbers. Written by hand: the protocol is fixed before the runs.
* ``selections``: for claims measured with each arm at its best, the selection stage kept with
  the result: the grid (one config key), the split of the *training* data it was scored on, the
  rule fixed before the runs, every arm's held-out score per value and seed, and the choice;
  ``select`` writes one from the held-out sweep's ``ablation.json`` (``dreamsel``'s first rates
  were typed from the notebook, their result files lost). ``table`` checks that the choice is
  what the rule gives on those scores (`choose`), and that each arm's evaluation runs used its
  own choice (`ran_at`), so a row cannot quietly pair other settings.
* ``measurements``: per measurement (an `experiments/ablations.sh` name), its command, device,
  software and date, and per cell the score of every seed and metric. ``merge`` adds a run's seeds
  from `experiments/ablation.py`'s ``ablation.json``; seeds already there are replaced only if the
  command is the same (a run with other settings is another measurement, never a silent mix), so
  an interrupted sweep, a later run with more seeds or a GPU run adds to the same rows.

Each claim names its ``protocol`` (`PROTOCOLS`): *one shared setting* (both arms at one setting,
chosen for the component: the first rows, kept as measured), *the paper's settings* (the paper's
learning rate, warm-up, epochs and batch for that data set, with what the machine forces scaled
down, stated in the row), or *each arm at its best* (a ``selection``). A claim measured under
several protocols has a row for each; the verdict cell names the protocol.

Statistics (``table``): per cell mean ± sample standard deviation over its seeds, then every
seed's score in seed order; per claim the
paired difference (component minus ablation) over the seeds both cells ran (cells of one
measurement share seeds: same data order and initialisation of what they share), with a 95%
interval from the t distribution with n - 1 degrees of freedom (a paired t over seeds: the saved
scores are per seed, not per question). Verdict: *consistent with the paper* when the interval is
above 0, *opposite* when below 0, *not resolved at this scale* when it holds 0; no verdict
before 3 paired seeds (the interval is still shown): two seeds whose differences happen to agree
(accuracy moves in steps of one question) give an interval of width 0. Seeds: 3 a
cell, and 5 where the interval over the first 3 holds 0 (``seeds`` prints the runs still owed,
`seeds_owed`; experiments/claims_queue.sh runs them).

A claim may also name ``chance``: the score of guessing, in the metric's units (the long-context
probe's: a window can only guess among the distractors, 100 / (distractors + 1) exact match). Its
verdict then adds the component's own difference from guessing, with the same t interval over
seeds (one sample), and *consistent with the paper* needs both intervals above 0: a component
above its baseline but not above guessing is *not shown*. The probe's window can fall below
guessing (it answers from windows that do not hold the answer), and QOPN beating that is not
QOPN linking paragraphs.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script
  sys.path.insert(0, str(ROOT))
from poi_jax.io import write_json_atomic  # noqa: E402

CLAIMS = ROOT / "docs" / "claims.json"
LEVEL = 0.95


def paired_interval(component: dict, ablation: dict, level: float = LEVEL):
  """``(mean difference, lo, hi, n)`` of component minus ablation over the seeds in both (dicts
  seed -> score); lo/hi are None with fewer than 2 shared seeds (no spread to measure)."""
  from scipy import stats
  seeds = sorted(set(component) & set(ablation), key=int)
  diffs = [component[s] - ablation[s] for s in seeds]
  if not diffs:
    return None, None, None, 0
  mean = statistics.fmean(diffs)
  if len(diffs) < 2:
    return mean, None, None, len(diffs)
  half = stats.t.ppf(0.5 + level / 2, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(
      len(diffs))
  return mean, mean - half, mean + half, len(diffs)


def chance_interval(scores: dict, chance: float, level: float = LEVEL):
  """``(mean - chance, lo, hi, n)`` over the seeds of ``scores`` (seed -> score): a one-sample t
  interval of the difference from guessing; lo/hi are None with fewer than 2 seeds."""
  return paired_interval(scores, {s: chance for s in scores}, level)


def _side(lo, hi, above: str, below: str, neither: str) -> str:
  """Which side of 0 an interval ``[lo, hi]`` lies on, in the caller's words."""
  return above if lo > 0 else below if hi < 0 else neither


LEAST_SEEDS, MOST_SEEDS = 3, 5  # issue 50: 3 seeds a cell, 5 where the interval holds 0


def chance_verdict(lo, hi, n: int) -> str:
  """The component against guessing, from its interval over ``n`` seeds."""
  if n < LEAST_SEEDS:
    return f"not resolved (fewer than {LEAST_SEEDS} seeds)"
  return _side(lo, hi, "above guessing", "below guessing", "not above guessing")


def verdict(lo, hi, n: int) -> str:
  """A claim's verdict from its paired interval over ``n`` seeds."""
  if n < LEAST_SEEDS:
    return f"not resolved (fewer than {LEAST_SEEDS} paired seeds)"
  return _side(lo, hi, "consistent with the paper", "opposite", "not resolved at this scale")


PROTOCOLS = {"shared": "one shared setting", "paper": "the paper's settings",
             "best": "each arm at its best"}


def choose(selection: dict) -> dict[str, str]:
  """Each arm's value by the selection's rule: the highest mean held-out score over the
  selection seeds; a tie goes to the smaller value (values compare as numbers). Only the
  held-out scores of ``selection["arms"]`` are read: the evaluation set never is."""
  out = {}
  for arm, rec in selection["arms"].items():
    means = {v: statistics.fmean(seeds.values()) for v, seeds in rec["scores"].items() if seeds}
    best = max(means.values())
    out[arm] = min((v for v, m in means.items() if m == best), key=float)
  return out


def followup(scores: dict[str, dict[str, float]], *, within: float,
             extend: dict[str, str]) -> dict | None:
  """The next runs a selection's declared follow-ups owe one arm, or None when it owes none.

  ``scores``: the arm's held-out score per value and seed (``{"1e-4": {"0": 46.1}, ...}``, as a
  selection record keeps them). The follow-ups, applied in this order so that each is decided
  on the scores the earlier ones left:

  1. *The grid is extended past an edge the arm chose*: ``extend`` maps a value to the one run
     next to it when the rule chooses it (``{"1e-4": "2e-4", "2e-5": "1e-5"}``), at the seeds
     the choice ran; once only (the added value's own neighbour is not in ``extend``).
  2. *A close call is measured again*: when the best two values' mean scores are within
     ``within`` points and only one seed ran, the next seed at every value.

  Returns ``{"values": [...], "seeds": [...]}``. Only held-out scores are read, as `choose`."""
  choice = choose({"arms": {"arm": {"scores": scores}}})["arm"]
  seeds = sorted({int(s) for v in scores.values() for s in v})
  added = extend.get(choice)
  if added is not None and not scores.get(added):
    return {"values": [added], "seeds": sorted(int(s) for s in scores[choice])}
  means = sorted((statistics.fmean(v.values()) for v in scores.values() if v), reverse=True)
  if len(means) > 1 and means[0] - means[1] <= within and len(seeds) == 1:
    return {"values": sorted(scores, key=float), "seeds": [seeds[0] + 1]}
  return None


def seeds_owed(data: dict, measurements, *, least: int = LEAST_SEEDS,
               most: int = MOST_SEEDS) -> list[tuple[int, str, str]]:
  """The runs the seed rule still owes the claims on ``measurements``, as ``(seed, measurement,
  cell)`` in seed order: a claim whose first ``least`` paired seeds give an interval holding 0
  (`paired_interval`, `verdict`'s *not resolved*) is measured at ``most`` seeds, the lowest
  numbers either cell lacks. Decided on those first seeds alone, so that the seeds added cannot
  decide whether seeds are added (no stopping when an interval happens to clear 0); a claim with
  fewer paired seeds than ``least`` is not judged (its measurement's own seeds come first)."""
  owed = set()
  for c in data["claims"]:
    arms = ((c["measurement"], c["component"]),
            (c.get("ablation_measurement", c["measurement"]), c["ablation"]))
    if any(m not in measurements for m, _ in arms):
      continue
    comp, abl = (_scores(data, m, cell, c["metric"]) for m, cell in arms)
    shared = sorted(set(comp) & set(abl), key=int)
    if not least <= len(shared) < most:
      continue
    first = shared[:least]
    _, lo, hi, _ = paired_interval({s: comp[s] for s in first}, {s: abl[s] for s in first})
    if lo > 0 or hi < 0:
      continue
    extra = [s for s in range(most + len(shared)) if str(s) not in shared][:most - len(shared)]
    for seed in extra:
      for (m, cell), scores in zip(arms, (comp, abl)):
        if str(seed) not in scores:
          owed.add((seed, m, cell))
  return sorted(owed)


def ran_at(data: dict, measurement: str, cell: str, key: str) -> str | None:
  """The value of config ``key`` the runs of ``cell`` used: experiments/ablation.py passes the
  cell's overrides, then the measurement's extra flags, so the last assignment wins; with no
  flag, the config file's own value (runs of the shared protocol at a config's default)."""
  m = data["measurements"][measurement]
  flags = [*m["cells"][cell]["overrides"], *m["settings"]["extra"]]
  values = [f.split("=", 1)[1] for f in flags if f.startswith(f"--config.{key}=")]
  if values:
    return values[-1]
  if not m["settings"].get("config"):
    return None
  from experiments import ablation  # loads a config file: only for rows that need it
  return str(ablation.config_value(str(ROOT / m["settings"]["config"]), [], key))


PROVENANCE = ("declared", "command", "device", "software", "date", "source")
RULE = ("per arm, the value with the highest mean held-out {metric} over the selection seeds; a "
        "tie goes to the smaller value")


def select(data: dict, name: str, ablation: dict, *, key: str, arms: dict[str, str], metric: str,
           meta: dict) -> dict:
  """``data`` with selection ``name`` recorded from a held-out sweep's ``ablation.json``: every
  run's ``metric`` filed under its arm (``arms``: label -> the cell's overrides other than
  ``key``, as ``"model.head=poi model.pos_embedding=true"``) and its value of ``key``, and each
  arm's choice by the rule (`choose`). A selection already there gains the new values and seeds
  (a grid extended, a second seed), never under another key, metric or split. An arm added to it
  later (declared and run after the others) keeps its own `PROVENANCE` (``meta``'s declaration,
  command, device, software, date) on the arm, and so does every later call for it; the
  selection's own stays that of its first arms."""
  wanted = {label: frozenset(f"--config.{kv}" for kv in spec.split())
            for label, spec in arms.items()}
  sel = data.setdefault("selections", {}).get(name)
  own = set()  # the arms whose provenance is their own, not the selection's
  if sel is None:
    sel = {"key": key, "metric": metric, "rule": RULE.format(metric=metric),
           "arms": {label: {"cell": spec, "scores": {}} for label, spec in arms.items()}}
  else:
    own = {label for label in arms
           if label not in sel["arms"] or "provenance" in sel["arms"][label]}
  for field, value in (("key", key), ("metric", metric), ("split", meta.get("split"))):
    if sel.get(field, value) != value:
      raise ValueError(f"selection {name!r} was made with {field} {sel[field]!r}, not {value!r}: "
                       "another setting is another selection (--name)")
  for row in (r for r in ablation["cells"] if r["seeds"]):  # cells with finished runs
    values = [o.split("=", 1)[1] for o in row["overrides"] if o.startswith(f"--config.{key}=")]
    rest = frozenset(o for o in row["overrides"] if not o.startswith(f"--config.{key}="))
    label = next((a for a, want in wanted.items() if want == rest), None)
    if not values or label is None:
      raise ValueError(f"selection {name!r}: cell {row['cell']} sets no {key} or matches no arm "
                       f"of {sorted(arms)}")
    scores = sel["arms"].setdefault(label, {"cell": arms[label], "scores": {}})["scores"]
    for run in row["seeds"]:  # finished runs only
      scores.setdefault(values[-1], {})[str(run["seed"])] = run[metric]
  for label in own:
    sel["arms"][label].setdefault("provenance", {}).update(
        {k: v for k, v in meta.items() if k in PROVENANCE})
  shared = any(label not in own for label in arms)
  sel.update({k: v for k, v in meta.items() if shared or k not in PROVENANCE})
  sel["seeds"] = sorted({int(s) for a in sel["arms"].values() for v in a["scores"].values()
                         for s in v})
  sel["choice"] = choose(sel)
  data["selections"][name] = sel
  return data


def check_selection(data: dict, claim: dict) -> None:
  """Raises ValueError unless ``claim``'s selection chose what its rule gives and both arms ran
  at their own choice."""
  sel = data["selections"][claim["selection"]]
  chosen = choose(sel)
  if chosen != sel["choice"]:
    raise ValueError(f"{claim['id']}: selection {claim['selection']!r} records {sel['choice']}, "
                     f"its rule gives {chosen}")
  for label, rec in sel["arms"].items():  # a choice counts once its declared follow-ups ran
    owed = followup(rec["scores"], **sel["followups"]) if "followups" in sel else None
    if owed is not None:
      raise ValueError(f"{claim['id']}: selection {claim['selection']!r} still owes {label} the "
                       f"runs {owed} (its declared follow-ups)")
  for label, cell, measurement in (
      (claim["component_label"], claim["component"], claim["measurement"]),
      (claim["ablation_label"], claim["ablation"],
       claim.get("ablation_measurement", claim["measurement"]))):
    used = ran_at(data, measurement, cell, sel["key"])
    if used is None or float(used) != float(chosen[label]):
      raise ValueError(f"{claim['id']}: {label} ran at {sel['key']}={used}, its choice is "
                       f"{chosen[label]}")


def _load(path: pathlib.Path) -> dict:
  return json.loads(path.read_text()) if path.exists() else {"claims": [], "measurements": {}}


def _write_atomic(path: pathlib.Path, data: dict) -> None:
  """claims.json as it is kept in git (indent 1, sorted keys, a final newline), written whole."""
  write_json_atomic(str(path), data, sort_keys=True, indent=1, end="\n")


def merge(data: dict, measurement: str, ablation: dict, *, command: str, device: str, date: str,
          software: str, added: bool = False) -> dict:
  """``data`` with the seeds of ``ablation`` (an ``ablation.json``) added to ``measurement``.

  ``added``: the cells ``ablation`` brings are an arm declared after the measurement's first
  arms (DUMA into ``dreamcpubest``), run later, maybe on another machine: they keep this
  command, device, date and software as their own ``provenance``, and the measurement's stay
  those of its first arms. A cell with its own provenance keeps it on every later merge."""
  m = data["measurements"].setdefault(measurement, {"cells": {}})
  settings = {"config": ablation["config"], "extra": ablation["extra"]}
  if m.get("settings", settings) != settings:
    raise ValueError(f"measurement {measurement!r} was run with {m['settings']}, this ablation.json "
                     f"with {settings}: another setting is another measurement (--measurement)")
  run = dict(command=command, device=device, date=date, software=software)
  shared = False
  for row in ablation["cells"]:
    if added and row["seeds"] and row["cell"] in m["cells"] \
        and "provenance" not in m["cells"][row["cell"]]:
      raise ValueError(f"measurement {measurement!r}: cell {row['cell']} is one of its first "
                       "arms, not an arm added later (drop --added)")
    cell = m["cells"].setdefault(row["cell"], {"overrides": row["overrides"], "seeds": {}})
    for r in row["seeds"]:  # finished runs only: {"seed", "step", "wall_s", <metrics>}
      cell["seeds"][str(r["seed"])] = {k: v for k, v in r.items()
                                       if k not in ("seed", "device", "software")}
    if row["seeds"] and (added or "provenance" in cell):
      cell["provenance"] = run
    elif row["seeds"]:
      shared = True
  if shared or "command" not in m:
    m.update(run)
  m["settings"] = settings
  return data


def recorded(ablation: dict, key: str) -> str | None:
  """The ``device`` or ``software`` every finished run of ``ablation`` recorded (experiments/
  ablation.py, from each run's environment.json), or None when runs lack it or disagree."""
  values = {run.get(key) for row in ablation["cells"] for run in row["seeds"]}
  return values.pop() if len(values) == 1 else None


def _scores(data: dict, measurement: str, cell: str, metric: str) -> dict:
  seeds = data["measurements"].get(measurement, {}).get("cells", {}).get(cell, {}).get("seeds", {})
  return {s: v[metric] for s, v in seeds.items() if v.get(metric) is not None}


def _seed_list(seeds) -> str:
  """Seed numbers as a reader scans them: ``0-4`` for a run of them, ``0, 2, 5`` otherwise."""
  seeds = sorted(int(s) for s in seeds)
  if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
    return f"{seeds[0]}-{seeds[-1]}"
  return ", ".join(map(str, seeds))


def _mean_std(scores: dict) -> str:
  """``{seed: score}`` -> ``mean ± std (n=N; seeds 0-2: a, b, c)``: every seed's score in seed
  order, so that a reader can pair them with the other arm's by eye."""
  if not scores:
    return "not measured"
  seeds = sorted(scores, key=int)
  values = [scores[s] for s in seeds]
  each = (f"seed{'s' if len(seeds) > 1 else ''} {_seed_list(seeds)}: "
          + ", ".join(f"{v:.2f}" for v in values))
  if len(values) == 1:  # no spread to state yet
    return f"{values[0]:.2f} (n=1; {each})"
  return (f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} "
          f"(n={len(values)}; {each})")


def table(data: dict) -> str:
  """The claims table (markdown): one row per claim that has a measurement."""
  lines = ["| claim | paper's numbers | measured here (setting, metric) | protocol | component | "
           f"ablation | paired difference, {LEVEL:.0%} interval | verdict | run |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
  for c in data["claims"]:
    protocol = PROTOCOLS[c.get("protocol", "shared")]
    if c.get("protocol") == "best":
      sel = data["selections"][c["selection"]]
      chosen = {a: sel["choice"][a] for a in (c["component_label"], c["ablation_label"])
                if a in sel["choice"]}
      protocol += (f" ({sel['key']} chosen on {sel['split_short']}: "
                   + (", ".join(f"{a} {v}" for a, v in chosen.items()) or "not yet")
                   + ")")
    m = data["measurements"].get(c["measurement"])
    comp = _scores(data, c["measurement"], c["component"], c["metric"])
    # A baseline run by another config (QOPN's window: squad1.py, not newsqa.py) is its own
    # measurement; its seeds pair with the component's by number.
    abl = _scores(data, c.get("ablation_measurement", c["measurement"]), c["ablation"],
                  c["metric"])
    if not m or not comp or not abl:
      lines.append(f"| {c['claim']} | {c['paper']} | {c['setting']} | {protocol} | not measured "
                   f"yet | | | | |")
      continue
    if c.get("protocol") == "best":
      check_selection(data, c)
    mean, lo, hi, n = paired_interval(comp, abl)
    interval = (f"{mean:+.2f} [{lo:+.2f}, {hi:+.2f}] (n={n})" if lo is not None
                else f"{mean:+.2f} (n={n})")
    said = verdict(lo, hi, n)
    if "chance" in c:  # the component against guessing as well (module docstring)
      gain, glo, ghi, gn = chance_interval(comp, c["chance"])
      above = chance_verdict(glo, ghi, gn)
      if said == "consistent with the paper" and above != "above guessing":
        said = f"not shown: above the {c['ablation_label']}, not above guessing"
      against = (f"{gain:+.2f} [{glo:+.2f}, {ghi:+.2f}]" if glo is not None else f"{gain:+.2f}")
      said += (f"; {c['component_label']} vs guessing ({c['chance']:.1f}): {against} (n={gn}), "
               f"{above}")
    lines.append(f"| {c['claim']} | {c['paper']} | {c['setting']} ({c['metric']}) | {protocol} | "
                 f"{c['component_label']}: {_mean_std(comp)} | "
                 f"{c['ablation_label']}: {_mean_std(abl)} | {interval} | "
                 f"{said} | {_runs(data, c)} |")
  return "\n".join(lines)


def _runs(data: dict, c: dict) -> str:
  """A claim row's last column: the command, device and date of its runs; per arm where an arm
  added later (`merge`'s ``added``) ran by its own."""
  arms = ((c["component_label"], c["measurement"], c["component"]),
          (c["ablation_label"], c.get("ablation_measurement", c["measurement"]), c["ablation"]))
  said = lambda p: f"`{p['command']}`, {p['device']}, {p['date']}"  # noqa: E731
  of = lambda meas, cell: data["measurements"][meas]["cells"][cell].get(  # noqa: E731
      "provenance", data["measurements"][meas])
  if not any("provenance" in data["measurements"][meas]["cells"][cell] for _, meas, cell in arms):
    return said(data["measurements"][c["measurement"]])
  return "; ".join(f"{label}: {said(of(meas, cell))}" for label, meas, cell in arms)


def selection_table(data: dict, name: str) -> str:
  """A selection's record (markdown): every arm's held-out score per value (the mean over the
  selection seeds), the choice in bold, and how it was made."""
  sel = data["selections"][name]
  values = sorted({v for a in sel["arms"].values() for v in a["scores"]}, key=float)
  lines = [f"| {sel['key']} | " + " | ".join(f"{a}, held-out {sel['metric']}" for a in sel["arms"])
           + " |", "| --- |" + " ---: |" * len(sel["arms"])]
  for v in values:
    row = []
    for arm, rec in sel["arms"].items():
      seeds = rec["scores"].get(v, {})
      cell = f"{statistics.fmean(seeds.values()):.2f}" if seeds else "-"
      row.append(f"**{cell}**" if sel["choice"].get(arm) == v else cell)
    lines.append(f"| {v} | " + " | ".join(row) + " |")
  lines += ["", f"Split: {sel['split']}. Setting: {sel['setting']}. Seeds: "
            f"{', '.join(map(str, sel['seeds']))}. Rule: {sel['rule']}. Declared: {sel['declared']}. "
            f"Run: `{sel['command']}`, {sel['device']}, {sel['software']}, {sel['date']} "
            f"({sel['source']})."]
  for arm, rec in sel["arms"].items():  # an arm added later: its own declaration and runs
    if "provenance" in rec:
      p = {**{k: sel.get(k) for k in PROVENANCE}, **rec["provenance"]}
      lines.append(f"{arm}, added later: declared {p['declared']}. Run: `{p['command']}`, "
                   f"{p['device']}, {p['software']}, {p['date']} ({p['source']}).")
  return "\n".join(lines)


def write_page(page: str, data: dict, *, where: str = "the page") -> str:
  """``page`` (docs/results.md's text) with its claims table and each selection's record made
  again from ``data``, the text around them kept. The claims table is the block that opens with
  its header row; a selection's record, the table and the paragraph after the line that names
  its command (``claims.py selection --name=NAME`):``), each ending at a blank line. A block the
  page lacks is a ValueError naming it (``where``: the file, for the message)."""
  def block_end(text: str, start: int, paragraphs: int) -> int:
    end = start
    for _ in range(paragraphs):  # each paragraph ends at a blank line (or the end of the page)
      end = text.find("\n\n", end + 1)
      end = len(text) if end < 0 else end
    return end

  header = table(data).split("\n", 1)[0]
  start = page.find(header)
  if start < 0:
    raise ValueError(f"{where}: no claims table (a line opening {header[:40]!r}...)")
  page = page[:start] + table(data) + page[block_end(page, start, 1):]
  for name in data.get("selections", {}):
    found = re.search(rf"claims\.py selection\s+--name={re.escape(name)}`\):\n\n", page)
    if not found:
      raise ValueError(f"{where}: no record of selection {name} (a line naming "
                       f"`python experiments/claims.py selection --name={name}`: then a blank "
                       "line)")
    start = found.end()
    page = page[:start] + selection_table(data, name) + page[block_end(page, start, 2):]
  return page


def main(argv: list[str]) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("action", choices=["merge", "select", "table", "selection", "followup", "seeds"])
  p.add_argument("--name", help="selection: its name in claims.json, e.g. dreamsel")
  p.add_argument("--claims", default=str(CLAIMS))
  p.add_argument("--measurement", help="merge: the experiments/ablations.sh name, e.g. squad2")
  p.add_argument("--ablation", help="merge: experiments/ablation.py's ablation.json")
  p.add_argument("--command", help="merge: the command that ran it")
  p.add_argument("--device", help="merge: e.g. 'NVIDIA H100 80GB HBM3' or '2-core CPU' "
                 "(default: what the runs recorded)")
  p.add_argument("--date", help="merge: YYYY-MM-DD")
  p.add_argument("--added", action="store_true",
                 help="merge: the cells are an arm declared after the measurement's first arms: "
                      "they keep this command, device and date as their own")
  p.add_argument("--software", help="merge: e.g. 'jax 0.11.2, flax 0.12.10' (default: what the "
                 "runs recorded)")
  p.add_argument("--write", metavar="PAGE", help="table: make the claims table and every "
                 "selection's record in PAGE (docs/results.md) again, in place")
  p.add_argument("--key", default="optim.lr", help="select: the config key the grid swept")
  p.add_argument("--metric", help="select: the held-out metric the rule reads, e.g. f1")
  p.add_argument("--arms", help="select: JSON {label: the cell's other overrides}, e.g. "
                 '\'{"POI-Net": "model.head=poi model.pos_embedding=true"}\'')
  p.add_argument("--within", type=float, help="followup, select: the points within which the "
                 "best two values' means run the next seed (a declared follow-up)")
  p.add_argument("--extend", help='followup, select: JSON {chosen value: the value it adds}, e.g. '
                 '\'{"1e-4": "2e-4", "2e-5": "1e-5"}\'')
  p.add_argument("--runs", action="append", default=[], metavar="MEASUREMENT=ABLATION_JSON",
                 help="seeds: a measurement's finished runs (repeatable: a claim whose baseline "
                 "is another measurement needs both)")
  p.add_argument("--choices", action="store_true", help="followup: print each arm's choice "
                 "(ARM=value) instead of what it owes")
  for field, what in (("split", "the held-out split, in a sentence"),
                      ("split_short", "the split in a few words, for the claims table"),
                      ("setting", "everything but the swept key"),
                      ("declared", "where and when the grid and rule were declared")):
    p.add_argument(f"--{field}", help=f"select: {what}")
  args = p.parse_args(argv)
  path = pathlib.Path(args.claims)
  data = _load(path)
  if args.action == "table":
    if not args.write:
      print(table(data))
      return 0
    page = pathlib.Path(args.write)
    try:
      old = page.read_text()
      text = write_page(old, data, where=str(page))
    except (OSError, ValueError) as e:
      p.error(str(e))
    if text != old:
      tmp = page.with_name(f".{page.name}.tmp")
      tmp.write_text(text)
      tmp.replace(page)  # whole: a reader never sees half a page
    print(f"{page}: the claims table and {len(data.get('selections', {}))} selection records "
          "made from " + str(path))
    return 0
  if args.action == "selection":
    print(selection_table(data, args.name))
    return 0
  if args.action == "followup":
    return _print_followups(p, args, data)
  if args.action == "seeds":
    return _print_seeds_owed(p, args, data)
  needs = (("name", "ablation", "metric", "arms", "split", "split_short", "setting", "declared",
            "command", "date") if args.action == "select"
           else ("measurement", "ablation", "command", "date"))
  missing = [k for k in needs if not getattr(args, k)]
  if missing:
    p.error(f"{args.action} needs " + ", ".join(f"--{k}" for k in missing))
  ablation = json.loads(pathlib.Path(args.ablation).read_text())
  args.device = args.device or recorded(ablation, "device")  # the runs' own record unless given
  if not args.device:
    p.error(f"{args.ablation}: its runs recorded no single device (an older engine, or runs on "
            "several machines): give --device")
  args.software = args.software or recorded(ablation, "software") or ""
  if args.action == "select":
    try:
      arms = json.loads(args.arms)
    except json.JSONDecodeError as e:
      p.error(f"--arms: not JSON ({e}); give {{label: the cell's other overrides}}")
    meta = {k: getattr(args, k) for k in ("split", "split_short", "setting", "declared",
                                          "command", "date", "device", "software")}
    meta["source"] = f"the runs' {pathlib.Path(args.ablation).name}"
    if args.within is not None and args.extend:  # the declared follow-ups, checked by `table`
      meta["followups"] = {"within": args.within, "extend": json.loads(args.extend)}
    _write_atomic(path, select(data, args.name, ablation, key=args.key,
                               arms=arms, metric=args.metric, meta=meta))
    print(f"{path}: selection {args.name} chooses {data['selections'][args.name]['choice']}")
    return 0
  try:
    merged = merge(data, args.measurement, ablation, command=args.command, device=args.device,
                   date=args.date, software=args.software, added=args.added)
  except ValueError as e:
    p.error(str(e))
  _write_atomic(path, merged)
  print(f"{path}: {args.measurement} now holds "
        f"{sum(len(c['seeds']) for c in data['measurements'][args.measurement]['cells'].values())}"
        f" runs")
  return 0


def _print_followups(p: argparse.ArgumentParser, args: argparse.Namespace, data: dict) -> int:
  """``followup``: per arm of ``--arms`` (its keys: ablations.sh's arm names), the runs its
  selection's declared follow-ups still owe, one line a run (value-major), each the environment
  of the ablations.sh call that runs it (``ARMS=duma<TAB>LRS=2e-4<TAB>SEEDS=2<TAB>
  SEED_VALUES=1``: one call a run, since ablations.sh keeps finished runs only when its call
  ends); nothing when none is owed. ``--choices``: each arm's choice instead (``duma=5e-5``),
  refused while runs are owed. ``--within`` and ``--extend`` default to those the selection
  ``--name`` declared."""
  declared = data.get("selections", {}).get(args.name, {}).get("followups", {})
  if args.within is None and args.extend is None and declared:  # the selection's own rule
    args.within, args.extend = declared["within"], json.dumps(declared["extend"])
  missing = [k for k in ("ablation", "metric", "arms", "within", "extend")
             if getattr(args, k) is None]
  if missing:
    p.error("followup needs " + ", ".join(f"--{k}" for k in missing) + " (or --name of a "
            "selection that declares them)")
  arms, extend = json.loads(args.arms), json.loads(args.extend)
  ablation = json.loads(pathlib.Path(args.ablation).read_text())
  swept = f"--config.{args.key}="
  asked = {frozenset(f"--config.{kv}" for kv in spec.split()) for spec in arms.values()}
  ran = {"cells": [r for r in ablation["cells"]  # the asked arms' cells (a sweep holds others)
                   if frozenset(o for o in r["overrides"] if not o.startswith(swept)) in asked]}
  sel = select({}, "followup", ran, key=args.key, arms=arms, metric=args.metric,
               meta={})["selections"]["followup"]
  owed = {}
  for arm in arms:
    scores = sel["arms"][arm]["scores"]
    if not scores:
      p.error(f"{args.ablation}: arm {arm} has no finished run")
    owed[arm] = followup(scores, within=args.within, extend=extend)
  if args.choices:
    if any(owed.values()):
      p.error(f"follow-ups still owed: {owed}")
    for arm in arms:
      print(f"{arm}={sel['choice'][arm]}")
    return 0
  for arm, runs in owed.items():
    if runs is None:  # this arm owes nothing
      continue
    for value in runs["values"]:
      for seed in runs["seeds"]:
        print(f"ARMS={arm}\tLRS={value}\tSEEDS={seed + 1}\tSEED_VALUES={seed}")
  return 0


def _print_seeds_owed(p: argparse.ArgumentParser, args: argparse.Namespace, data: dict) -> int:
  """``seeds``: the runs `seeds_owed` finds for the claims on the ``--runs`` measurements (their
  ``ablation.json``, not yet merged: the claims file is not written), one ``SEED<TAB>MEASUREMENT
  <TAB>CELL`` line each; nothing when none is owed."""
  if not args.runs:
    p.error("seeds needs --runs=MEASUREMENT=ABLATION_JSON (repeatable)")
  data = json.loads(json.dumps(data))  # merged into a copy only
  for spec in args.runs:
    measurement, sep, path = spec.partition("=")
    if not sep or not measurement or not path:
      p.error(f"--runs={spec}: give MEASUREMENT=ABLATION_JSON")
    try:
      ablation = json.loads(pathlib.Path(path).read_text())
      merge(data, measurement, ablation, command="", device="", date="", software="")
    except (OSError, json.JSONDecodeError, KeyError) as e:
      p.error(f"--runs={spec}: not a readable ablation.json ({e!r})")
    except ValueError as e:
      p.error(f"--runs={spec}: {e}")
  for seed, measurement, cell in seeds_owed(data, {s.partition("=")[0] for s in args.runs}):
    print(f"{seed}\t{measurement}\t{cell}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
