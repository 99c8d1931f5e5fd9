"""The ONNX Runtime peer of the CPU benchmarks (bench/forward_fusion.py, bench/reader_peers.py):
transformers' PyTorch QA model exported to ONNX and run by ONNX Runtime, the strongest CPU
inference peer a user would pick. Never imported by poi_jax (the [bench] extra)."""
from __future__ import annotations


def onnx_session(torch_model, directory: str):
  """``torch_model`` exported to ONNX (dynamic batch and length) and loaded in ONNX Runtime with
  every graph optimisation on the CPU provider."""
  import os

  import onnxruntime as ort
  import torch
  path = os.path.join(directory, "minilm_qa.onnx")
  example = tuple(torch.ones((2, 16), dtype=torch.long) for _ in range(3))
  axes = {0: "batch", 1: "length"}
  torch.onnx.export(torch_model, example, path, input_names=["input_ids", "attention_mask",
                                                             "token_type_ids"],
                    output_names=["start_logits", "end_logits"],
                    dynamic_axes={n: axes for n in ("input_ids", "attention_mask",
                                                    "token_type_ids", "start_logits",
                                                    "end_logits")},
                    opset_version=17, dynamo=False)
  options = ort.SessionOptions()
  options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
  return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
