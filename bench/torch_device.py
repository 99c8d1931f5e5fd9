"""Where the benchmarks' PyTorch references run: the device JAX runs on, with TF32 matmuls on a
GPU (JAX's float32 default there), and a synchronise so that a timer measures the work, not
the kernel launches. For `bench/` only."""
from __future__ import annotations


def torch_device(jax_platform: str) -> str:
  return "cuda" if jax_platform == "gpu" else "cpu"


def prepare(device: str):
  """Sets PyTorch's matmul precision for `device`; returns its synchronise (a no-op on CPU)."""
  import torch
  torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
  return torch.cuda.synchronize if device != "cpu" else (lambda: None)
