"""poi_jax.train.environment: the record of where a run computed, and its one-line forms."""
import importlib.metadata
import os

import jax

from poi_jax.train import environment


def test_describe_names_this_process_devices_and_versions():
  env = environment.describe()
  assert env["platform"] == jax.devices()[0].platform
  assert env["device_count"] == jax.device_count() and env["process_count"] == 1
  assert env["versions"]["jax"] == jax.__version__
  assert env["versions"]["flax"] == importlib.metadata.version("flax")
  if env["platform"] == "cpu":  # JAX's own kind is only "cpu": the model and usable cores
    assert env["device"].endswith(f", {len(os.sched_getaffinity(0))} cores")


def test_one_line_forms():
  gpu = {"device": "NVIDIA H100 80GB HBM3", "platform": "gpu", "device_count": 8,
         "process_count": 2, "matmul_precision": "default",
         "versions": {"python": "3.12.3", "jax": "0.11.2", "jaxlib": "0.11.2", "flax": "0.12.10"}}
  assert environment.device(gpu) == "NVIDIA H100 80GB HBM3 x 8 over 2 processes"
  assert environment.software(gpu) == ("jax 0.11.2, jaxlib 0.11.2, flax 0.12.10; matmul "
                                       "precision default")
  cpu = dict(gpu, device="AMD EPYC, 2 cores", platform="cpu", device_count=1, process_count=1)
  assert environment.device(cpu) == "AMD EPYC, 2 cores"
