"""Multi-head self-attention as BERT-family encoders compute it (softmax in float32), through
`jax.nn.dot_product_attention` (cuDNN flash attention on a GPU, XLA elsewhere) or an explicit
einsum-softmax-einsum.

``implementation`` (config ``model.attention``):

* ``auto`` (default): cuDNN's fused kernel on a GPU when the compute dtype is bfloat16/float16
  and no attention dropout is active (evaluation, or ``model.attention_dropout=0``); on a
  one-device CPU the kernel timed fastest on this machine at the traced shape
  (`cpu_attention_choice`, cached per CPU), where no timing applies (small problems, several
  devices) ``cpu_kernel`` when the dtype is float32 (or bfloat16 on AMX tiles) and the kernel
  could be built, else ``explicit_vjp``; else XLA. cuDNN has no dropout on the attention
  probabilities, which BERT fine-tuning applies (0.1), so a GPU training step with attention
  dropout takes the explicit path; a shape cuDNN rejects falls back to XLA too.
* ``xla``: `jax.nn.dot_product_attention(implementation="xla")`, or the explicit path when
  attention dropout is active.
* ``explicit``: the einsum-softmax-einsum below (transformers' eager attention): an additive
  float32 mask bias and `jax.nn.softmax`. On a CPU its forward + backward takes about half the
  time of the fused API's XLA path (whose softmax differentiates through ``exp / sum`` into extra
  passes over the ``(B, N, L, L)`` scores; docs/cpu_profile.md).
* ``explicit_vjp``: the same function with a hand-written backward pass (`_softmax_pv`), with or
  without dropout: the forward normalises after the probabilities' matmul (``(e @ v) / sum(e)``
  with ``e = exp(s - max s)``: one pass fewer over the ``(B, N, L, L)`` scores) and keeps ``e``;
  the backward forms ``dS = e / sum(e) * (dP - rowsum(dO * O))`` in one pass (flash attention's
  identity). On a CPU it is the fastest of the XLA-op kernels (docs/cpu_profile.md), so ``auto``
  picks it there when ``cpu_kernel`` does not apply (bfloat16 without AMX, several devices, no
  compiler).
  Same masks, same dropout bits as ``explicit``; equal to it to float32 rounding.
* ``cpu_kernel``: a native CPU kernel (`poi_jax.layers.cpu_attention`, an XLA FFI call built
  on first use) that keeps a block of queries' scores in cache, as PyTorch's CPU attention does:
  forward + backward 1.3-1.5x faster than ``explicit_vjp`` on a CPU (docs/cpu_profile.md).
  Attention dropout is drawn inside the kernel (`cpu_attention.attention`: a hash of the
  position and a seed from the step's key, in the forward and again in the backward, never a
  stored mask): the same rate and scaling as the other kernels, other bits. An error on other
  backends, or when the kernel cannot be built (no C++ compiler; the reason is in the error).
  Under ``jax_default_matmul_precision=bfloat16`` (``runtime.matmul_precision``) on a CPU with
  AMX tiles it runs its products in bfloat16 there (``bfloat16=True``: operands rounded, sums
  and softmax in float32), as the dense layers do (`poi_jax.layers.matmul`); XLA's paths keep
  float32 on a CPU whatever the precision. On bfloat16 inputs (``model.dtype=bfloat16``) it runs
  that variant too where the CPU has AMX (the operands are bfloat16 already; output in
  bfloat16), and the float32 kernel on their float32 values elsewhere.
* ``cudnn``: always the fused kernel; an error when attention dropout is active in training or
  there is no GPU.

Which kernel each traced problem ran, and what chose it, is kept for the process
(`kernels_used`); the engine writes it into a training run's ``environment.json``.

Padding is a boolean key mask ``(B, 1, 1, L)``: masked logits become a large negative number,
so padded keys get exactly zero probability and fully-real rows match transformers' eager
attention (which adds ``finfo(float32).min``) to float32 rounding.
"""
from __future__ import annotations

import functools
import threading

import jax
import jax.numpy as jnp

from poi_jax.layers import common
from poi_jax.layers import cpu_attention, cpu_attention_choice, target

IMPLEMENTATIONS = ("auto", "xla", "explicit", "explicit_vjp", "cpu_kernel", "cudnn")


def key_mask(attention_mask: jax.Array) -> jax.Array:
  """``(B, L)`` {0,1} mask -> boolean ``(B, 1, 1, L)``: True for keys that may be attended."""
  return (attention_mask > 0)[:, None, None, :]


def _heads_first(x):
  """``(B, L, N, Dh)`` <-> ``(B, N, L, Dh)``."""
  return jnp.swapaxes(x, 1, 2)


def _explicit(q, k, v, mask, dropout_fn):
  """``(B, L, N, Dh)`` heads; additive float32 bias as transformers' eager attention, dropout.

  The heads are moved in front of the length (``(B, N, L, Dh)``) before the two matmuls, as
  transformers does: on a CPU XLA then runs them as plain batched matmuls, where the ``(B, L, N,
  Dh)`` einsums cost the forward about twice the time (layout copies of the scores)."""
  dh = q.shape[-1]
  heads_first = _heads_first
  scores = jnp.einsum("bhqd,bhkd->bhqk", heads_first(q), heads_first(k)).astype(jnp.float32)
  scores = scores / jnp.sqrt(jnp.float32(dh))
  if mask is not None:
    scores = scores + jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)
  probs = dropout_fn(jax.nn.softmax(scores, axis=-1))
  return heads_first(jnp.einsum("bhqk,bhkd->bhqd", probs.astype(v.dtype), heads_first(v)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _softmax_pv(q, k, v, bias, keep, rate):
  """``dropout(softmax(q k^T / sqrt(Dh) + bias)) @ v`` per head, with a hand-written backward.

  ``q, k, v``: ``(B, L, N, Dh)``; ``bias``: additive float32 ``(B, 1, 1, Lk)`` (or None);
  ``keep``: the dropout's boolean keep mask ``(B, N, Lq, Lk)`` (or None) for drop rate ``rate``.
  Returns ``(B, Lq, N, Dh)``."""
  return _softmax_pv_fwd(q, k, v, bias, keep, rate)[0]


def _softmax_pv_fwd(q, k, v, bias, keep, rate):
  qh, kh, vh = _heads_first(q), _heads_first(k), _heads_first(v)
  scores = jnp.einsum("bhqd,bhkd->bhqk", qh, kh).astype(jnp.float32)
  scores = scores / jnp.sqrt(jnp.float32(q.shape[-1]))
  if bias is not None:
    scores = scores + bias
  # The max is a constant shift of the softmax: no gradient flows through it.
  e = jnp.exp(scores - jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True)))
  inv_sum = 1.0 / jnp.sum(e, axis=-1, keepdims=True)  # (B, N, Lq, 1)
  scale = inv_sum if keep is None else inv_sum / (1.0 - rate)
  kept = e if keep is None else jnp.where(keep, e, 0.0)
  out = (jnp.einsum("bhqk,bhkd->bhqd", kept.astype(v.dtype), vh).astype(jnp.float32)
         * scale).astype(v.dtype)
  return _heads_first(out), (qh, kh, vh, bias, keep, e, inv_sum, out)


def _transposed_product(x, y):
  """``swapaxes(x, -1, -2) @ y`` for ``x (B, N, L, Dh)``, ``y (B, N, L, L')`` -> ``(B, L', N, Dh)``.

  Written as ``(x^T)(B, N, Dh, L) @ y``, the transpose materialised (a small copy, kept by the
  optimisation barrier): XLA's CPU matmul kernels take that plain form, where a product that
  contracts the left operand's rows runs on a slower path at about half the rate."""
  x_t = jax.lax.optimization_barrier(jnp.swapaxes(x, -1, -2))
  return jnp.transpose(jnp.einsum("bhdq,bhqk->bhdk", x_t, y), (0, 3, 1, 2))


def _softmax_pv_bwd(rate, residuals, d_out):
  qh, kh, vh, bias, keep, e, inv_sum, out = residuals
  d_out = _heads_first(d_out)
  d_out32 = d_out.astype(jnp.float32)
  scale = inv_sum if keep is None else inv_sum / (1.0 - rate)
  kept = e if keep is None else jnp.where(keep, e, 0.0)
  dv = _transposed_product((d_out32 * scale).astype(vh.dtype), kept.astype(vh.dtype))
  # dL/d(probabilities) = dropout'(d_out @ v^T); softmax's backward subtracts
  # rowsum(P * dP) = rowsum(d_out * out) (dropout included), then divides by sqrt(Dh).
  dp = jnp.einsum("bhqd,bhkd->bhqk", d_out, vh).astype(jnp.float32)
  if keep is not None:
    dp = jnp.where(keep, dp / (1.0 - rate), 0.0)
  row = jnp.sum(d_out32 * out.astype(jnp.float32), axis=-1, keepdims=True)
  ds = ((e * (inv_sum / jnp.sqrt(jnp.float32(qh.shape[-1])))) * (dp - row)).astype(qh.dtype)
  dq = _heads_first(jnp.einsum("bhqk,bhkd->bhqd", ds, kh))
  dk = _transposed_product(qh, ds)
  return dq, dk, dv.astype(vh.dtype), None, None


_softmax_pv.defvjp(_softmax_pv_fwd, _softmax_pv_bwd)


def _explicit_vjp(q, k, v, mask, rate, key, deterministic):
  """`_explicit` through `_softmax_pv` (hand-written backward); the dropout draws the same bits
  as `poi_jax.layers.common.dropout` on the probabilities would."""
  bias = None if mask is None else jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)
  keep = None
  if not deterministic and rate > 0.0:  # (a key is there: dot_product_attention checked)
    shape = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
    keep = jax.random.bernoulli(key, 1.0 - rate, shape)
  return _softmax_pv(q, k, v, bias, keep, float(rate))


def _cpu_kernel_usable(dtype, devices: int) -> bool:
  """``auto``'s test for the native CPU kernel: float32, or bfloat16 where its bfloat16 variant
  runs (AMX tiles); one device (XLA would gather a sharded run's operands onto every device for
  an FFI call); and built."""
  usable_dtype = jnp.dtype(dtype) == jnp.float32 or (
      jnp.dtype(dtype) == jnp.bfloat16 and cpu_attention.amx_available())
  return usable_dtype and devices == 1 and cpu_attention.available()


def choose(implementation: str, dtype, dropout_active: bool,
           shape: tuple[int, int, int, int, int] | None = None) -> str:
  """The kernel that runs: ``cudnn``, ``xla`` (fused-API XLA), ``explicit`` (with dropout),
  ``explicit_vjp`` or ``cpu_kernel``; for the devices being traced for (`target`: the mesh's,
  else the default backend's). ``shape`` ``(B, Lq, Lk, N, Dh)``: with ``auto`` on a CPU, the
  kernel measured fastest on this machine at that shape (`cpu_attention_choice`); without it,
  the rule (the native kernel where it applies, else ``explicit_vjp``)."""
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"model.attention must be one of {IMPLEMENTATIONS}, got {implementation!r}")
  platform, devices = target.platform_and_devices()
  on_gpu = platform == "gpu"
  if implementation == "cudnn":
    if dropout_active:
      raise ValueError("model.attention=cudnn has no attention dropout: set "
                       "model.attention_dropout=0 (or model.attention=auto to use the XLA path "
                       "when dropout is on)")
    if not on_gpu:
      raise ValueError(f"model.attention=cudnn needs a GPU; the devices are {platform!r} "
                       f"(use auto or xla)")
    return "cudnn"
  if implementation == "cpu_kernel":
    if platform != "cpu":
      raise ValueError(f"model.attention=cpu_kernel runs on a CPU; the devices are {platform!r} "
                       f"(use auto)")
    if not cpu_attention.available():
      raise ValueError(f"model.attention=cpu_kernel: {cpu_attention.unavailable_reason()}")
    return "cpu_kernel"
  if implementation == "explicit_vjp":
    return "explicit_vjp"
  if implementation == "auto" and platform == "cpu":
    rule = "cpu_kernel" if _cpu_kernel_usable(dtype, devices) else "explicit_vjp"
    if shape is not None and _probe_applies(shape, devices):
      # Called while a step is traced: the timing runs now, on concrete arrays, not staged out.
      with jax.ensure_compile_time_eval():
        return cpu_attention_choice.fastest(
            cpu_attention_choice.key_of(shape, dtype, dropout_active),
            cpu_candidates(shape, dtype, dropout_active))
    return rule
  if dropout_active or implementation == "explicit":
    return "explicit"
  if implementation == "auto" and on_gpu and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16):
    return "cudnn"
  return "xla"


def _probe_applies(shape, devices: int) -> bool:
  """Time the CPU kernels (rather than apply the rule) for this traced attention? Only for a
  problem large enough for the kernels to differ, traced for and run on this one CPU device of
  a one-process run (several processes must compile the same program; an ahead-of-time
  compile for other devices cannot time them here)."""
  b, lq, lk, n, _ = shape
  return (cpu_attention_choice.probing_enabled() and devices == 1
          and jax.default_backend() == "cpu" and jax.process_count() == 1
          and b * n * lq * lk >= cpu_attention_choice.MIN_SCORES)


def cpu_candidates(shape, dtype, dropout_active: bool) -> dict:
  """The CPU kernels ``auto`` times at ``shape`` ``(B, Lq, Lk, N, Dh)``: name -> a factory of a
  zero-argument run of that kernel's forward + backward (random inputs, a key mask that keeps
  every key, BERT's dropout rate 0.1 when ``dropout_active``)."""
  b, lq, lk, n, dh = shape
  rate = 0.1 if dropout_active else 0.0

  # Built on the first timing only: a choice read from the cache (every layer of every later
  # trace) allocates nothing.
  @functools.cache
  def inputs():
    import numpy as np
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((b, length, n, dh), np.float32), dtype)
               for length in (lq, lk, lk))
    return q, k, v, jnp.ones((b, 1, 1, lk), bool), jax.random.key(0)

  def factory(kind):
    def make():
      q, k, v, mask, key = inputs()

      def loss(q, k, v):
        return _attend(kind, q, k, v, mask, kind, rate, key, dropout_active).astype(
            jnp.float32).sum()
      grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
      return lambda: jax.block_until_ready(grads(q, k, v))
    return make

  kinds = ["explicit_vjp", "explicit"] if dropout_active else ["explicit_vjp", "xla"]
  if _cpu_kernel_usable(dtype, 1):
    kinds.insert(0, "cpu_kernel")
  return {kind: factory(kind) for kind in kinds}


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None,
                          *, num_heads: int, implementation: str = "auto",
                          dropout_rate: float = 0.0, key: jax.Array | None = None,
                          deterministic: bool = True) -> jax.Array:
  """Scaled dot-product attention over heads.

  Args:
    q, k, v: ``(B, L, H*Dh)`` projections (head-major channels, ``h*Dh + j``).
    mask: boolean ``(B, 1, 1, L)`` key mask (`key_mask`) or None.
    dropout_rate, key, deterministic: dropout on the attention probabilities (training).
  Returns:
    ``(B, L, H*Dh)`` in the dtype of ``v``.
  """
  b, lq, width = q.shape
  lk = k.shape[1]
  dh = width // num_heads
  q = q.reshape(b, lq, num_heads, dh)
  k = k.reshape(b, lk, num_heads, dh)
  v = v.reshape(b, lk, num_heads, dh)
  dropout_active = dropout_rate > 0.0 and not deterministic
  if dropout_active and key is None:  # (every kernel that drops draws from it)
    raise ValueError("dropout needs a key when deterministic=False")
  shape = (b, lq, lk, num_heads, dh)
  kind = _runnable(choose(implementation, v.dtype, dropout_active, shape=shape), mask)
  _note(implementation, kind, shape, v.dtype, dropout_active)
  out = _attend(kind, q, k, v, mask, implementation, dropout_rate, key, dropout_active)
  return out.astype(v.dtype).reshape(b, lq, num_heads * dh)


# The kernel each traced attention of this process ran (`kernels_used`). Which one ran is part of
# a run's record: ``auto`` chooses per machine, and the kernels draw other attention-dropout bits
# and sum in other orders, so the same seed trains a different model under each.
_USED: dict[str, dict] = {}
_USED_LOCK = threading.Lock()


def _note(implementation: str, kind: str, shape, dtype, dropout_active: bool) -> None:
  b, lq, lk, n, dh = shape
  where = (f"{b}x{lq}x{lk}x{n}x{dh} {jnp.dtype(dtype).name}"
           + (" dropout" if dropout_active else ""))
  if kind == "cpu_kernel" and cpu_attention.bfloat16_variant(dtype):
    kind = "cpu_kernel bfloat16 (AMX)"  # the kernel's variant on AMX tiles
  platform, devices = target.platform_and_devices()
  if implementation != "auto":
    how = "model.attention"
  elif platform == "cpu" and _probe_applies(shape, devices):
    how = "timed on this CPU"
  else:
    how = "rule"
  with _USED_LOCK:
    _USED[where] = {"kernel": kind, "model.attention": implementation, "chosen_by": how}


def kernels_used() -> dict[str, dict]:
  """The attention kernels this process has traced, by problem: ``"BxLqxLkxNxDh dtype[ dropout]"``
  -> ``{"kernel", "model.attention", "chosen_by"}``. ``chosen_by``: ``timed on this CPU``
  (``auto``'s timing, `cpu_attention_choice`), a ``rule``, or ``model.attention`` (set). The
  engine writes it into a training run's ``environment.json``."""
  with _USED_LOCK:
    return {k: dict(v) for k, v in sorted(_USED.items())}


def _runnable(kind: str, mask) -> str:
  """``kind``, or ``explicit_vjp`` where the native kernel cannot take ``mask``: it takes a key
  mask only, not a per-query one."""
  if kind == "cpu_kernel" and mask is not None and mask.shape[1:3] != (1, 1):
    return "explicit_vjp"
  return kind


def _attend(kind, q, k, v, mask, implementation, dropout_rate, key, dropout_active):
  """Kernel ``kind`` on ``(B, L, N, Dh)`` heads -> ``(B, Lq, N, Dh)``."""
  kind = _runnable(kind, mask)
  if kind == "cpu_kernel":
    bias = None if mask is None else jnp.where(mask[:, 0, 0, :], 0.0, jnp.finfo(jnp.float32).min)
    bf16 = cpu_attention.bfloat16_variant(q.dtype)  # on AMX tiles
    if not dropout_active:
      return cpu_attention.attention(q, k, v, bias, bfloat16=bf16)
    return cpu_attention.attention(q, k, v, bias, dropout_rate=float(dropout_rate),
                                   seed=cpu_attention.dropout_seed(key), bfloat16=bf16)
  if kind == "explicit_vjp":
    return _explicit_vjp(q, k, v, mask, dropout_rate, key, not dropout_active)
  if kind == "explicit":
    return _explicit(q, k, v, mask,
                     lambda p: common.dropout(p, dropout_rate, key, not dropout_active))
  if kind == "cudnn":
    b, lq, lk = q.shape[0], q.shape[1], k.shape[1]
    # cuDNN takes the mask as a bias whose query length must be the queries' (no broadcast).
    full = None if mask is None else jnp.broadcast_to(mask, (b, 1, lq, lk))
    try:
      return jax.nn.dot_product_attention(q, k, v, mask=full, implementation="cudnn")
    except (ValueError, NotImplementedError, RuntimeError):  # a shape cuDNN does not support
      if implementation == "cudnn":
        raise
  return jax.nn.dot_product_attention(q, k, v, mask=mask, implementation="xla")
