r"""Where the CPU training step's time goes: the POI-Net step cut into pieces, JAX and PyTorch
side by side in one run (one table, ratios).

  python bench/cpu_pieces.py                        # MiniLM POI-Net, 8 x 256, float32
  python bench/cpu_pieces.py --shape=bert-base --head=none --seq=384 --pieces=encoder

Pieces (each compiled on its own in JAX; PyTorch eager, the same work):

* ``forward``: the loss (training mode, dropout off as in `bench/train_step.py`);
* ``fwd+bwd``: loss and gradients of all parameters (no update);
* ``update``: gradient clipping + AdamW on all parameters, given the gradients (JAX: the
  engine's optax chain, state donated; PyTorch: ``clip_grad_norm_`` + ``AdamW.step``);
* ``step``: the whole step (JAX: the engine's jitted step, as `bench/train_step.py` times it);
* ``attention``: one encoder layer's self-attention core (QK^T, mask, softmax, PV) forward and
  backward at the step's shape, the last ``1 - --real`` of every row's keys padded, for each JAX
  kernel (`poi_jax.layers.attention`) against PyTorch's SDPA; and the native kernel once more
  with the padding's bias at -1e30 instead of the lowest float, which computes the same
  probabilities but makes the kernel attend to every key (its padded tail is not left out:
  `cpu_attention.cc`, `keys_in_use`), for what leaving it out saves. With
  ``--matmul_precision=bfloat16``: JAX under that matmul precision (the native kernel's
  bfloat16 variant on AMX tiles; XLA's kernels stay float32 on a CPU) against SDPA on bfloat16
  tensors, what ``torch.autocast("cpu", torch.bfloat16)`` hands it after its bfloat16 linear
  layers.

Timing: each piece is run ``--repeats`` times after a warm-up and its **minimum** is reported,
JAX's then PyTorch's, piece by piece (the minimum is the least-disturbed run on a shared
machine). ``--clock=process``: CPU time of the process (user + system) instead of wall time; with
one core and one thread each (``taskset -c 0 python bench/cpu_pieces.py --clock=process``: both
libraries size their thread pools by the CPU affinity) it measures the work each side does,
nearly independent of other jobs' load. JAX runs with the engine's runtime defaults
(`poi_jax.runtime.configure`) but ``--cpu_malloc=reuse`` (as `bench/train_step.py` and
`bench/cpu_ab.py` time the step: with glibc's defaults every call first-touches its temporaries'
pages, ~10% of a MiniLM step in system time), in this process; PyTorch with its default
intra-op threads (the cores it may use).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


CLOCK = {"wall": time.perf_counter, "process": time.process_time}
_clock = time.perf_counter


def best_of(fn, repeats: int) -> float:
  """Minimum time (s, ``--clock``) of ``fn()`` over ``repeats`` runs after one warm-up run."""
  fn()
  times = []
  for _ in range(repeats):
    t0 = _clock()
    fn()
    times.append(_clock() - t0)
  return min(times)


def jax_pieces(args, batch_np):
  """``{piece: callable}`` of the engine's model at the bench's shape (all compiled here)."""
  import jax
  import numpy as np
  from flax import nnx

  from bench import train_step as ts
  from poi_jax.layers import sharding
  from poi_jax.train import mesh as mesh_lib
  from poi_jax.train import placement
  from poi_jax.train import step as step_lib
  config = ts._jax_config(args, "float32")
  mesh = mesh_lib.make_mesh(config.mesh)
  model, optimizer = ts._build(config, abstract=False)
  batch = dict(batch_np, example_mask=np.ones(len(batch_np["input_ids"]), np.float32))
  rules = tuple(config.mesh.rules)
  with jax.set_mesh(mesh):
    run = step_lib.create_sharded_state(model, optimizer, mesh, rules,
                                        {k: v.ndim for k, v in batch_np.items()})
    gb = placement.global_batch(batch, mesh)
    graphdef = run.graphdef

    def loss_of(state):
      m, _ = nnx.merge(graphdef, state)
      with sharding.axis_rules(mesh, rules):
        return m.loss(gb, m(gb, deterministic=False))

    def grads_of(state):
      m, _ = nnx.merge(graphdef, state)

      def f(mm):
        with sharding.axis_rules(mesh, rules):
          return mm.loss(gb, mm(gb, deterministic=False))
      return nnx.value_and_grad(f)(m)

    def update(state, grads):
      m, opt = nnx.merge(graphdef, state)
      opt.update(m, grads)
      return nnx.as_pure(nnx.state((m, opt)))

    forward = jax.jit(loss_of).lower(run.state).compile()
    fwd_bwd = jax.jit(grads_of).lower(run.state).compile()
    _, grads = fwd_bwd(run.state)
    upd = jax.jit(update, donate_argnums=0).lower(run.state, grads).compile()
    step = run.train_step.lower(run.state, gb).compile()
    # The update and the step donate the state: keep them on their own copy.
    holder = {"upd": jax.tree.map(lambda x: x.copy(), run.state),
              "step": jax.tree.map(lambda x: x.copy(), run.state)}

    def run_update():
      holder["upd"] = upd(holder["upd"], grads)
      jax.block_until_ready(holder["upd"])

    def run_step():
      holder["step"], out = step(holder["step"], gb)
      jax.block_until_ready(out)

    return {
        "forward": lambda: jax.block_until_ready(forward(run.state)),
        "fwd+bwd": lambda: jax.block_until_ready(fwd_bwd(run.state)),
        "update": run_update,
        "step": run_step,
    }


def torch_pieces(args, batch_np):
  import torch

  from bench import train_step as ts
  from bench.torch_poi import training_setup
  model, opt, batch = training_setup(ts.SHAPES[args.shape], args.head, batch_np)

  def fwd_bwd():
    opt.zero_grad(set_to_none=True)
    model(batch).backward()

  def update():
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()

  def step():
    fwd_bwd()
    update()

  fwd_bwd()  # gradients for the update piece
  return {"forward": lambda: model(batch), "fwd+bwd": fwd_bwd, "update": update, "step": step}


def attention_pieces(args):
  """``{name: (forward, fwd+bwd)}``: one layer's attention core, JAX kernels and PyTorch SDPA."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  import torch

  from bench import train_step as ts
  from poi_jax.layers import attention
  s = ts.SHAPES[args.shape]
  b, l, heads = args.batch, args.seq, s["num_attention_heads"]
  width = s["hidden_size"]
  dh = width // heads
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((b, l, width)).astype(np.float32) for _ in range(3))
  am = np.ones((b, l), np.int32)
  am[:, int(l * args.real):] = 0  # some padding, as real batches have
  out = {}
  jq, jk, jv, jm = (jnp.asarray(x) for x in (q, k, v, am))
  kernels = ["xla", "explicit", "explicit_vjp"]
  if attention.cpu_attention.available():
    kernels.append("cpu_kernel")
  else:
    print(f"# cpu_kernel left out: {attention.cpu_attention.unavailable_reason()}")
  for kernel in kernels:
    def f(q, k, v, m, kernel=kernel):
      return attention.dot_product_attention(q, k, v, attention.key_mask(m), num_heads=heads,
                                             implementation=kernel)
    fw = jax.jit(f)
    bw = jax.jit(jax.grad(lambda q, k, v, m, f=f: jnp.sum(f(q, k, v, m)), argnums=(0, 1, 2)))
    out[f"jax {kernel}"] = (lambda fw=fw: jax.block_until_ready(fw(jq, jk, jv, jm)),
                            lambda bw=bw: jax.block_until_ready(bw(jq, jk, jv, jm)))
  if "cpu_kernel" in kernels:
    heads_of = lambda x: x.reshape(b, l, heads, dh)
    flat = jnp.where(jnp.asarray(am, bool), 0.0, -1e30)  # exp(-1e30 - max) = 0, no tail left out

    bf16 = attention.cpu_attention.bfloat16_precision()  # the variant the layer runs

    def every_key(q, k, v):
      return attention.cpu_attention.attention(heads_of(q), heads_of(k), heads_of(v), flat,
                                               bfloat16=bf16)
    fw = jax.jit(every_key)
    bw = jax.jit(jax.grad(lambda q, k, v: jnp.sum(every_key(q, k, v)), argnums=(0, 1, 2)))
    out["jax cpu_kernel, every key"] = (lambda: jax.block_until_ready(fw(jq, jk, jv)),
                                        lambda: jax.block_until_ready(bw(jq, jk, jv)))
  tdtype = torch.bfloat16 if args.matmul_precision == "bfloat16" else torch.float32
  tq, tk, tv = (torch.tensor(x, dtype=tdtype, requires_grad=True) for x in (q, k, v))
  bias = ((1.0 - torch.tensor(am)[:, None, None, :].float())
          * torch.finfo(torch.float32).min).to(tdtype)

  def sdpa():
    split = lambda x: x.view(b, l, heads, dh).transpose(1, 2)
    o = torch.nn.functional.scaled_dot_product_attention(split(tq), split(tk), split(tv),
                                                         attn_mask=bias)
    return o.transpose(1, 2).reshape(b, l, width)

  def t_fwd():
    with torch.no_grad():
      sdpa()

  def t_bwd():
    tq.grad = tk.grad = tv.grad = None
    sdpa().sum().backward()

  out["torch sdpa"] = (t_fwd, t_bwd)
  return out


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--shape", default="minilm")
  ap.add_argument("--head", default="poi", choices=["poi", "none"])
  ap.add_argument("--batch", type=int, default=8)
  ap.add_argument("--seq", type=int, default=256)
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--real", type=float, default=0.8,
                  help="attention piece: the fraction of each row's keys that is not padding")
  ap.add_argument("--pieces", default="step,attention",
                  help="comma-separated: step (forward, fwd+bwd, update, step), attention")
  ap.add_argument("--clock", default="wall", choices=sorted(CLOCK))
  ap.add_argument("--cpu_malloc", default="reuse", choices=["reuse", "system"],
                  help="runtime.cpu_malloc for the JAX side (reuse: the step's pages stay)")
  ap.add_argument("--matmul_precision", default="", choices=["", "bfloat16"],
                  help="attention piece: JAX's matmul precision (bfloat16: the native kernel's "
                       "AMX variant) against SDPA on bfloat16 tensors")
  args = ap.parse_args()
  global _clock
  _clock = CLOCK[args.clock]
  args.remat, args.scan, args.attention = "none", False, "auto"
  from poi_jax import runtime
  # The engine's defaults (malloc reuse, XLA CPU flags, cache), and the matmul precision.
  runtime.configure({"matmul_precision": args.matmul_precision, "cpu_malloc": args.cpu_malloc})
  import jax
  import torch

  from bench import train_step as ts
  batch = ts.make_batch(args.batch, args.seq)
  wanted = args.pieces.split(",")
  print(f"# {' '.join(sys.argv)}")
  print(f"# {jax.devices()[0].device_kind}, jax {jax.__version__}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); {args.shape} POI-Net head={args.head}, "
        f"{args.batch} x {args.seq}, float32{', bf16 matmuls' if args.matmul_precision else ''}; min of {args.repeats} runs, {args.clock} clock, "
        f"{len(os.sched_getaffinity(0))} CPU(s) allowed; load average {os.getloadavg()[0]:.1f}")
  header = f"{'piece':<46} {'jax ms':>9} {'torch ms':>9} {'torch/jax':>10}"  # > 1: JAX faster
  print(header)
  print("-" * len(header))
  if "step" in wanted:
    jp, tp = jax_pieces(args, batch), torch_pieces(args, batch)
    for name in ("forward", "fwd+bwd", "update", "step"):
      tj, tt = best_of(jp[name], args.repeats), best_of(tp[name], args.repeats)
      print(f"{name:<46} {1e3 * tj:>9.1f} {1e3 * tt:>9.1f} {tt / tj:>10.2f}")
  if "attention" in wanted:
    ap_ = attention_pieces(args)
    ref = [best_of(f, args.repeats) for f in ap_["torch sdpa"]]
    for name, fns in ap_.items():
      for (pass_name, fn), tt in zip((("fwd", fns[0]), ("fwd+bwd", fns[1])), ref):
        tj = best_of(fn, args.repeats)
        print(f"{'attention ' + pass_name + ', ' + name:<46} {1e3 * tj:>9.1f} {1e3 * tt:>9.1f} "
              f"{tt / tj:>10.2f}")


if __name__ == "__main__":
  main()
