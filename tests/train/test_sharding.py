"""Sharded training: one step on meshes (8,1,1), (2,4,1), (2,2,2) of 8 simulated CPU devices and
on (1,1,1) of one device gives the same loss and updated parameters, and the parameters are
placed as ``mesh.rules`` says (read from each array's ``.sharding``).

Each mesh runs `mesh_step.py` in its own process: the simulated device count is fixed when JAX
starts.
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


def _run_mesh(mesh, out):
  devices = int(np.prod(mesh))
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, str(HERE / "mesh_step.py"), *map(str, mesh), str(out)],
                        env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  f = np.load(out)
  names = list(f["names"])
  return (float(f["loss"]), {n: f[f"p{i}"] for i, n in enumerate(names)},
          dict(zip(names, f["specs"])))


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
  d = tmp_path_factory.mktemp("mesh")
  return {m: _run_mesh(m, d / ("m%d%d%d.npz" % m)) for m in MESHES}


@pytest.mark.parametrize("mesh", MESHES[1:])
def test_same_loss_and_update_on_every_mesh(steps, mesh):
  loss0, params0, _ = steps[(1, 1, 1)]
  loss, params, _ = steps[mesh]
  assert abs(loss - loss0) <= 1e-5
  assert params.keys() == params0.keys()
  for name in params0:
    np.testing.assert_allclose(params[name], params0[name], atol=1e-5, rtol=0, err_msg=name)
  # The step did update the parameters (a no-op step would pass the equality trivially).
  changed = [n for n in params0 if "kernel" in n and "opt_state" not in n]
  assert changed


_WORD = "[0]['encoder']['embeddings']['word_embeddings']['embedding'].value"
_QUERY = ("[0]['encoder']['encoder']['albert_layer_groups'][0]['albert_layers'][0]['attention']"
          "['query']['kernel'].value")
_FFN_OUT = ("[0]['encoder']['encoder']['albert_layer_groups'][0]['albert_layers'][0]"
            "['ffn_output']['kernel'].value")
_LN = "[0]['encoder']['embeddings']['LayerNorm']['scale'].value"
_MU_QUERY = _QUERY.replace("[0]", "[1]['opt_state'][1][0]['mu']", 1)

# Expected placements, from configs/base.py's rules: vocab->tensor, embed->fsdp, mlp->tensor,
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
  _, _, specs = steps[mesh]
  for name, want in EXPECTED[mesh].items():
    assert name in specs, sorted(specs)[:5]
    assert specs[name] == want, (name, specs[name])
