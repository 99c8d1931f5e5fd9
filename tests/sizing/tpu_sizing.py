"""Child of test_tpu_sizing.py: compiles training steps for TPU slices that are not attached
(`poi_jax.sizing`, the real TPU compiler from ``libtpu``) in one process, and prints one JSON
line per case. Also an fsdp all-gather of a known size (the collective reader's check).

  python tests/sizing/tpu_sizing.py TOPOLOGY CONFIG [CONFIG ...]     # CONFIG: module:variants
"""
import importlib
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from poi_jax.sizing import hlo_stats
from poi_jax import sizing


def all_gather_case(devices) -> dict:
  """``w`` (1024, 512) f32 sharded by rows over every device, returned whole: one all-gather
  whose result is the whole 2 MiB array on each device."""
  mesh = jax.sharding.Mesh(np.array(devices), ("fsdp",))
  f = jax.jit(lambda w: w * 2.0, in_shardings=NamedSharding(mesh, P("fsdp", None)),
              out_shardings=NamedSharding(mesh, P()))
  compiled = f.lower(jax.ShapeDtypeStruct((1024, 512), jnp.float32)).compile()
  stats = hlo_stats.analyze(compiled.as_text(), len(devices))
  return {"case": "all-gather", "bytes": dict(stats.collectives.bytes),
          "wire": dict(stats.collectives.wire), "devices": len(devices)}


def windowed_matmul_case(devices) -> dict:
  """One FSDP MLP pair, ``x (M, K) @ w1 (K, N)``, relu, ``@ w2 (N, K)``, the gradient of a sum
  of squares wrt both weights, everything sharded over all devices: on 16 v5e chips the TPU
  compiler turns its matmuls into windowed collective-matmul loops. The exact matmul FLOPs per
  device: forward 2 matmuls, backward 3 (dW2, dh, dW1), ``2 M K N`` each, over ``n``."""
  m, k, n_ = 8192, 2048, 8192
  mesh = jax.sharding.Mesh(np.array(devices), ("fsdp",))

  def loss(w1, w2, x):
    h = jax.nn.relu(x @ w1)
    return jnp.sum(jnp.square((h @ w2).astype(jnp.float32)))
  f = jax.jit(jax.grad(loss, argnums=(0, 1)),
              in_shardings=(NamedSharding(mesh, P("fsdp", None)),
                            NamedSharding(mesh, P(None, "fsdp")),
                            NamedSharding(mesh, P("fsdp", None))),
              out_shardings=(NamedSharding(mesh, P("fsdp", None)),
                             NamedSharding(mesh, P(None, "fsdp"))))
  compiled = f.lower(jax.ShapeDtypeStruct((k, n_), jnp.bfloat16),
                     jax.ShapeDtypeStruct((n_, k), jnp.bfloat16),
                     jax.ShapeDtypeStruct((m, k), jnp.bfloat16)).compile()
  stats = hlo_stats.analyze(compiled.as_text(), len(devices))
  return {"case": "windowed", "flops": stats.matmul_flops, "loops": stats.loops,
          "exact": 10 * m * k * n_ / len(devices), "devices": len(devices)}


def main(topology: str, specs: list[str]) -> None:
  devices = sizing.tpu_devices(topology)
  print(json.dumps(all_gather_case(devices)), flush=True)
  hw = sizing.HARDWARE[sizing.TPU_KINDS[devices[0].device_kind]]
  if "windowed" in specs:
    print(json.dumps(windowed_matmul_case(devices)), flush=True)
  for spec in [s for s in specs if s != "windowed"]:
    module, _, variant = spec.partition(":")
    config = importlib.import_module(f"configs.{module}").get_config(variant)
    config = sizing.sizing_config(config, (1, len(devices), 1))
    size = sizing.size_step(config, devices)
    print(json.dumps({
        "case": spec, "kind": size.device_kind, "cores_per_chip": size.cores_per_chip,
        # a device's memory: the chip's, or its share where each TensorCore is a device (v4)
        "hbm": sizing.project(size, hw, 0.4).hardware.memory, "total": size.memory["total"],
        "flops": size.hlo.matmul_flops,
        "flops_once": size.hlo.matmul_flops_once, "cost_flops": size.cost_flops,
        "estimate": size.estimate_flops, "attention": size.attention,
        "custom_calls": size.hlo.custom_calls, "loops": size.hlo.loops,
        "replicated": size.large_replicated, "seconds": size.compile_seconds}), flush=True)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
