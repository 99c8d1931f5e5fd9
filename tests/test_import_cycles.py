"""No import cycle between poi_jax's modules (issue 38): data flows one way, and a function-local
import must not hide a circle. Pure `ast`: every ``import`` and ``from ... import`` of every
module, at module level and inside functions, relative and absolute, gives an edge of the import
graph between the package's modules; any cycle fails, named module by module."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "poi_jax"


def module_names(package: pathlib.Path) -> dict[str, pathlib.Path]:
  """``{dotted module name: file}`` for every ``.py`` under ``package`` (a package is named by
  its ``__init__.py``)."""
  out = {}
  for path in sorted(package.rglob("*.py")):
    parts = path.relative_to(package.parent).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


def imported(path: pathlib.Path, name: str, modules: dict[str, pathlib.Path]) -> set[str]:
  """The modules of ``modules`` that ``path`` (the module ``name``) imports, at any depth.
  ``from pkg import x`` names the module ``pkg.x`` when there is one, else ``pkg`` itself."""
  is_package = path.name == "__init__.py"
  out = set()
  for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      if node.level:  # relative: against the module's package
        package = name.split(".") if is_package else name.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
      else:
        base = node.module
      targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                 for a in node.names]
    else:
      continue
    for target in targets:
      # ``import a.b.c`` of a name that is not a module: its nearest enclosing module.
      while target and target not in modules:
        target = target.rpartition(".")[0]
      if target and target != name:
        out.add(target)
  return out


def import_graph(package: pathlib.Path) -> dict[str, set[str]]:
  modules = module_names(package)
  return {name: imported(path, name, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one module
  (Tarjan's algorithm, iterative)."""
  index, low, on_stack, stack, components = {}, {}, set(), [], []
  counter = 0
  for root in sorted(graph):
    if root in index:
      continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = counter
    counter += 1
    stack.append(root)
    on_stack.add(root)
    while work:
      node, edges = work[-1]
      for nxt in edges:
        if nxt not in index:
          index[nxt] = low[nxt] = counter
          counter += 1
          stack.append(nxt)
          on_stack.add(nxt)
          work.append((nxt, iter(sorted(graph.get(nxt, ())))))
          break
        if nxt in on_stack:
          low[node] = min(low[node], index[nxt])
      else:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
          component = []
          while True:
            m = stack.pop()
            on_stack.discard(m)
            component.append(m)
            if m == node:
              break
          if len(component) > 1:
            components.append(set(component))
  return [_cycle_in(graph, c) for c in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
  """A shortest cycle through the component's first module (breadth-first)."""
  start = min(component)
  parent, frontier = {start: None}, [start]
  while frontier:
    nxt_frontier = []
    for node in frontier:
      for nxt in sorted(graph[node] & component):
        if nxt == start:
          path = [node]
          while parent[path[-1]] is not None:
            path.append(parent[path[-1]])
          return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
        if nxt not in parent:
          parent[nxt] = node
          nxt_frontier.append(nxt)
    frontier = nxt_frontier
  raise AssertionError(f"no cycle in component {sorted(component)}")


def _describe(cycles: list[list[str]]) -> str:
  return "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_package_has_no_import_cycle():
  graph = import_graph(PACKAGE)
  assert len(graph) > 50 and "poi_jax.train.loop" in graph
  cycles = find_cycles(graph)
  assert cycles == [], _describe(cycles)


def test_nothing_under_train_imports_inference_or_serving():
  graph = import_graph(PACKAGE)
  wrong = {m: sorted(t for t in targets
                     if t.startswith(("poi_jax.inference", "poi_jax.serve")))
           for m, targets in graph.items() if m.startswith("poi_jax.train")}
  assert {m: t for m, t in wrong.items() if t} == {}


def test_a_planted_cycle_is_found_and_named(tmp_path):
  """The check itself can fail: a cycle through a relative, a function-local and an absolute
  import, in a package of its own."""
  pkg = tmp_path / "pkg"
  (pkg / "sub").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "sub" / "__init__.py").write_text("")
  (pkg / "a.py").write_text("from .sub import b\n")
  (pkg / "sub" / "b.py").write_text("def f():\n  from pkg.sub import c  # hidden in a function\n")
  (pkg / "sub" / "c.py").write_text("import pkg.a\n")
  (pkg / "d.py").write_text("from pkg import a\n")  # imports into the cycle, not part of it
  graph = import_graph(pkg)
  assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.sub.c"}
  cycles = find_cycles(graph)
  assert cycles == [["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]], cycles
  print(_describe(cycles))
  # Broken at one edge: no cycle.
  (pkg / "sub" / "c.py").write_text("import json\n")
  assert find_cycles(import_graph(pkg)) == []
