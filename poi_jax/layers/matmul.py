"""The dense layers' matmul, with a backward pass written for XLA's CPU backend.

`nnx.Linear` computes ``y = x @ W`` with `jax.lax.dot_general`; JAX differentiates it into a
``dot_general(dy, x)`` over the token axes followed by a transpose. On a CPU, XLA turns that pair
into a strided, transposed copy of ``dy`` (a ``(out, tokens)`` array written column by column)
and a matmul with both operands transposed, which its fast matmul kernels do not take: for a
BERT feed-forward block at 2,048 tokens that copy and that matmul cost as much as the four other
matmuls of the block together (docs/cpu_profile.md). `dot_general` below gives the layer a
custom VJP that asks for the two gradients in the layouts the kernels take:

  ``dx = dy @ W.T``  (``...o,io->...i``)        ``dW = x2.T @ dy2``  (``ti,to->io``, tokens flattened)

Same matmuls, same float32 sums (the order of the token sum may differ: float32 rounding, well
below the parity tests' 1e-5). It applies on the CPU backend, to a Linear's dimension numbers
(contract the last axis of ``x`` with the first of ``W``, no batch axes) without an output
sharding; everything else, and every other backend, is `jax.lax.dot_general` unchanged.
A rematerialisation policy that saves matmul outputs (``dots_saveable``) does not see these
matmuls on a CPU (they are one custom-VJP call), so it recomputes them there.

**bfloat16 matmul precision on a CPU with AMX tiles.** Under ``jax_default_matmul_precision=
bfloat16`` (``--config.runtime.matmul_precision=bfloat16``; JAX's fastest precision, one
bfloat16 pass on a TPU), a float32 Linear on a single-device CPU whose flags list AMX runs its three
matmuls (``y``, ``dx``, ``dW``) on the tiles (`poi_jax.layers.cpu_matmul_amx`): operands
rounded to bfloat16, sums and results in float32, the backward's from the bfloat16 ``x`` and
``W`` the forward used. That is what ``torch.autocast("cpu", torch.bfloat16)`` does to linear
layers, at the tiles' speed (XLA's CPU backend ignores the precision and stays in float32). On a
CPU without AMX, or without the kernel, the precision is ignored there as XLA ignores it.
A Linear on bfloat16 inputs (``model.dtype=bfloat16``) on such a CPU runs there too, whatever
the precision: bfloat16 in and out, float32 sums, what XLA's bfloat16 dot computes (as float32
between conversions, at a fraction of the tiles' speed).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from poi_jax.layers import cpu_matmul_amx
from poi_jax.layers import target


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _linear(x: jax.Array, w: jax.Array, precision) -> jax.Array:
  """``x (..., in) @ w (in, out) -> (..., out)``."""
  return jax.lax.dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), precision=precision)


def _linear_fwd(x, w, precision):
  return _linear(x, w, precision), (x, w)


def _linear_bwd(precision, residuals, dy):
  x, w = residuals
  dx = jax.lax.dot_general(dy, w, (((dy.ndim - 1,), (1,)), ((), ())), precision=precision)
  x2 = x.reshape(-1, x.shape[-1])
  dy2 = dy.reshape(-1, dy.shape[-1])
  dw = jax.lax.dot_general(x2, dy2, (((0,), (0,)), ((), ())), precision=precision)
  return dx.astype(x.dtype), dw.astype(w.dtype)


_linear.defvjp(_linear_fwd, _linear_bwd)


def _is_linear(lhs, rhs, dimension_numbers) -> bool:
  (lc, rc), (lb, rb) = dimension_numbers
  return (rhs.ndim == 2 and tuple(lc) == (lhs.ndim - 1,) and tuple(rc) == (0,)
          and not tuple(lb) and not tuple(rb) and lhs.dtype == rhs.dtype)


@jax.custom_vjp
def _linear_amx(x: jax.Array, w: jax.Array) -> jax.Array:
  """``x (..., in) @ w (in, out) -> (..., out)`` in x's dtype (float32 or bfloat16), from
  bfloat16 operands on AMX tiles, sums in float32."""
  return _linear_amx_fwd(x, w)[0]


def _linear_amx_fwd(x, w):
  xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  y = cpu_matmul_amx.matmul(xb.reshape(-1, x.shape[-1]), wb)
  return y.reshape(*x.shape[:-1], w.shape[1]).astype(x.dtype), (xb, wb)


def _linear_amx_bwd(residuals, dy):
  xb, wb = residuals  # (x and w have dy's dtype: `_is_linear`)
  dy2 = dy.reshape(-1, dy.shape[-1])
  dx = cpu_matmul_amx.matmul(dy2, wb, trans_b=True).reshape(xb.shape)
  # The kernel transposes x itself (XLA's bfloat16 transpose, tried instead, took as long).
  dw = cpu_matmul_amx.matmul(xb.reshape(-1, xb.shape[-1]), dy2, trans_a=True)
  return dx.astype(dy.dtype), dw.astype(dy.dtype)


_linear_amx.defvjp(_linear_amx_fwd, _linear_amx_bwd)


def bfloat16_on_amx() -> bool:
  """Whether a float32 Linear traced now (without a precision of its own) runs on the AMX
  kernel: ``jax_default_matmul_precision`` is ``bfloat16``, the devices are one CPU, and the
  kernel is available there."""
  return jax.config.jax_default_matmul_precision == "bfloat16" and amx_single_cpu()


def amx_single_cpu() -> bool:
  """Whether the devices are one CPU and the AMX matmul kernel is available there."""
  platform, devices = target.platform_and_devices()
  return platform == "cpu" and devices == 1 and cpu_matmul_amx.available()


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None,
                out_sharding=None):
  """`jax.lax.dot_general`'s signature (what `nnx.Linear` calls); the CPU-friendly backward for
  a Linear's matmul on the CPU backend, and its bfloat16 matmuls on AMX tiles when the matmul
  precision asks for bfloat16 (module docstring)."""
  if (target.platform_and_devices()[0] == "cpu" and out_sharding is None
      and preferred_element_type is None
      and _is_linear(lhs, rhs, dimension_numbers)):
    if precision is None and lhs.dtype == jnp.float32 and bfloat16_on_amx():
      return _linear_amx(lhs, rhs)
    if lhs.dtype == jnp.bfloat16 and amx_single_cpu():
      return _linear_amx(lhs, rhs)  # bfloat16 in and out: XLA's own dot, at the tiles' speed
    return _linear(lhs, rhs, precision)
  kwargs = {} if out_sharding is None else {"out_sharding": out_sharding}
  return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                             preferred_element_type=preferred_element_type, **kwargs)
