"""Small building blocks shared by every Flax module: dense/LayerNorm/embedding constructors that
attach logical axis names, the activation table and the dtype policy.

Logical axes (one vocabulary for the whole package; `poi_jax.train.mesh` maps them to mesh axes):
``vocab``, ``embed`` (model width), ``mlp`` (feed-forward width), ``heads`` (the heads x head_dim
projection width), ``kv``, ``layers`` (the stacked axis of scanned layers). ``None`` = replicated.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import matmul
from poi_jax.layers.lookup import Embed

Axes = tuple[str | None, ...]


def named(initializer, axes: Axes):
  """``initializer`` whose variables carry the logical ``axes`` as metadata (for
  `nnx.get_partition_spec` and the engine's rules) without being sharded at creation: the engine
  shards the whole state at once from the config's rules. Per variable (``eager_sharding=False``)
  rather than the process-wide `nnx.use_eager_sharding`, so importing poi_jax changes no Flax
  setting of its user."""
  return nnx.with_partitioning(initializer, axes, eager_sharding=False)


def compute_dtype(name: str) -> jnp.dtype:
  return {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]


def dense(in_features: int, out_features: int, axes: Axes, *, init_std: float, dtype, rngs,
          use_bias: bool = True) -> nnx.Linear:
  """``nnx.Linear`` with kernel ``(in, out)`` named ``axes`` and bias named ``axes[-1]``.

  Initialised like the PyTorch originals (normal(init_std) kernel, zero bias); parameters float32.
  The matmul's backward pass is laid out for XLA's CPU kernels on a CPU (`poi_jax.layers.matmul`).
  """
  return nnx.Linear(
      in_features, out_features, use_bias=use_bias, dtype=dtype, param_dtype=jnp.float32,
      kernel_init=named(nnx.initializers.normal(init_std), axes),
      bias_init=named(nnx.initializers.zeros_init(), (axes[-1],)),
      precision=None, dot_general=matmul.dot_general, rngs=rngs)


def layer_norm(features: int, eps: float, *, dtype, rngs, axis_name: str | None = "embed"
               ) -> nnx.LayerNorm:
  """LayerNorm over the last axis (biased variance, eps from the config, as torch does)."""
  return nnx.LayerNorm(
      features, epsilon=eps, dtype=dtype, param_dtype=jnp.float32,
      scale_init=named(nnx.initializers.ones_init(), (axis_name,)),
      bias_init=named(nnx.initializers.zeros_init(), (axis_name,)),
      rngs=rngs)


def embed(num: int, features: int, axes: Axes, *, init_std: float, dtype, rngs) -> Embed:
  """A float32 table looked up without bfloat16 gathers or scatters (`poi_jax.layers.lookup`)."""
  return Embed(
      num, features, dtype=dtype, param_dtype=jnp.float32,
      embedding_init=named(nnx.initializers.normal(init_std), axes), rngs=rngs)


def gelu_exact(x: jax.Array) -> jax.Array:
  """``x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2)))``, through ``erf`` as torch computes it.

  `jax.nn.gelu(approximate=False)` goes through ``erfc(-x / sqrt(2))``, whose XLA expansion (and
  its derivative) costs a CPU feed-forward block about a quarter of its time; ``erf`` is a short
  polynomial (docs/cpu_profile.md). Same function: within 1.1e-6 of float64 over [-12, 12]."""
  return 0.5 * x * (1.0 + jax.lax.erf(x * jnp.asarray(0.7071067811865476, x.dtype)))


def _gelu_tanh(x):
  return jax.nn.gelu(x, approximate=True)


# HF `hidden_act` names -> functions. `gelu` is the exact erf form, `gelu_new` the tanh form.
ACTIVATIONS = {
    "gelu": gelu_exact,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "tanh": jnp.tanh,
}


def activation(name: str):
  try:
    return ACTIVATIONS[name]
  except KeyError:
    raise ValueError(f"unsupported hidden_act {name!r}; supported: {sorted(ACTIVATIONS)}") from None


def dropout(x: jax.Array, rate: float, key: jax.Array | None, deterministic: bool) -> jax.Array:
  """Inverted dropout with an explicit key (keys are threaded explicitly so that layer stacks can
  run under `lax.scan` without per-layer RNG state)."""
  if deterministic or rate == 0.0:
    return x
  if key is None:
    raise ValueError("dropout needs a key when deterministic=False")
  keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


def split_key(key: jax.Array | None, n: int):
  """``n`` keys from ``key`` (a tuple of Nones when there is none: eval mode)."""
  if key is None:
    return (None,) * n
  return tuple(jax.random.split(key, n))
