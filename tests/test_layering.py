"""Serving stands apart from training (issue 48): no module of `poi_jax.inference`,
`poi_jax.serve` or the predict CLI reaches `poi_jax.train` or `poi_jax.prepare` through any chain
of imports, module level or inside functions. What both sides need of a trained model, its
files, lives in `poi_jax.model_files`; the faults a run ends with in `poi_jax.faults`. The check
reads the import graph that tests/test_import_cycles.py builds (pure `ast`)."""
from __future__ import annotations

from tests.test_import_cycles import PACKAGE, import_graph

SERVING = ("poi_jax.inference", "poi_jax.serve", "poi_jax.predict")
TRAINING = ("poi_jax.train", "poi_jax.prepare")


def _under(name: str, packages) -> bool:
  return any(name == p or name.startswith(p + ".") for p in packages)


def violations(graph: dict[str, set[str]]) -> list[str]:
  """One ``a -> b -> ... -> training module`` chain for each serving module that reaches
  training code (shortest, breadth first)."""
  out = []
  for start in sorted(n for n in graph if _under(n, SERVING)):
    parent, queue, seen = {start: None}, [start], {start}
    while queue:
      node = queue.pop(0)
      if _under(node, TRAINING):
        chain = [node]
        while parent[chain[-1]] is not None:
          chain.append(parent[chain[-1]])
        out.append(" -> ".join(reversed(chain)))
        break
      for nxt in sorted(graph.get(node, ())):
        if nxt not in seen:
          seen.add(nxt)
          parent[nxt] = node
          queue.append(nxt)
  return out


def test_serving_never_imports_training_code():
  graph = import_graph(PACKAGE)
  assert any(_under(n, ("poi_jax.serve",)) for n in graph)
  assert any(_under(n, ("poi_jax.inference",)) for n in graph)
  assert violations(graph) == []


def test_a_planted_inference_to_train_import_is_caught():
  graph = import_graph(PACKAGE)
  graph["poi_jax.model_files.export"] = graph["poi_jax.model_files.export"] | {
      "poi_jax.train.loop"}
  found = violations(graph)
  assert any(v.startswith("poi_jax.inference.") and v.endswith(
      "poi_jax.model_files.export -> poi_jax.train.loop") for v in found), found
  assert any(v.startswith("poi_jax.serve.") for v in found)
