"""What each part of the model costs in a traced training step: the device time of every
compiled op in a `jax.profiler` trace, summed by the model part its HLO metadata names.

  python bench/train_step.py --batch=32 --seq=384 --dtype=bfloat16 --no_torch \\
      --torch_compile=none --profile_dir=/tmp/prof
  python bench/step_profile.py /tmp/prof/bf16

DIR holds what `bench/train_step.py --profile_dir` writes for one dtype: the Perfetto trace
(``*.trace.json.gz``, anywhere below DIR) of 3 steps and the compiled step's HLO
(``step.hlo.txt``). Each traced op (``hlo_op``: a fusion, a matmul, a copy) is looked up in the
HLO for its ``op_name``, the JAX name stack of the operation it computes, and put in the first
part whose scope name that stack holds (`PARTS`; the model sets them with ``jax.named_scope``);
the rest (loss, gradient clipping, the AdamW update) is ``other``. Backward ops carry the scope
of the forward op they differentiate, so each part's row is its forward plus backward.
Printed: per part, milliseconds per step and share of the traced device time; then the ops that
cost most.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re

# Scope names set in `poi_jax.models.poi_net` (first match wins: the co-attention runs on the
# encoder's output, outside its scope).
PARTS = ("pos_embedding", "coattention", "encoder")
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?op_name="([^"]*)"')


def op_names(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> the ``op_name`` of its metadata."""
  out = {}
  for line in hlo_text.splitlines():
    m = _INSTRUCTION.match(line)
    if m:
      out[m.group(1)] = m.group(2)
  return out


def part_of(op_name: str) -> str:
  """The first of `PARTS` that is a scope of ``op_name`` (``.../jvp(coattention)/mul``,
  ``.../transpose(jvp(encoder))/...``), else ``other``."""
  return next((p for p in PARTS if re.search(rf"(^|[/(]){p}($|[/)])", op_name)), "other")


def device_events(trace: dict):
  """``(hlo_op, microseconds)`` of each op execution in the trace. On a GPU the kernels of the
  device's streams (process names starting ``/device:``); on a CPU, the host's op events."""
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  names = {e["pid"]: e.get("args", {}).get("name", "") for e in events
           if e.get("ph") == "M" and e.get("name") == "process_name"}
  on_device = any(n.startswith("/device:") for n in names.values())
  for e in events:
    args = e.get("args") or {}
    if e.get("ph") != "X" or "hlo_op" not in args:
      continue
    if on_device and not names.get(e["pid"], "").startswith("/device:"):
      continue
    yield args["hlo_op"], float(e.get("dur", 0.0))


def summarise(directory: str, steps: int = 3, top: int = 15) -> str:
  traces = glob.glob(os.path.join(directory, "**", "*.trace.json.gz"), recursive=True)
  if not traces:
    raise SystemExit(f"{directory}: no *.trace.json.gz below it (bench/train_step.py "
                     "--profile_dir writes one)")
  hlo_path = os.path.join(directory, "step.hlo.txt")
  if not os.path.exists(hlo_path):
    raise SystemExit(f"{hlo_path}: missing (bench/train_step.py --profile_dir writes it)")
  with open(hlo_path) as f:
    names = op_names(f.read())
  with gzip.open(sorted(traces)[-1]) as f:
    trace = json.load(f)
  by_op = collections.Counter()
  for op, us in device_events(trace):
    by_op[op] += us
  by_part = collections.Counter()
  for op, us in by_op.items():
    by_part[part_of(names.get(op, ""))] += us
  total = sum(by_part.values()) or 1.0
  lines = [f"# {directory}: {len(by_op)} ops, {total / steps / 1e3:.2f} ms of device time per "
           f"step ({steps} traced steps)",
           f"{'part':<16} {'ms/step':>9} {'share':>7}"]
  for part in (*PARTS, "other"):
    lines.append(f"{part:<16} {by_part[part] / steps / 1e3:>9.3f} "
                 f"{100 * by_part[part] / total:>6.1f}%")
  lines.append(f"\n{'op':<48} {'part':<14} {'ms/step':>9}  op_name")
  for op, us in by_op.most_common(top):
    name = names.get(op, "")
    lines.append(f"{op[:48]:<48} {part_of(name):<14} {us / steps / 1e3:>9.3f}  {name[-90:]}")
  return "\n".join(lines)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("directory")
  ap.add_argument("--steps", type=int, default=3, help="steps in the trace")
  ap.add_argument("--top", type=int, default=15)
  args = ap.parse_args()
  print(summarise(args.directory, args.steps, args.top))


if __name__ == "__main__":
  main()
