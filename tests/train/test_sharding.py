"""Sharded training: one step on meshes (8,1,1), (2,4,1), (2,2,2) of 8 simulated CPU devices and
on (1,1,1) of one device gives the same loss and the same parameter updates (at lr > 0: every
parameter moves, by the same amount on every mesh), and the parameters are placed as
``mesh.rules`` says (read from each array's ``.sharding``).

The meshes of one device count run `mesh_step.py` in one process: the simulated device count
is fixed when JAX starts.
"""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MESHES = [(1, 1, 1), (8, 1, 1), (2, 4, 1), (2, 2, 2)]


def _run_meshes(meshes, out_dir):
  """Runs ``meshes`` (all of one device count) in one `mesh_step.py` process; ``{mesh: (loss,
  parameters, their partition specs, parameters before the step, lr at step 0)}``."""
  devices = int(np.prod(meshes[0]))
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, str(HERE / "mesh_step.py"), str(out_dir),
                         *(",".join(map(str, m)) for m in meshes)],
                        env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return {m: _read_step(out_dir / ("m%d%d%d.npz" % m)) for m in meshes}


def _read_step(path):
  f = np.load(path)
  names = list(f["names"])
  return (float(f["loss"]), {n: f[f"p{i}"] for i, n in enumerate(names)},
          dict(zip(names, f["specs"])), {n: f[f"b{i}"] for i, n in enumerate(names)},
          float(f["lr0"]))


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
  d = tmp_path_factory.mktemp("mesh")
  by_devices = {}
  for m in MESHES:
    by_devices.setdefault(int(np.prod(m)), []).append(m)
  return {m: step for meshes in by_devices.values() for m, step in _run_meshes(meshes, d).items()}


def _model_params(params):
  """The model's parameters in the train state (``[0]``; ``[1]`` is the optimizer's state; RNG
  counters left out)."""
  return {n: v for n, v in params.items() if n.startswith("[0]") and "['rngs']" not in n}


def _mu(name):
  """The name of Adam's first moment of parameter ``name`` (after step 1: 0.1 x its gradient)."""
  return name.replace("[0]", "[1]['opt_state'][1][0]['mu']", 1)


# Parameters without gradient in this model: the attention key bias and the span head bias shift
# scores under a softmax that is invariant to them (their gradient is float32 round-off, < 1e-7
# of the largest), the pooler is not used by the span head (exactly 0). Every other parameter's
# gradient is > 1e-5 of the largest.
NO_GRADIENT = ("['attention']['key']['bias']", "['pooler']", "['qa_outputs']['bias']")


def test_the_step_moves_every_parameter_with_a_gradient(steps):
  """At lr > 0, Adam's first step moves each parameter entry with a gradient by about lr. Every
  parameter array with a gradient must move; only those of ``NO_GRADIENT`` may stay (a step at lr
  0, or one that drops its update, moves none)."""
  _, after, _, before, lr0 = steps[(1, 1, 1)]
  assert lr0 > 0
  model = _model_params(after)
  assert len(model) > 10
  top = max(np.abs(after[_mu(n)]).max() for n in model)
  has_grad = {n for n in model if np.abs(after[_mu(n)]).max() > 1e-6 * top}
  assert {n for n in model if n not in has_grad} == {
      n for n in model if any(k in n for k in NO_GRADIENT)}
  still = [n for n in has_grad if np.abs(after[n] - before[n]).max() < 0.1 * lr0]
  assert not still, still


@pytest.mark.parametrize("mesh", MESHES[1:])
def test_same_loss_and_update_on_every_mesh(steps, mesh):
  loss0, params0, _, before0, lr0 = steps[(1, 1, 1)]
  loss, params, _, before, lr = steps[mesh]
  assert abs(loss - loss0) <= 1e-5
  assert lr == lr0 > 0
  assert params.keys() == params0.keys()
  for name in _model_params(params0):
    np.testing.assert_array_equal(before[name], before0[name], err_msg=name)  # same start
    # Each update is about lr (Adam); compare the updates themselves at 1% of lr.
    np.testing.assert_allclose(params[name] - before[name], params0[name] - before0[name],
                               atol=1e-2 * lr0, rtol=0, err_msg=name)
  for name in params0:  # the optimizer's state too
    np.testing.assert_allclose(params[name], params0[name], atol=1e-5, rtol=0, err_msg=name)


_WORD = "[0]['encoder']['embeddings']['word_embeddings']['embedding']"
_QUERY = ("[0]['encoder']['encoder']['albert_layer_groups'][0]['albert_layers'][0]['attention']"
          "['query']['kernel']")
_FFN_OUT = ("[0]['encoder']['encoder']['albert_layer_groups'][0]['albert_layers'][0]"
            "['ffn_output']['kernel']")
_LN = "[0]['encoder']['embeddings']['LayerNorm']['scale']"
_MU_QUERY = _QUERY.replace("[0]", "[1]['opt_state'][1][0]['mu']", 1)

# Expected placements, from poi_jax/config/base.py's rules: vocab->tensor, embed->fsdp, mlp->tensor,
# heads->tensor; an axis of size 1 is not used (the dimension stays replicated).
EXPECTED = {
    (1, 1, 1): {_WORD: "(None, None)", _QUERY: "(None, None)", _FFN_OUT: "(None, None)",
                _LN: "(None,)", _MU_QUERY: "(None, None)"},
    (8, 1, 1): {_WORD: "(None, None)", _QUERY: "(None, None)", _FFN_OUT: "(None, None)",
                _LN: "(None,)", _MU_QUERY: "(None, None)"},
    (2, 4, 1): {_WORD: "(None, 'fsdp')", _QUERY: "('fsdp', None)", _FFN_OUT: "(None, 'fsdp')",
                _LN: "('fsdp',)", _MU_QUERY: "('fsdp', None)"},
    (2, 2, 2): {_WORD: "('tensor', 'fsdp')", _QUERY: "('fsdp', 'tensor')",
                _FFN_OUT: "('tensor', 'fsdp')", _LN: "('fsdp',)",
                _MU_QUERY: "('fsdp', 'tensor')"},
}


@pytest.mark.parametrize("mesh", MESHES)
def test_parameter_shardings_follow_the_rules(steps, mesh):
  specs = steps[mesh][2]
  for name, want in EXPECTED[mesh].items():
    assert name in specs, sorted(specs)[:5]
    assert specs[name] == want, (name, specs[name])
