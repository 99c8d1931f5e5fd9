r"""The forward pass with and without XLA's YNNPACK fusions on a CPU, beside PyTorch eager,
`torch.compile` and ONNX Runtime, in one run.

  python bench/forward_fusion.py                             # MiniLM, 32 windows of 128/256/384
  python bench/forward_fusion.py --head=poi --lengths=384 --rounds=5
  python bench/forward_fusion.py --peers=eager,compile,onnxruntime   # the strongest peers
  python bench/forward_fusion.py --bf16       # + bfloat16 rows on both sides (AMX CPUs)

What it decides: ``runtime.cpu_forward_ynnpack`` (poi_jax/runtime.py). The same model (the
offline all-MiniLM-L6-v2 weights, a span head drawn from seed 0; ``--head=poi`` adds POI-Net's
co-attention) jitted twice in this process, once with XLA's defaults (YNNPACK fusions) and once
with `poi_jax.runtime.FORWARD_CPU_COMPILER_OPTIONS` (what the engine's predict step and the
Reader use by default), and, with ``--head=none``, transformers' PyTorch model in eager inference
mode, and the peers a user serving this model would pick (``--peers``): ``compile``
(``torch.compile`` of the same model, TorchInductor, default mode) and ``onnxruntime`` (the model
exported by ``torch.onnx.export`` with dynamic batch and length, run by ONNX Runtime's CPU
provider with every graph optimisation, ``ORT_ENABLE_ALL``). Each peer's logits are checked
against the JAX forward's on the windows' real tokens (``max |logit diff|``). The variants
alternate call by call, ``--rounds`` times after a warm-up (which compiles);
the fastest call of each is reported, as ms per batch and microseconds per token, with the
ratios (> 1: faster than XLA's defaults, or than PyTorch), the first call's seconds (JAX: the
compilation, with the persistent cache off) and the largest difference between the two JAX
variants' logits. float32, every core.

``--bf16`` adds bfloat16 on both sides, as a user of a CPU with AMX tiles would run it: JAX with
``jax_default_matmul_precision=bfloat16`` (the dense layers on the AMX kernel,
`poi_jax/layers/cpu_matmul_amx.py`; the forward options) and PyTorch under
``torch.autocast("cpu", torch.bfloat16)`` (eager, and ``torch.compile`` with ``compile``). Every
row's ``x best peer`` is against the fastest PyTorch / ONNX Runtime row of either precision; the
floor (float32 matmuls) bounds the float32 rows only.

``--floor`` (on by default) adds what no implementation can beat on this machine: the encoder's
dense layers alone (Q, K, V, output and the two feed-forward matmuls of every layer, padded tokens
included, as every peer computes them) take ``2 * tokens * layers * (4 * hidden^2 + 2 * hidden *
intermediate)`` FLOPs, and the fastest rate at which any library here multiplies the model's own
feed-forward shape (``tokens x hidden @ hidden x intermediate``: XLA, with the forward's options
and with its defaults, and PyTorch, five calls each after every round of forwards, so under the
same load) bounds how fast those FLOPs can go: the floor row is those FLOPs at the fastest matmul
rate seen in the whole run, and the last lines the most any forward could gain on each peer with
attention, softmax, layer norms and GELU free.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from absl import app, flags

# Run as a script: configs/ and poi_jax/ of this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_LENGTHS = flags.DEFINE_list("lengths", ["128", "256", "384"], "Window lengths (tokens).")
_BATCH = flags.DEFINE_integer("batch", 32, "Windows per call.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Timed calls per variant and length (alternating).")
_HEAD = flags.DEFINE_enum("head", "none", ["none", "poi"],
                          "none: the plain encoder's span head (and PyTorch beside it); "
                          "poi: POI-Net.")
_PEERS = flags.DEFINE_list("peers", ["eager", "compile", "onnxruntime"],
                           "With --head=none: eager (PyTorch), compile (torch.compile), "
                           "onnxruntime (the same model exported to ONNX).")
_BF16 = flags.DEFINE_bool("bf16", False,
                           "Also bfloat16 rows: JAX with bfloat16 matmul precision and PyTorch "
                           "under CPU bf16 autocast (module docstring).")
_MALLOC = flags.DEFINE_enum(
    "cpu_malloc", "system", ["system", "reuse"],
    "runtime.cpu_malloc for the JAX side (system: the Reader's default, and the engine's "
    "outside training; reuse: each call's temporaries kept instead of paged in afresh).")
_FLOOR = flags.DEFINE_bool("floor", True,
                            "Add the dense-matmul floor row (module docstring).")
EAGER = "PyTorch eager (transformers)"
_GEMM_CALLS = 5  # matmul calls per library and round for the floor
FLOOR = "floor: dense matmuls at the best rate"
JAX_BF16 = "JAX, bf16 matmuls (forward options)"


def gemm_calls(tokens: int, hidden: int, intermediate: int) -> dict:
  """``{name: call}``: one float32 ``(tokens, hidden) @ (hidden, intermediate)`` by XLA (the
  forward's compiler options, and XLA's defaults) and by PyTorch, each warm."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from poi_jax import runtime
  rng = np.random.default_rng(0)
  x = rng.standard_normal((tokens, hidden), np.float32)
  w = rng.standard_normal((hidden, intermediate), np.float32)
  jx, jw = jnp.asarray(x), jnp.asarray(w)
  ways = {"XLA, forward options": jax.jit(jnp.matmul,
                                          compiler_options=runtime.forward_compiler_options()),
          "XLA, defaults": jax.jit(jnp.matmul)}
  calls = {name: (lambda f=f: jax.block_until_ready(f(jx, jw))) for name, f in ways.items()}
  try:
    import torch
  except ImportError:
    pass
  else:
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    calls["PyTorch"] = lambda: torch.mm(tx, tw)
  for call in calls.values():
    call()
  return calls


def padded_windows(b: int, length: int, rng) -> dict:
  """A SQuAD batch of ``b`` windows padded to ``length`` tokens, each with a real length drawn
  uniformly from ``[length / 2, length]`` (three quarters real tokens on average), as an
  evaluation or the Reader feeds the forward. Random token ids; the context from token 16 to the
  last but one."""
  import numpy as np
  real = rng.integers(length // 2, length + 1, b)
  mask = (np.arange(length)[None] < real[:, None]).astype(np.int32)
  return {"input_ids": rng.integers(1000, 30000, (b, length)).astype(np.int32) * mask,
          "attention_mask": mask, "token_type_ids": np.zeros((b, length), np.int32),
          "con_start": np.full(b, 16, np.int32), "con_end": (real - 2).astype(np.int32),
          "example_mask": np.ones(b, np.float32)}


def main(argv):
  del argv
  import jax
  import numpy as np
  from flax import nnx

  from configs import squad1
  from poi_jax import runtime, tasks

  runtime.configure({"cpu_malloc": _MALLOC.value, "compilation_cache_dir": "none"})
  config = squad1.get_config("minilm")
  with config.unlocked():
    config.model.head, config.model.pos_embedding = _HEAD.value, False
  task = tasks.get_task("squad1")
  model = task.build_model(config, nnx.Rngs(0))
  task.load_pretrained(model, config.model.init_from)
  graphdef, state = nnx.split(model)

  def forward(s, b):
    return nnx.merge(graphdef, s)(b, deterministic=True)

  options = runtime.forward_compiler_options()
  jax_ways = {"JAX, XLA defaults (YNNPACK fusions)": jax.jit(forward),
              "JAX, forward options (default)": jax.jit(forward, compiler_options=options)}
  bf16_forward = jax.jit(forward, compiler_options=options)

  def jax_bf16(s, b):  # traced (and cached) under the precision it is called with
    with jax.default_matmul_precision("bfloat16"):
      return bf16_forward(s, b)
  ours = {*jax_ways, JAX_BF16}  # the rows that are not peers
  torch_model = None
  if _HEAD.value == "none":
    try:
      import torch
      import transformers
    except ImportError:
      print("(no torch/transformers: PyTorch column left out)")
    else:
      from poi_jax.models import encoders
      torch_model = transformers.AutoModelForQuestionAnswering.from_pretrained(
          str(encoders.resolve_checkpoint(config.model.init_from)),
          attn_implementation="sdpa").eval()  # PyTorch's fastest attention
      # The same span head as the JAX model's (qa_outputs, drawn from seed 0 there).
      head = nnx.to_pure_dict(nnx.state(model, nnx.Param))["qa_outputs"]
      with torch.no_grad():
        torch_model.qa_outputs.weight.copy_(torch.from_numpy(np.asarray(head["kernel"]).T))
        torch_model.qa_outputs.bias.copy_(torch.from_numpy(np.asarray(head["bias"])))
      compiled = torch.compile(torch_model) if "compile" in _PEERS.value else None
      import tempfile
      onnx_dir = tempfile.mkdtemp(prefix="poi_jax_onnx_")
      from bench.onnx_peer import onnx_session
      session = onnx_session(torch_model, onnx_dir) if "onnxruntime" in _PEERS.value else None

  b, rng = _BATCH.value, np.random.default_rng(0)
  rows = []
  gemm_best = [0.0, ""]  # the fastest matmul rate seen in this run (FLOP/s), and where
  for length in [int(x) for x in _LENGTHS.value]:
    batch = padded_windows(b, length, rng)
    mask = batch["attention_mask"]
    calls = {name: (lambda f=f: jax.block_until_ready(f(state, batch)))
             for name, f in jax_ways.items()}
    if torch_model is not None:
      tb = {k: torch.from_numpy(batch[k]).long()
            for k in ("input_ids", "attention_mask", "token_type_ids")}

      def torch_call(tb=tb, m=torch_model, bf16=False):
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=bf16):
          out = m(**tb)
        return {"start_logits": out.start_logits.float().numpy(),
                "end_logits": out.end_logits.float().numpy()}
      if "eager" in _PEERS.value:
        calls[EAGER] = torch_call
      if compiled is not None:
        calls["torch.compile (transformers)"] = lambda tb=tb: torch_call(tb, compiled)
      if _BF16.value and "eager" in _PEERS.value:
        calls["PyTorch eager, bf16 autocast"] = lambda tb=tb: torch_call(tb, bf16=True)
      if _BF16.value and compiled is not None:
        calls["torch.compile, bf16 autocast"] = lambda tb=tb: torch_call(tb, compiled, True)
      if session is not None:
        feeds = {k: batch[k].astype(np.int64)
                 for k in ("input_ids", "attention_mask", "token_type_ids")}
        calls["ONNX Runtime (ORT_ENABLE_ALL)"] = lambda feeds=feeds: dict(zip(
            ("start_logits", "end_logits"), session.run(None, feeds)))
    if _BF16.value:
      calls[JAX_BF16] = lambda: jax.block_until_ready(jax_bf16(state, batch))
    outs, first = {}, {}
    for name, call in calls.items():  # warm-up: the first call compiles
      t = time.perf_counter()
      outs[name] = call()
      first[name] = time.perf_counter() - t
    a, c = (jax.device_get(outs[n]) for n in jax_ways)
    diff = {list(jax_ways)[1]: max(float(np.abs(np.where(np.isfinite(a[k]), a[k] - c[k], 0)).max())
                                   for k in a)}
    real_tokens = mask.astype(bool)
    for name in calls:  # each peer against the JAX forward, on the real tokens
      if name not in jax_ways:
        diff[name] = max(float(np.abs(np.asarray(outs[name][k]) - a[k])[real_tokens].max())
                         for k in ("start_logits", "end_logits"))
    times = {name: [] for name in calls}
    ec = model.encoder.config
    gemms = (gemm_calls(b * length, ec.hidden_size, ec.intermediate_size) if _FLOOR.value
             else {})
    for _ in range(_ROUNDS.value):
      for name, call in calls.items():
        t = time.perf_counter()
        call()
        times[name].append(time.perf_counter() - t)
      for name, call in gemms.items():  # the matmul rate, under the same load as the rounds
        for _ in range(_GEMM_CALLS):
          t = time.perf_counter()
          call()
          rate = 2 * b * length * ec.hidden_size * ec.intermediate_size / (
              time.perf_counter() - t)
          if rate > gemm_best[0]:
            gemm_best[:] = [rate, f"{name}, {b * length} x {ec.hidden_size} x "
                            f"{ec.intermediate_size}"]
    rows.append((length, {k: min(v) for k, v in times.items()}, first, diff))

  print(f"device: {jax.devices()[0].device_kind}, jax {jax.__version__}; MiniLM, head "
        f"{_HEAD.value}, {b} windows a call, float32; fastest of {_ROUNDS.value} alternating "
        f"calls; forward options {options}")
  default = list(jax_ways)[0]
  print("x best peer: the fastest of the PyTorch / ONNX Runtime rows over the row (> 1: faster "
        "than every peer); max |logit diff|: against the JAX forward with XLA's defaults")
  print(f"\n{'length':>6}  {'variant':<36} {'ms/call':>8} {'us/token':>9} {'x defaults':>10} "
        f"{'x best peer':>11} {'1st call s':>10}  max |logit diff|")
  if _FLOOR.value:
    for length, best, first, diff in rows:
      ec = model.encoder.config
      dense = 2 * b * length * ec.num_hidden_layers * (
          4 * ec.hidden_size ** 2 + 2 * ec.hidden_size * ec.intermediate_size)
      best[FLOOR], first[FLOOR] = dense / gemm_best[0], 0.0
  for length, best, first, diff in rows:
    peers = [sec for name, sec in best.items() if name not in ours and name != FLOOR]
    for name, sec in best.items():
      vs_peer = f"{min(peers) / sec:>10.2f}x" if peers else f"{'':>11}"
      print(f"{length:>6}  {name:<36} {sec * 1e3:>8.1f} {sec * 1e6 / (b * length):>9.1f} "
            f"{best[default] / sec:>9.2f}x {vs_peer} {first[name]:>10.1f}  "
            f"{f'{diff[name]:.1e}' if name in diff else ''}")
  if _FLOOR.value:
    print(f"\nfloor: the dense matmuls' FLOPs at {gemm_best[0] / 1e9:.1f} GFLOP/s, the fastest "
          f"float32 matmul of this run ({gemm_best[1]}); at most, any float32 forward is")
    for length, best, _, _ in rows:
      print(f"  at {length} tokens: " + ", ".join(
          f"{sec / best[FLOOR]:.2f}x {name}" for name, sec in best.items()
          if name not in ours and name != FLOOR and "bf16" not in name))


if __name__ == "__main__":
  app.run(main)
