"""TPU slices compiled for real on a CPU (issue 39, item 3): the training steps of POI-Net
(SQuAD 2.0), DUMA (DREAM) and QOPN (NewsQA), tiny and MiniLM-shaped, compiled by the TPU compiler
of ``libtpu`` (the ``[tpu-plan]`` extra) for a v5e and a v4 slice of 4 chips with fsdp=4, so that
an op or a sharding a TPU cannot run fails here, without a TPU (the default suite: one tiny step of
each system, over the two generations; every other pair with `-m slow`). Each compiled step must fit a
chip's HBM, pick no CPU kernel (``model.attention=auto`` chooses from the mesh's devices), leave
no array over 1M elements replicated, and its matmul FLOPs (`poi_jax.sizing.hlo_stats`, loops
times their trip counts) lie within a factor of the 6·N·tokens estimate: [0.7, 1.6] for the MiniLM
steps; up to 4 for the tiny ones, whose 30522 x 32 word table's one-hot gradient is 2-3x the
rest of a 64-wide model. One child process per slice compiles every case."""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES = ["squad2:tiny", "squad2:minilm", "dream:tiny,duma", "dream:minilm,duma",
         "newsqa:tiny", "newsqa:minilm"]
TOPOLOGIES = ["v5e:2x2", "v4:2x2x1"]
_RESULTS = {}


def _selected(request, topology):
  """The cases of ``topology`` this session runs (``-k`` may pick some), compiled together."""
  picked = {item.callspec.params["case"] for item in request.session.items
            if getattr(item, "callspec", None) is not None
            and item.callspec.params.get("topology") == topology
            and "case" in item.callspec.params}
  return [c for c in CASES if c in picked] + sorted(picked - set(CASES))


def _run(request, topology):
  if topology in _RESULTS:
    return _RESULTS[topology]
  if importlib.util.find_spec("libtpu") is None:
    pytest.skip("could not import 'libtpu' (pip install -e \".[tpu-plan]\")")
  env = dict(os.environ, JAX_PLATFORMS="cpu", TPU_SKIP_MDS_QUERY="1",
             ALLOW_MULTIPLE_LIBTPU_LOAD="1",
             TPU_WORKER_HOSTNAMES="localhost", TF_CPP_MIN_LOG_LEVEL="3",
             JAX_DEFAULT_MATMUL_PRECISION="default",
             PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
  try:
    proc = subprocess.run([sys.executable, str(HERE / "tpu_sizing.py"), topology,
                           *_selected(request, topology)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    out, err = proc.stdout, (proc.stderr[-4000:] if proc.returncode else "")
  except subprocess.TimeoutExpired as e:
    out, err = (e.stdout or b"").decode(), f"timed out after {e.timeout} s"
  rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
  # kept even when the child failed, so that each test reports its own case (no second run)
  _RESULTS[topology] = {r["case"]: r for r in rows}
  _RESULTS[topology]["error"] = err
  return _RESULTS[topology]


def _case(request, topology, case):
  results = _run(request, topology)
  assert case in results, f"{case} did not compile for {topology}:\n{results['error']}"
  return results[case]


@pytest.mark.required
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_fsdp_all_gather_bytes_are_read_from_the_tpu_program(request, topology):
  r = _case(request, topology, "all-gather")
  n = r["devices"]
  assert r["bytes"] == {"all-gather": 1024 * 512 * 4}, r
  assert r["wire"]["all-gather"] == pytest.approx(1024 * 512 * 4 * (n - 1) / n)


# The default suite compiles one tiny step of each system, split over the two TPU generations
# (about a minute of TPU compilation on 2 cores); every other pair, the MiniLM-shaped steps
# included (4 minutes each there), runs in the slow suite.
DEFAULT_PAIRS = {("v5e:2x2", "squad2:tiny"), ("v4:2x2x1", "dream:tiny,duma"),
                 ("v5e:2x2", "newsqa:tiny")}
PAIRS = [pytest.param(topology, case, id=f"{topology}-{case}",
                      marks=() if (topology, case) in DEFAULT_PAIRS else (pytest.mark.slow,))
         for topology in TOPOLOGIES for case in CASES]


@pytest.mark.required
@pytest.mark.parametrize("topology,case", PAIRS)
def test_training_step_compiles_for_a_tpu_slice(request, topology, case):
  r = _case(request, topology, case)
  assert r["kind"].startswith("TPU v5" if topology.startswith("v5e") else "TPU v4"), r
  # v4 topologies expose each chip's 2 TensorCores as devices: each gets half a chip's 32 GiB
  assert (r["cores_per_chip"], r["hbm"]) == ((1, 16e9) if topology.startswith("v5e")
                                             else (2, 16 * 2**30)), r
  assert r["attention"] != "cpu_kernel", r
  assert not [t for t in r["custom_calls"] if "cpu" in t.lower()], r
  assert r["replicated"] == [], r
  assert 0 < r["total"] <= r["hbm"], r
  ratio = r["flops"] / r["estimate"]
  lo, hi = (0.7, 1.6) if "minilm" in case else (0.5, 4.0)
  assert lo <= ratio <= hi, (ratio, r)
  # QOPN's blocks are scanned: their matmuls count once per block (each loop body counted
  # once would undercount). cost_analysis is not compared: it adds elementwise FLOPs, which
  # dominate a 64-wide model.
  if case.startswith("newsqa"):
    assert any(t and t > 1 for _, t in r["loops"]), r
    assert r["flops"] > r["flops_once"], r


@pytest.mark.slow
@pytest.mark.parametrize("topology,case", [("v5e:4x4", "windowed")])
def test_windowed_collective_matmul_flops_are_exact(request, topology, case):
  """On 16 v5e chips the TPU compiler writes FSDP matmuls as windowed loops (unrolled by 2, the
  counter stepping by 2; batched convolutions padded to a window of 2): the HLO count must equal
  the exact ``10 M K N / n``, neither the loop bound's 2x nor the window's."""
  r = _case(request, topology, case)
  assert r["loops"] and all(t == 4 for _, t in r["loops"]), r
  assert r["flops"] == r["exact"], r
