"""DASSA: Discourse-Aware Semantic Self-Attention (Mihaylov & Frank, EMNLP 2019, eq. 1-4), as the
original code's ``MultiHeadSemanticFlatConcatSelfAttention`` runs it ("concat" mode,
``tests/fixtures/parity/SPEC.md`` §4).

Each head ``h`` reads one *view*: a label id ``l[b,h,t]`` and a scope id ``s[b,h,t]`` per token.

* ``Q[b,h,t] = [X[b,t] ; Ew_q[l]] @ Wq[h] + Eb_q[l]`` and likewise K with the ``_k_`` tables
  (``Wq[h]`` is ``(D+E, dh)`` without bias, ``Ew`` ``(N, E)``, ``Eb`` ``(N, dh)``). The labels are
  the same for queries and keys.
* ``V = X Wv^T + bv`` split head-major (channel ``h*dv + j`` is head ``h``).
* ``S = (Q / sqrt(input_dim // H)) K^T`` (the code scales by the *input* width per head, not dh).
* Scope mask ``M[b,h,i,j] = (s_i == s_j) and s_j > 0``; ``P = softmax_j(where(M, S, -1e32))``.
* ``out = concat_h(P V) Wo^T + bo``.

Modes:

* ``masked`` (the default): padding keys are masked too and a row without an allowed key is
  uniform over the real tokens only, so the outputs at real tokens do not depend on how much
  padding the batch adds.
* ``released``: the original, kept for fixture parity. The token mask is not used; a query row
  without an allowed key (scope 0) has all scores at -1e32 and becomes uniform over all T
  positions, padding included, and the "No" heads (scope replaced by a per-head constant) attend
  the padding like real tokens. Reproduces the golden fixture.

Why ``masked`` is the default: the original pads each split to its longest passage (800 training
tokens vs 1,200 at evaluation on NarrativeQA), so under ``released`` a token's output depends on
how much padding its batch carries, and training and evaluation see different padding. Nothing in
the paper (eq. 1-4 attend over tokens of the passage) asks for attention to padding.

`prepare_views` is the original's block-level handling: views zero-padded to H heads, then every
label 0 and every scope 0 of head ``h`` replaced by ``N - H + h`` (the "No" heads become full
attention with their own label; unlabelled tokens of a view share the per-head default).

Parameter names mirror the PyTorch ``state_dict`` (``_queries_projection``,
``_semantic_label_embedding_q_w.weight`` ...; Linear kernels are the transposed ``weight``). The
original also holds an unused ``_combined_projection``; it is not created here (a checkpoint's
copy is reported as unused by `load_torch_state_dict`).
"""
from __future__ import annotations

import math
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from poi_jax.layers import common

MODES = ("released", "masked")
# allennlp's masked_softmax(memory_efficient=True) fill value.
MASK_FILL = -1e32


def _xavier_normal_3d(shape: tuple[int, int, int]):
  """torch ``xavier_normal_`` on an ``(H, D+E, dh)`` tensor: fan_in = (D+E)*dh, fan_out = H*dh
  (torch folds trailing dims into the receptive field)."""
  h, i, o = shape
  std = math.sqrt(2.0 / (i * o + h * o))
  return nnx.initializers.normal(std)


def prepare_views(labels: jax.Array, scopes: jax.Array, num_heads: int, num_labels: int, *,
                  replace_zero: bool = True) -> tuple[jax.Array, jax.Array]:
  """Block-level view handling of the original.

  Args:
    labels, scopes: ``(B, V, T)`` int views, ``V <= num_heads`` (0 = no label / no scope).
    num_heads: H. num_labels: N, the size of the label tables.
    replace_zero: the original's ``replace_zero_semantic_labels_with_per_head_labels``.
  Returns:
    ``(labels, scopes)`` each ``(B, H, T)``: views zero-padded to H heads; with
    ``replace_zero`` every 0 in head ``h`` (labels and scopes alike) becomes ``N - H + h``.
  """
  b, v, t = labels.shape
  if scopes.shape != labels.shape:
    raise ValueError(f"labels {labels.shape} and scopes {scopes.shape} differ")
  if v > num_heads:
    raise ValueError(f"{v} views for {num_heads} heads")
  if num_labels < num_heads:
    raise ValueError(f"num_semantic_labels={num_labels} < num_heads={num_heads}: no room for "
                     f"the per-head default labels")
  pad = ((0, 0), (0, num_heads - v), (0, 0))
  labels = jnp.pad(labels, pad)
  scopes = jnp.pad(scopes, pad)
  if replace_zero:
    per_head = (num_labels - num_heads + jnp.arange(num_heads, dtype=labels.dtype))[None, :, None]
    labels = jnp.where(labels == 0, per_head, labels)
    scopes = jnp.where(scopes == 0, per_head.astype(scopes.dtype), scopes)
  return labels, scopes


def scope_mask(scopes: jax.Array) -> jax.Array:
  """``(B, H, T)`` scope ids -> ``(B, H, T, T)`` bool: same scope and a nonzero key scope."""
  return (scopes[..., :, None] == scopes[..., None, :]) & (scopes[..., None, :] > 0)


class DassaSelfAttention(nnx.Module):
  """Multi-head self-attention with per-head semantic label embeddings and scope masks.

  Args:
    input_dim: D. num_heads: H.
    attention_dim: width of Q/K over all heads (``dh = attention_dim // H``); default D.
    values_dim: width of V over all heads; default D.
    semantic_emb_dim: E, the label feature concatenated to the input for Q and K.
    num_semantic_labels: N, rows of the four label tables.
    output_projection_dim: width of the output; default D.
    mode: ``masked`` (default) or ``released`` (the original, fixture parity; module docstring).
    attention_dropout: dropout on the attention probabilities (training only).
  """

  def __init__(self, input_dim: int, num_heads: int, *, attention_dim: int | None = None,
               values_dim: int | None = None, semantic_emb_dim: int = 16,
               num_semantic_labels: int, output_projection_dim: int | None = None,
               mode: str = "masked", attention_dropout: float = 0.0, init_std: float = 0.02,
               dtype=jnp.float32, rngs: nnx.Rngs):
    if mode not in MODES:
      raise ValueError(f"DASSA mode must be one of {MODES}, got {mode!r}")
    attention_dim = input_dim if attention_dim is None else attention_dim
    values_dim = input_dim if values_dim is None else values_dim
    out_dim = input_dim if output_projection_dim is None else output_projection_dim
    for name, width in (("attention_dim", attention_dim), ("values_dim", values_dim)):
      if width % num_heads:
        raise ValueError(f"DASSA {name}={width} is not a multiple of num_heads={num_heads}")
    if input_dim // num_heads == 0:
      raise ValueError(f"DASSA input_dim={input_dim} < num_heads={num_heads}: zero scale")
    self.input_dim, self.num_heads = input_dim, num_heads
    self.attention_dim, self.values_dim = attention_dim, values_dim
    self.semantic_emb_dim, self.num_semantic_labels = semantic_emb_dim, num_semantic_labels
    self.mode, self.attention_dropout = mode, float(attention_dropout)
    self.dtype = dtype
    dh = attention_dim // num_heads
    proj_shape = (num_heads, input_dim + semantic_emb_dim, dh)
    key = rngs.params
    self._queries_projection = nnx.Param(
        _xavier_normal_3d(proj_shape)(key(), proj_shape, jnp.float32),
        out_sharding=("heads", None, "kv"), eager_sharding=False)
    self._keys_projection = nnx.Param(
        _xavier_normal_3d(proj_shape)(key(), proj_shape, jnp.float32),
        out_sharding=("heads", None, "kv"), eager_sharding=False)
    table = lambda width: common.embed(num_semantic_labels, width, (None, None), init_std=1.0,
                                       dtype=dtype, rngs=rngs)
    self._semantic_label_embedding_q_w = table(semantic_emb_dim)
    self._semantic_label_embedding_k_w = table(semantic_emb_dim)
    self._semantic_label_embedding_q_b = table(dh)
    self._semantic_label_embedding_k_b = table(dh)
    self._values_projection = common.dense(input_dim, values_dim, ("embed", "heads"),
                                           init_std=init_std, dtype=dtype, rngs=rngs)
    self._output_projection = common.dense(values_dim, out_dim, ("heads", "embed"),
                                           init_std=init_std, dtype=dtype, rngs=rngs)
    self.dropout_rngs = nnx.Rngs(dropout=rngs.dropout()) if attention_dropout > 0 else None

  def _project(self, x, labels, w, emb_w, emb_b):
    """``[X ; Ew[l]] @ W[h] + Eb[l]`` as ``X @ W[h, :D] + Ew[l] @ W[h, D:] + Eb[l]`` (the same
    sum without materialising the ``(B, H, T, D+E)`` concatenation) -> ``(B, H, T, dh)``."""
    d = self.input_dim
    w = w.get_value().astype(self.dtype)
    from_x = jnp.einsum("btd,hdk->bhtk", x, w[:, :d], precision=None)
    from_label = jnp.einsum("bhte,hek->bhtk", emb_w(labels), w[:, d:])
    return from_x + from_label + emb_b(labels)

  def __call__(self, x: jax.Array, labels: jax.Array, scopes: jax.Array,
               mask: jax.Array | None = None, *, deterministic: bool = True,
               return_attention: bool = False):
    """Args:
      x: ``(B, T, D)`` inputs.
      labels: ``(B, H, T)`` label ids in ``[0, N)`` (used for queries and keys).
      scopes: ``(B, H, T)`` scope ids (0 = no scope).
      mask: ``(B, T)`` {0,1} token mask; used only in ``masked`` mode.
    Returns:
      ``(B, T, out_dim)``; with ``return_attention`` also ``P (B, H, T, T)`` float32.
    """
    b, t, _ = x.shape
    h = self.num_heads
    if labels.shape != (b, h, t) or scopes.shape != (b, h, t):
      raise ValueError(f"DASSA labels {labels.shape} / scopes {scopes.shape} must be "
                       f"{(b, h, t)} (batch, heads, tokens)")
    x = x.astype(self.dtype)
    q = self._project(x, labels, self._queries_projection, self._semantic_label_embedding_q_w,
                      self._semantic_label_embedding_q_b)
    k = self._project(x, labels, self._keys_projection, self._semantic_label_embedding_k_w,
                      self._semantic_label_embedding_k_b)
    v = self._values_projection(x).reshape(b, t, h, self.values_dim // h)
    scale = math.sqrt(self.input_dim // h)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q / scale, k).astype(jnp.float32)
    allowed = scope_mask(scopes)
    if self.mode == "masked":
      if mask is None:
        raise ValueError("DASSA masked mode needs the token mask")
      keys = (mask > 0)[:, None, None, :]
      allowed = allowed & keys
      # A row without an allowed key: uniform over the real tokens (the released uniform row,
      # minus padding); an all-padding row stays uniform over everything (no 0/0).
      empty = ~jnp.any(allowed, axis=-1, keepdims=True)
      fallback = keys | ~jnp.any(keys, axis=-1, keepdims=True)
      allowed = jnp.where(empty, fallback, allowed)
      scores = jnp.where(empty, 0.0, scores)
    probs = jax.nn.softmax(jnp.where(allowed, scores, MASK_FILL), axis=-1)
    if not deterministic and self.attention_dropout > 0:
      probs = common.dropout(probs, self.attention_dropout, self.dropout_rngs.dropout(), False)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v).reshape(b, t, self.values_dim)
    out = self._output_projection(out)
    return (out, probs) if return_attention else out


# torch state_dict name -> (attribute path, transpose) for `load_torch_state_dict`.
def _state_dict_map(layer: DassaSelfAttention) -> dict[str, tuple[nnx.Param, bool]]:
  m = {
      "_queries_projection": (layer._queries_projection, False),
      "_keys_projection": (layer._keys_projection, False),
      "_values_projection.weight": (layer._values_projection.kernel, True),
      "_values_projection.bias": (layer._values_projection.bias, False),
      "_output_projection.weight": (layer._output_projection.kernel, True),
      "_output_projection.bias": (layer._output_projection.bias, False),
  }
  for name in ("q_w", "k_w", "q_b", "k_b"):
    attr = f"_semantic_label_embedding_{name}"
    m[f"{attr}.weight"] = (getattr(layer, attr).embedding, False)
  return m


def load_torch_state_dict(layer: DassaSelfAttention, sd: Mapping[str, np.ndarray], *,
                          prefix: str = "") -> list[str]:
  """Loads the original module's ``state_dict`` (names as in SPEC §4) by rename + transpose.

  Returns the names in ``sd`` under ``prefix`` that were not used (``_combined_projection.*``).
  Raises ``ValueError`` naming the tensor on a missing name or a wrong shape.
  """
  used = set()
  for name, (param, transpose) in _state_dict_map(layer).items():
    full = prefix + name
    if full not in sd:
      raise ValueError(f"state_dict has no tensor {full!r}")
    value = np.asarray(sd[full], np.float32)
    value = value.T if transpose else value
    want = tuple(param.get_value().shape)
    if value.shape != want:
      raise ValueError(f"tensor {full!r} has shape {value.shape} (after transpose: "
                       f"{transpose}), the layer expects {want}")
    param.set_value(jnp.asarray(value))
    used.add(full)
  return sorted(k for k in sd if k.startswith(prefix) and k not in used
                and not k.startswith(("input.", "config.", "intermediate.", "output.")))
