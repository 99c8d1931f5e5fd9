"""What every encoder family shares: the output record, input defaults and the layer-stack runner
(plain Python loop, `nnx.remat`, or `nnx.scan` over stacked layer parameters)."""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import common
from poi_jax.models.encoders.config import EncoderConfig, remat_policy


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class EncoderOutput:
  """``last_hidden_state (B, L, D)``, ``pooler_output (B, D)`` and, when asked for,
  ``hidden_states``: the embedding output then every layer's output, each ``(B, L, D)``."""
  last_hidden_state: jax.Array
  pooler_output: jax.Array | None = None
  hidden_states: tuple[jax.Array, ...] | None = None


def default_inputs(input_ids, attention_mask, token_type_ids):
  if attention_mask is None:
    attention_mask = jnp.ones(input_ids.shape, jnp.int32)
  if token_type_ids is None:
    token_type_ids = jnp.zeros(input_ids.shape, jnp.int32)
  return attention_mask, token_type_ids


def create_stacked_layers(make_layer: Callable[[nnx.Rngs], nnx.Module], n: int,
                          rngs: nnx.Rngs) -> nnx.Module:
  """``n`` layers as ONE module whose parameters carry a leading ``layers`` axis (for scan)."""

  @nnx.split_rngs(splits=n)
  @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
  def create(r):
    return make_layer(r)

  return create(rngs)


def run_layers(layers, hidden: jax.Array, mask: jax.Array, key, *, cfg: EncoderConfig,
               deterministic: bool, stacked: bool, collect: bool):
  """Applies a stack of layers ``layer(h, mask, key, deterministic) -> h``.

  Args:
    layers: an ``nnx.List`` of layers, or one module with stacked parameters when ``stacked``.
    hidden: ``(B, L, D)``; mask: boolean key mask ``(B, 1, 1, L)``.
  Returns:
    ``(last (B, L, D), per-layer outputs tuple or None)``.
  """
  n = cfg.num_hidden_layers
  keys = None if (deterministic or key is None) else jax.random.split(key, n)

  def apply(layer, h, k):
    return layer(h, mask, k, deterministic=deterministic)

  if cfg.remat != "none":
    apply = nnx.remat(apply, policy=remat_policy(cfg.remat))

  if not stacked:
    outs = []
    for i, layer in enumerate(layers):
      hidden = apply(layer, hidden, None if keys is None else keys[i])
      outs.append(hidden)
    return hidden, (tuple(outs) if collect else None)

  @nnx.scan(in_axes=(0, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
  def scan_body(layer, h, k):
    h = apply(layer, h, k)
    return h, (h if collect else None)

  if keys is None:
    # Eval mode: no dropout keys; scan still needs an array to slice.
    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=(nnx.Carry, 0))
    def scan_eval(layer, h):
      h = apply(layer, h, None)
      return h, (h if collect else None)
    hidden, stacked_out = scan_eval(layers, hidden)
  else:
    hidden, stacked_out = scan_body(layers, hidden, keys)
  outs = tuple(stacked_out[i] for i in range(n)) if collect else None
  return hidden, outs


class DropoutKeys(nnx.Module):
  """Holds the encoder's dropout RNG stream; yields one key per training call."""

  def __init__(self, rngs: nnx.Rngs):
    self.rngs = nnx.Rngs(dropout=rngs.dropout())

  def __call__(self, deterministic: bool):
    if deterministic:
      return None
    return self.rngs.dropout()


def count_params(module: nnx.Module) -> int:
  """Number of trainable parameters (``nnx.Param``) of a module."""
  return int(sum(x.size for x in jax.tree.leaves(nnx.state(module, nnx.Param))))


__all__ = ["EncoderOutput", "count_params", "run_layers", "create_stacked_layers", "common"]
