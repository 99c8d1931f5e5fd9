"""Child of test_tpu_sizing.py: compiles training steps for TPU slices that are not attached
(`poi_jax.train.sizing`, the real TPU compiler from ``libtpu``) in one process, and prints one JSON
line per case. Also an fsdp all-gather of a known size (the collective reader's check).

  python tests/train/tpu_sizing.py TOPOLOGY CONFIG [CONFIG ...]     # CONFIG: module:variants
"""
import importlib
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from poi_jax.train import hlo_stats, sizing


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


def main(topology: str, specs: list[str]) -> None:
  devices = sizing.tpu_devices(topology)
  print(json.dumps(all_gather_case(devices)), flush=True)
  hw = sizing.HARDWARE[sizing.TPU_KINDS[devices[0].device_kind]]
  for spec in specs:
    module, _, variant = spec.partition(":")
    config = importlib.import_module(f"configs.{module}").get_config(variant)
    config = sizing.sizing_config(config, (1, len(devices), 1))
    size = sizing.size_step(config, devices)
    print(json.dumps({
        "case": spec, "kind": size.device_kind, "hbm": hw.memory, "total": size.memory["total"],
        "flops": size.hlo.matmul_flops,
        "flops_once": size.hlo.matmul_flops_once, "cost_flops": size.cost_flops,
        "estimate": size.estimate_flops, "attention": size.attention,
        "custom_calls": size.hlo.custom_calls, "loops": size.hlo.loops,
        "replicated": size.large_replicated, "seconds": size.compile_seconds}), flush=True)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
