"""What a compiled XLA program does per step, read from its optimized HLO text
(``jax.stages.Compiled.as_text()``): matmul FLOPs and collective bytes, each op weighted by how
many times it runs.

Why not ``Compiled.cost_analysis()`` alone: XLA's cost analysis counts the body of a ``while``
loop once, whatever its trip count, so a scanned layer stack (``model.scan_layers``, QOPN's
``scan_blocks``, POI-Net's ``lax.scan`` over turns) is undercounted by the number of layers
(issue 39: ALBERT-xxlarge scanned, 1.6e12 FLOPs per chip against ~2e13 expected), and its
``optimal_seconds`` came back negative for real steps. Here every computation's *multiplicity*
is the number of times it runs: 1 for the entry, a ``while`` body's caller's multiplicity times
the loop's trip count (the ``known_trip_count`` XLA records in the loop's backend config, else
``ceil((N - start) / step)`` read from the ``i < N`` compare of its condition, the body's
``i + step`` and the loop's initial tuple), a fusion, call or custom call's callee the
caller's. The FLOPs are those of ``dot`` and ``convolution`` instructions (TPU lowers matmuls to
convolutions, batched ones with their batch dims as dilated "spatial" dims):
``2 x output elements x contracted elements``; elementwise work is not counted (a few percent of
a transformer step).

Collectives (per device, per step): ``all-gather`` (its result: the gathered buffer),
``reduce-scatter`` (its operand: result x group), ``all-reduce``, ``all-to-all``,
``collective-permute`` (their result); an asynchronous pair counts once (at ``-done``, or the
``-start`` of an all-reduce, whose ``-done`` is the same buffer). `CollectiveStats.wire_bytes`
turns them into what a ring moves per device ((n-1)/n of an all-gather's buffer, 2 (n-1)/n of an
all-reduce's).
"""
from __future__ import annotations

import collections
import dataclasses
import math
import re

_DTYPE_BYTES = {"pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
                "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
                "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_CALLEE = re.compile(r"\b(calls|to_apply|body|condition|true_computation|false_computation)="
                     r"%?([\w.\-]+)")
_CALLEE_LIST = re.compile(r"\b(?:branch_computations|called_computations)=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_INT_TYPES = ("s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64")
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")


def _arrays(shape_text: str) -> list[tuple[str, tuple[int, ...]]]:
  """``[(dtype, dims)]`` of every array in a (possibly tuple) HLO shape."""
  return [(dt, tuple(int(d) for d in dims.split(",") if d))
          for dt, dims in _ARRAY.findall(shape_text) if dt in _DTYPE_BYTES]


def _nbytes(shape_text: str) -> int:
  return sum(_DTYPE_BYTES[dt] * math.prod(dims) for dt, dims in _arrays(shape_text))


def _split_shape(rest: str) -> tuple[str, str]:
  """``"f32[2,3]{1,0} dot(...)"`` -> ``("f32[2,3]{1,0}", "dot(...)")``; tuple shapes in parens."""
  if rest.startswith("("):
    depth = 0
    for i, ch in enumerate(rest):
      depth += ch == "("
      depth -= ch == ")"
      if depth == 0:
        return rest[:i + 1], rest[i + 1:].strip()
  shape, _, tail = rest.partition(" ")
  return shape, tail.strip()


@dataclasses.dataclass
class _Instr:
  name: str
  shape: str
  op: str
  operands: list[str]
  attrs: str
  args: str = ""  # the text inside the parentheses (a constant's value)
  root: bool = False


@dataclasses.dataclass
class _Computation:
  name: str
  instrs: list[_Instr] = dataclasses.field(default_factory=list)
  entry: bool = False


def parse(text: str) -> dict[str, _Computation]:
  comps: dict[str, _Computation] = {}
  current = None
  for line in text.splitlines():
    if not line.strip() or line.lstrip().startswith(("//", "HloModule")):
      continue
    if not line[0].isspace():
      m = _HEADER.match(line)
      if m:
        current = comps[m.group(1)] = _Computation(m.group(1), entry=line.startswith("ENTRY"))
      elif line.strip() == "}":
        current = None
      continue
    m = _INSTR.match(line)
    if current is None or not m:
      continue
    shape, tail = _split_shape(m.group(2))
    op, _, args = tail.partition("(")
    depth, end = 1, len(args)
    for i, ch in enumerate(args):
      depth += (ch == "(") - (ch == ")")
      if depth == 0:
        end = i
        break
    operands = re.findall(r"%([\w.\-]+)", args[:end])
    current.instrs.append(_Instr(m.group(1), shape, op.strip(), operands, args[end + 1:],
                                 args[:end], line.lstrip().startswith("ROOT ")))
  return comps


def _int_constant(name: str, comp: _Computation | None) -> int | None:
  """The value of integer constant ``name`` of ``comp`` (through copies), else None."""
  if comp is None:
    return None
  by_name = {i.name: i for i in comp.instrs}
  i = by_name.get(name)
  while i is not None and i.op in ("copy", "bitcast", "convert") and i.operands:
    i = by_name.get(i.operands[0])
  if (i is not None and i.op == "constant" and i.shape.split("[")[0] in _INT_TYPES
      and re.fullmatch(r"-?\d+", i.args.strip())):
    return int(i.args)
  return None


def _tuple_element(comp: _Computation | None, tuple_name: str | None, index: int) -> str | None:
  """The name of operand ``index`` of ``comp``'s tuple instruction ``tuple_name`` (its ROOT
  when None)."""
  if comp is None or not comp.instrs:
    return None
  if tuple_name is None:
    t = next((i for i in comp.instrs if i.root), comp.instrs[-1])
  else:
    t = next((i for i in comp.instrs if i.name == tuple_name), None)
  if t is None or t.op != "tuple" or index >= len(t.operands):
    return None
  return t.operands[index]


def _trip_count(instr: _Instr, comps, caller: _Computation | None = None) -> int | None:
  """A ``while``'s trip count: XLA's ``known_trip_count``, else read from the loop: the
  condition's ``i < N`` compare on tuple element ``k``, the body's step for element ``k``
  (``i + c``; the TPU compiler unrolls its windowed collective matmuls by 2 and steps by 2, so
  ``N`` alone counts their bodies twice) and ``i``'s start in the loop's initial tuple:
  ``ceil((N - start) / c)``."""
  m = _TRIP.search(instr.attrs)
  if m:
    return int(m.group(1))
  cond = re.search(r"\bcondition=%?([\w.\-]+)", instr.attrs)
  comp = comps.get(cond.group(1)) if cond else None
  if comp is None:
    return None
  by_name = {i.name: i for i in comp.instrs}
  for i in comp.instrs:
    if i.op != "compare" or "direction=LT" not in i.attrs or len(i.operands) != 2:
      continue
    bound = _int_constant(i.operands[1], comp)
    if bound is None:
      continue
    counter = by_name.get(i.operands[0])
    index = re.search(r"\bindex=(\d+)", counter.attrs) if counter is not None else None
    if counter is None or counter.op != "get-tuple-element" or index is None:
      return bound
    k = int(index.group(1))
    body_m = re.search(r"\bbody=%?([\w.\-]+)", instr.attrs)
    body = comps.get(body_m.group(1)) if body_m else None
    step, start = 1, 0
    nxt = _tuple_element(body, None, k)
    body_by_name = {j.name: j for j in body.instrs} if body else {}
    update = body_by_name.get(nxt) if nxt else None
    if update is not None and update.op == "add" and len(update.operands) == 2:
      for a, b in (update.operands, update.operands[::-1]):
        src = body_by_name.get(a)
        c = _int_constant(b, body)
        if (src is not None and src.op == "get-tuple-element" and c and c > 0
            and re.search(rf"\bindex={k}\b", src.attrs)):
          step = c
          break
    if caller is not None and instr.operands:
      init = _int_constant(_tuple_element(caller, instr.operands[0], k) or "", caller)
      start = init if init is not None else 0
    return max(0, -(-(bound - start) // step))
  return None


def multiplicities(comps: dict[str, _Computation]) -> tuple[dict[str, float], list[tuple]]:
  """How many times each computation runs per call of the entry, and the ``while`` loops found:
  ``[(name, trip count or None)]`` (an unknown trip count counts as 1)."""
  calls = collections.defaultdict(list)  # caller -> [(callee, factor)]
  loops = []
  for comp in comps.values():
    for i in comp.instrs:
      trip = None
      if i.op == "while":
        trip = _trip_count(i, comps, comp)
        loops.append((i.name, trip))
      for kind, callee in _CALLEE.findall(i.attrs):
        factor = (trip or 1) if kind in ("body", "condition") else 1
        calls[comp.name].append((callee, factor))
      for group in _CALLEE_LIST.findall(i.attrs):
        for callee in re.findall(r"%?([\w.\-]+)", group):
          calls[comp.name].append((callee, 1))
  mult = collections.defaultdict(float)
  order = [c.name for c in comps.values() if c.entry]
  for name in order:
    mult[name] = 1.0
  # HLO's call graph is acyclic: propagate in topological order (callers before callees).
  indeg = collections.Counter(callee for edges in calls.values() for callee, _ in edges)
  ready = [n for n in comps if indeg[n] == 0]
  while ready:
    name = ready.pop()
    for callee, factor in calls.get(name, ()):
      mult[callee] += mult[name] * factor
      indeg[callee] -= 1
      if indeg[callee] == 0:
        ready.append(callee)
  return dict(mult), loops


def _dot_flops(i: _Instr, shapes: dict[str, str]) -> float:
  out = _arrays(i.shape)
  if not out:
    return 0.0
  out_elems = math.prod(out[0][1])
  if i.op == "dot":
    lhs = _arrays(shapes.get(i.operands[0], "")) if i.operands else []
    m = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", i.attrs)
    if not lhs or not m:
      return 0.0
    dims = lhs[0][1]
    contracted = math.prod(dims[int(d)] for d in m.group(1).split(",") if d)
    return 2.0 * out_elems * contracted
  # convolution: dim_labels=<lhs>_<rhs>-><out>; per output element, the kernel's input
  # features ('i') times the window taps that land on real input (not padding, not a dilation
  # hole), counted per spatial dim.
  m = re.search(r"dim_labels=([^_]+)_([^-]+)->(\S+?)[,\s]", i.attrs + " ")
  lhs = _arrays(shapes.get(i.operands[0], "")) if i.operands else []
  rhs = _arrays(shapes.get(i.operands[1], "")) if len(i.operands) > 1 else []
  if not m or not rhs or not lhs:
    return 0.0
  lhs_labels, rhs_labels, out_labels = m.groups()
  lhs_dims, rhs_dims, out_dims = lhs[0][1], rhs[0][1], out[0][1]
  if (len(lhs_labels), len(rhs_labels), len(out_labels)) != (len(lhs_dims), len(rhs_dims),
                                                              len(out_dims)):
    return 0.0
  in_features = math.prod(d for lab, d in zip(rhs_labels, rhs_dims) if lab == "i")
  window = _window(i.attrs)
  taps = 1
  for lab, size in zip(rhs_labels, rhs_dims):
    if not lab.isdigit():
      continue
    k = int(lab)
    w = {key: vals[k] if k < len(vals) else default
         for key, (vals, default) in window.items()}
    taps *= _valid_taps(out_dims[out_labels.index(lab)], lhs_dims[lhs_labels.index(lab)],
                        size, w["stride"], w["pad_lo"], w["lhs_dilate"], w["rhs_dilate"])
  out_spatial = math.prod(d for lab, d in zip(out_labels, out_dims) if lab.isdigit())
  # taps counts (output position, window tap) pairs over the spatial dims: per non-spatial
  # output element, sum over its spatial positions
  return 2.0 * (out_elems / max(out_spatial, 1)) * in_features * taps


def _window(attrs: str) -> dict[str, tuple[list[int], int]]:
  """A convolution's ``window={size=.. stride=.. pad=lo_hi.. lhs_dilate=.. rhs_dilate=..}`` as
  per-spatial-dim lists, each with its default."""
  m = re.search(r"window=\{([^}]*)\}", attrs)
  text = m.group(1) if m else ""

  def ints(key):
    f = re.search(rf"\b{key}=([0-9x]+)", text)
    return [int(x) for x in f.group(1).split("x")] if f else []
  pad = re.search(r"\bpad=([0-9_x-]+)", text)
  pad_lo = [int(p.split("_")[0]) for p in pad.group(1).split("x")] if pad else []
  return {"stride": (ints("stride"), 1), "pad_lo": (pad_lo, 0),
          "lhs_dilate": (ints("lhs_dilate"), 1), "rhs_dilate": (ints("rhs_dilate"), 1)}


def _valid_taps(out_size: int, in_size: int, window: int, stride: int, pad_lo: int,
                lhs_dilate: int, rhs_dilate: int) -> int:
  """How many (output position, window tap) pairs of one spatial dim read a real input
  element. TPU writes a batched matmul as a convolution whose batch dim is spatial: with
  ``lhs_dilate`` = the window size, or with ``pad=1_1`` and a window of 2 over an input of 1, each
  output position meets one real input, not ``window`` of them."""
  if out_size * window > 4_000_000:  # no real HLO has this; count without padding or holes
    return out_size * -(-window // lhs_dilate)
  last = (in_size - 1) * lhs_dilate
  count = 0
  for o in range(out_size):
    base = o * stride - pad_lo
    for k in range(window):
      pos = base + k * rhs_dilate
      if 0 <= pos <= last and pos % lhs_dilate == 0:
        count += 1
  return count


def _group_size(attrs: str, n_devices: int) -> int:
  m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)  # iota: [groups, size]<=[...]
  if m:
    return int(m.group(2))
  m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)  # named mesh axes
  if m:
    sizes = dict(re.findall(r"'([^']+)'=(\d+)", m.group(1)))
    names = re.findall(r"'([^']+)'", m.group(2))
    return math.prod(int(sizes[n]) for n in names) if names else n_devices
  m = re.search(r"replica_groups=\{\{([0-9,]*)\}", attrs)
  if m:
    return len([x for x in m.group(1).split(",") if x])
  m = re.search(r"source_target_pairs=", attrs)
  return 2 if m else n_devices


@dataclasses.dataclass
class CollectiveStats:
  """Per device, per step, by collective kind: ``count`` (ops run), ``bytes`` (the buffer as
  defined in the module docstring) and ``wire`` (what a ring moves per device)."""
  count: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(float))
  bytes: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(float))
  wire: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(float))

  @property
  def wire_bytes(self) -> float:
    return sum(self.wire.values())


@dataclasses.dataclass
class HloStats:
  matmul_flops: float  # per device per step, loop bodies x trip count
  matmul_flops_once: float  # the same with every computation counted once (cost_analysis-like)
  collectives: CollectiveStats
  loops: list  # [(while name, trip count or None)]
  custom_calls: list  # custom-call targets (e.g. a CPU FFI kernel a TPU cannot run)


def analyze(text: str, n_devices: int = 1) -> HloStats:
  """`HloStats` of one compiled module's HLO text (``n_devices``: for groups that name none)."""
  comps = parse(text)
  mult, loops = multiplicities(comps)
  by_name = {i.name: i for c in comps.values() for i in c.instrs}
  shapes = {name: i.shape for name, i in by_name.items()}
  flops = flops_once = 0.0
  coll = CollectiveStats()
  targets = set()
  for comp in comps.values():
    k = mult.get(comp.name, 0.0)
    for i in comp.instrs:
      if i.op in ("dot", "convolution"):
        f = _dot_flops(i, shapes)
        flops += k * f
        flops_once += f
        continue
      if i.op == "custom-call":
        t = re.search(r'custom_call_target="([^"]+)"', i.attrs)
        if t:
          targets.add(t.group(1))
        continue
      kind = i.op.removesuffix("-done").removesuffix("-start")
      if kind not in COLLECTIVES or k == 0:
        continue
      if i.op.endswith("-start") and kind != "all-reduce":
        continue  # counted at its -done
      if i.op == "all-reduce-done":
        continue  # counted at its -start
      start = by_name.get(i.operands[0]) if i.op.endswith("-done") and i.operands else None
      n = _group_size(start.attrs if start is not None else i.attrs, n_devices)
      out = _nbytes(i.shape)
      if i.op == "all-reduce-start" and i.shape.startswith("("):
        out = _nbytes(i.shape) / 2 if len(_arrays(i.shape)) % 2 == 0 else out
      buf = out * n if kind == "reduce-scatter" else out
      wire = {"all-gather": buf * (n - 1) / n, "reduce-scatter": buf * (n - 1) / n,
              "all-reduce": 2 * buf * (n - 1) / n, "all-to-all": buf * (n - 1) / n,
              "collective-permute": buf}[kind]
      coll.count[kind] += k
      coll.bytes[kind] += k * buf
      coll.wire[kind] += k * wire
  return HloStats(flops, flops_once, coll, loops, sorted(targets))
