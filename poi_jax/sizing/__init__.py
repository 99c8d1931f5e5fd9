"""Sizing a run before renting it: a config's training step compiled ahead of time for a mesh of
devices that need not be attached, and what the compiled program says about one step.

Devices: simulated CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N``, set
before JAX starts) for the GPU rows, or a TPU slice's devices from
``jax.experimental.topologies.get_topology_desc`` (needs only ``libtpu``: the ``[tpu-plan]``
extra; `tpu_devices`), which the real TPU compiler compiles for on this CPU (MaxText's
``train_compile.py`` does the same). Nothing is allocated and no step runs: the model and
optimizer are ``nnx.eval_shape``'d, the batch is ``ShapeDtypeStruct``s, and the engine's own
jitted step (`poi_jax.train.step.jit_steps`, its shardings from ``mesh.rules``) is lowered and
compiled.

The paper configs name hub checkpoints (``model.init_from``), which are not read here: the
encoder is built with random weights from `PAPER_ENCODERS` (the hub configs' shapes). The batch's
arrays come from the task itself: its ``featurize`` run on a probe record (`batch_spec`).

`size_step` returns a `StepSize`: per-device state bytes (from the shardings), the compiled
memory (``memory_analysis``), FLOPs (``cost_analysis`` raw, which counts a loop body once, and
`poi_jax.sizing.hlo_stats`' matmul FLOPs with every loop body times its trip count), a 6·N·tokens
estimate, the bytes of each collective kind, the arrays over 1M elements left replicated, and the
attention kernel the mesh's platform chose (`poi_jax.layers.attention.choose`). `project` turns
one into a step time on named hardware (`HARDWARE`, vendors' public figures) as a roofline.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Sequence

import jax
import ml_collections
import numpy as np
from flax import nnx

from poi_jax.sizing import hlo_stats
from poi_jax.train import mesh as mesh_lib

_COMMON = dict(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12,
               max_position_embeddings=512, type_vocab_size=2, vocab_size=30522)
# The hub checkpoints the paper configs start from: their config.json's shapes (random weights
# of the same architecture; nothing is downloaded).
PAPER_ENCODERS = {
    "albert/albert-xxlarge-v2": dict(
        _COMMON, model_type="albert", vocab_size=30000, embedding_size=128, hidden_size=4096,
        num_hidden_layers=12, num_attention_heads=64, intermediate_size=16384,
        num_hidden_groups=1, inner_group_num=1, hidden_act="gelu_new", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0),
    "albert/albert-base-v2": dict(
        _COMMON, model_type="albert", vocab_size=30000, embedding_size=128, hidden_size=768,
        num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        num_hidden_groups=1, inner_group_num=1, hidden_act="gelu_new", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0),
    "google-bert/bert-large-uncased": dict(
        _COMMON, model_type="bert", hidden_size=1024, num_hidden_layers=24,
        num_attention_heads=16, intermediate_size=4096, hidden_act="gelu"),
    "FacebookAI/roberta-large": dict(
        _COMMON, model_type="roberta", vocab_size=50265, max_position_embeddings=514,
        type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5, hidden_size=1024,
        num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, hidden_act="gelu"),
    "FacebookAI/roberta-base": dict(
        _COMMON, model_type="roberta", vocab_size=50265, max_position_embeddings=514,
        type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5, hidden_size=768,
        num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, hidden_act="gelu"),
}
@dataclasses.dataclass(frozen=True)
class Hardware:
  """One accelerator: dense bf16 peak (FLOP/s), memory (bytes), HBM bandwidth (bytes/s), the
  interconnect bandwidth one device drives in one direction (bytes/s), and the source."""
  name: str
  peak_flops: float
  memory: float
  hbm_bw: float
  link_bw: float
  source: str


GB = 1e9
HARDWARE = {h.name: h for h in (
    Hardware("H100", 989e12, 80 * GB, 3.35e12, 450 * GB,
             "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 989 TFLOPS bf16 dense, 80 GB HBM3 "
             "3.35 TB/s, NVLink 900 GB/s bidirectional)"),
    Hardware("H200", 989e12, 141 * GB, 4.8e12, 450 * GB,
             "NVIDIA H200 Tensor Core GPU datasheet (SXM: 989 TFLOPS bf16 dense, 141 GB HBM3e "
             "4.8 TB/s, NVLink 900 GB/s bidirectional)"),
    Hardware("v4", 275e12, 32 * 2**30, 1.2e12, 4.5 * 50 * GB,
             "Google Cloud TPU v4 docs (275 TFLOPs bf16, 32 GiB HBM2 1200 GBps); ICI: TPU v4 "
             "paper (Jouppi et al., ISCA 2023), 6 links of ~50 GB/s, 4.5 driven by one ring "
             "step assumed"),
    Hardware("v5e", 197e12, 16 * GB, 819 * GB, 200 * GB,
             "Google Cloud TPU v5e docs (197 TFLOPs bf16, 16 GB HBM2 819 GBps, ICI 1600 Gbps)"),
    Hardware("v5p", 459e12, 95 * GB, 2765 * GB, 600 * GB,
             "Google Cloud TPU v5p docs (459 TFLOPs bf16, 95 GB HBM2e 2765 GBps, ICI 4800 "
             "Gbps)"),
    Hardware("v6e", 918e12, 32 * GB, 1640 * GB, 448 * GB,
             "Google Cloud TPU v6e (Trillium) docs (918 TFLOPs bf16, 32 GB HBM 1640 GBps, ICI "
             "3584 Gbps)"),
)}
# `device_kind` of a topology's devices -> `HARDWARE` name.
TPU_KINDS = {"TPU v4": "v4", "TPU v5 lite": "v5e", "TPU v5p": "v5p", "TPU v5": "v5p",
             "TPU v6 lite": "v6e", "TPU v6e": "v6e"}


def tpu_devices(topology: str) -> list:
  """The devices of a TPU slice (``"v5e:4x4"``, ``"v4:2x2x2"``), for compiling only: needs
  ``libtpu`` importable (``pip install ".[tpu-plan]"``) and ``TPU_SKIP_MDS_QUERY=1``."""
  from jax.experimental import topologies
  return list(topologies.get_topology_desc(topology_name=topology, platform="tpu").devices)


def sizing_config(config: ml_collections.ConfigDict, mesh: Sequence[int], *,
                  batch: int | None = None, seq: int | None = None
                  ) -> ml_collections.ConfigDict:
  """``config`` with the mesh ``(data, fsdp, tensor)``, optionally another global batch and
  sequence length, and a paper encoder named by ``model.init_from`` replaced by its shape."""
  c = ml_collections.ConfigDict(config.to_dict())
  if c.model.init_from in PAPER_ENCODERS:
    c.model.encoder = ml_collections.ConfigDict(PAPER_ENCODERS[c.model.init_from])
    c.model.init_from = ""
  c.mesh.data, c.mesh.fsdp, c.mesh.tensor = (int(x) for x in mesh)
  if batch:
    c.train.batch_size = int(batch)
  if seq:
    c.data.max_seq_length = int(seq)
  return c


def batch_spec(config: ml_collections.ConfigDict, task=None) -> dict[str, jax.ShapeDtypeStruct]:
  """The model's batch arrays at ``train.batch_size`` (global) as ``ShapeDtypeStruct``s, plus
  ``example_mask``: the task's ``featurize`` on a probe record, with the offline MiniLM
  tokenizer (shapes depend on the config, not on the vocabulary)."""
  from poi_jax import tasks
  from poi_jax.models import encoders
  task = task or tasks.get_task(config.task)
  tok = encoders.load.load_tokenizer(encoders.resolve_checkpoint("minilm"))
  # The extractive and NQ featurizers give their arrays' shapes for no record.
  probe = task.probe_records() if task.probe_records is not None else []
  features = task.featurize(probe, tok, config, is_training=True)
  b = int(config.train.batch_size)
  spec = {k: jax.ShapeDtypeStruct((b,) + v.shape[1:], v.dtype)
          for k, v in features.arrays.items() if k in task.model_keys}
  spec["example_mask"] = jax.ShapeDtypeStruct((b,), np.float32)
  return spec


@dataclasses.dataclass
class StepSize:
  """One compiled training step, per device."""
  devices: int
  device_kind: str
  mesh: tuple
  batch: dict  # name -> (shape, dtype)
  tokens: int  # batch x sequence positions of the encoder per step (whole mesh)
  params: int  # model parameters
  matmul_params: int  # parameters applied as matmuls per token (ALBERT's shared layer x layers)
  state_bytes: int  # params + optimizer state, this device's shards
  state_bytes_total: int
  large_replicated: list
  memory: dict  # argument / output / alias / temp / total bytes (memory_analysis)
  cost_flops: float | None  # cost_analysis()["flops"]: loop bodies counted once
  cost_optimal_seconds: float | None
  hlo: hlo_stats.HloStats
  estimate_flops: float  # (6 N + 12 layers seq d) x tokens / devices
  attention: str
  compile_seconds: float
  encoder: dict
  # TensorCores per chip when each core is a device (a v4 topology without megacore: 8
  # devices for v4:2x2x1's 4 chips); `project` then gives each device its share of the chip.
  cores_per_chip: int = 1


def _memory(compiled) -> dict:
  m = compiled.memory_analysis()
  if m is None:
    return {}
  out = {k: getattr(m, f"{k}_size_in_bytes") for k in ("argument", "output", "alias", "temp",
                                                        "generated_code")}
  out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
  return out


def _matmul_params(state, enc_cfg) -> int:
  """Parameters used as matmul weights per token: kernels (not embedding tables), ALBERT's
  layer groups counted once per layer they serve."""
  n = 0
  share = max(1, enc_cfg.num_hidden_layers // max(1, getattr(enc_cfg, "num_hidden_groups", 1)))
  for path, x in jax.tree_util.tree_leaves_with_path(state):
    key = jax.tree_util.keystr(path)
    if "kernel" not in key or len(x.shape) < 2:
      continue
    n += math.prod(x.shape) * (share if "albert_layer_groups" in key else 1)
  return n


def size_step(config: ml_collections.ConfigDict, devices: Sequence | None = None
              ) -> StepSize:
  """Compiles ``config``'s training step (the engine's, `poi_jax.train.step.jit_steps`) for
  ``devices`` (default: ``jax.devices()``) on the mesh ``config.mesh`` and reads it."""
  from poi_jax import tasks
  from poi_jax.layers import attention as attention_lib
  from poi_jax.models import build
  from poi_jax.train import optim
  from poi_jax.train import step as step_lib
  devices = list(devices if devices is not None else jax.devices())
  shape = mesh_lib.mesh_shape(config.mesh, len(devices))
  mesh = jax.sharding.Mesh(np.array(devices).reshape(shape), mesh_lib.AXES,
                           axis_types=(jax.sharding.AxisType.Auto,) * 3)
  split = shape[0] * shape[1]
  if int(config.train.batch_size) % split:
    raise mesh_lib.MeshError(
        f"global batch {config.train.batch_size} is not divisible by data x fsdp = {split} "
        f"(mesh {shape}): pick another mesh or batch")
  task = tasks.get_task(config.task)
  spec = batch_spec(config, task)
  enc_cfg = build.encoder_config(config)

  def make():
    model = task.build_model(config, nnx.Rngs(0))
    tx, _ = optim.make_optimizer(config.optim, 1000)
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

  model, optimizer = nnx.eval_shape(make)
  t0 = time.perf_counter()
  with jax.set_mesh(mesh):
    graphdef, state = nnx.split((model, optimizer))
    shardings = mesh_lib.state_shardings(state, mesh, config.mesh.rules)
    large = mesh_lib.check_sharded(state, shardings, mesh)
    dropout = (enc_cfg.attention_probs_dropout_prob > 0)
    kernel = attention_lib.choose(config.model.attention, config.model.dtype, dropout)
    train, _ = step_lib.jit_steps(graphdef, shardings, mesh, config.mesh.rules,
                                  {k: len(v.shape) for k, v in spec.items()
                                   if k != "example_mask"})
    compiled = train.lower(nnx.as_pure(state), spec).compile()
  seconds = time.perf_counter() - t0
  total = per_device = 0
  leaves = jax.tree_util.tree_leaves(state)
  shards = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.NamedSharding))
  for x, sh in zip(leaves, shards):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      continue
    item = np.dtype(x.dtype).itemsize
    total += math.prod(x.shape) * item
    per_device += math.prod(sh.shard_shape(x.shape)) * item
  params = sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
  n_mm = _matmul_params(nnx.state(model, nnx.Param), enc_cfg)
  ids = spec["input_ids"].shape
  tokens, seq = math.prod(ids), ids[-1]
  estimate = (6 * n_mm + 12 * enc_cfg.num_hidden_layers * seq * enc_cfg.hidden_size) * tokens
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else (cost or {})
  return StepSize(
      devices=len(devices), device_kind=devices[0].device_kind, mesh=tuple(shape),
      batch={k: (tuple(v.shape), str(v.dtype)) for k, v in spec.items()}, tokens=tokens,
      params=params, matmul_params=n_mm, state_bytes=per_device, state_bytes_total=total,
      large_replicated=large, memory=_memory(compiled), cost_flops=cost.get("flops"),
      cost_optimal_seconds=cost.get("optimal_seconds"),
      hlo=hlo_stats.analyze(compiled.as_text(), len(devices)),
      estimate_flops=estimate / len(devices), attention=kernel, compile_seconds=seconds,
      encoder=dict(model_type=enc_cfg.model_type, layers=enc_cfg.num_hidden_layers,
                   hidden=enc_cfg.hidden_size),
      cores_per_chip=cores_per_chip(devices))


def cores_per_chip(devices: Sequence) -> int:
  """How many devices share a chip: the distinct ``core_on_chip`` of a TPU slice's devices (2
  for v4 topologies, which expose each TensorCore; 1 for v5e, v5p, v6e, GPUs and CPUs, as
  libtpu 0.0.42 describes them)."""
  cores = {getattr(d, "core_on_chip", 0) for d in devices}
  return max(1, len(cores))


@dataclasses.dataclass
class Projection:
  hardware: Hardware
  mfu: float
  compute_s: float
  hbm_s: float
  comm_s: float
  step_s: float
  fits: bool
  memory: float


def project(size: StepSize, hw: Hardware, mfu: float) -> Projection:
  """Roofline of one step on ``hw``: compute = matmul FLOPs / (peak x ``mfu``); HBM = (3 x state
  + 2 x temporaries) bytes / HBM bandwidth (each parameter, gradient and moment read and written
  once, activations written then read); collectives = ring bytes / one link direction's
  bandwidth; the step takes the largest (overlap assumed). ``fits``: compiled total per device
  <= the device's memory. A device that is one of a chip's ``size.cores_per_chip`` TensorCores
  (``hw`` is the chip) gets that share of the chip's FLOP/s, memory and bandwidths."""
  share = size.cores_per_chip if TPU_KINDS.get(size.device_kind) == hw.name else 1
  if share > 1:
    hw = dataclasses.replace(
        hw, name=f"{hw.name} (1 of {share} cores)", peak_flops=hw.peak_flops / share,
        memory=hw.memory / share, hbm_bw=hw.hbm_bw / share, link_bw=hw.link_bw / share)
  compute = size.hlo.matmul_flops / (hw.peak_flops * mfu)
  temp = size.memory.get("temp", 0)
  hbm = (3 * size.state_bytes + 2 * temp) / hw.hbm_bw
  comm = size.hlo.collectives.wire_bytes / hw.link_bw
  total = size.memory.get("total", size.state_bytes)
  return Projection(hw, mfu, compute, hbm, comm, max(compute, hbm, comm), total <= hw.memory,
                    total)


def run_steps(config: ml_collections.ConfigDict, examples: int) -> int:
  """Optimizer steps of a whole run: ``train.epochs`` x ``examples`` / global batch."""
  return math.ceil(float(config.train.epochs) * examples / int(config.train.batch_size))
