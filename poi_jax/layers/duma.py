"""DUMA: DUal Multi-head Co-Attention (Zhu et al., "DUMA: Reading Comprehension with
Transposition Thinking", equation (1)), between passage and question+option.

The encoder output of each option's sequence is split by ``p_end``, ``q_start``, ``q_end``
(`split_passage_question`: gathers + masks, static shapes) into the passage ``E^P`` (tokens
``1..p_end``) and the question+option ``E^QA`` (tokens ``q_start..q_end``), each left-aligned and
zero-padded to L. Then, in two directions, multi-head attention with one sequence as query and the
other as key/value, and `fuse` (mean pooling then concat/sum/mul).

Variants (``variant``):
* ``released`` -- the released code (``parity/SPEC.md`` §2): one shared set of Q/K/V projections
  (``bert_att.{query,key,value}``), no output projection, residual or LayerNorm, ``-10000`` on
  masked keys, padded query rows still computed, mean over all L positions (padding included),
  ``qc`` (question+option attending to the passage... as the released code names it) first.
* ``paper`` -- equation (1): ``MHA(X, Y, Y) = Concat(head_1..head_h) W^O``; masked keys get zero
  probability and the mean pooling runs over real tokens only.

The paper is inconsistent about W^O: equation (1) has it, but Table 9's "+1.8M parameters" on
ALBERT-base (D = 768) is ``3 (D^2 + D)`` = 1.77M, Q/K/V only, as in the released code (with W^O
it would be ``4 (D^2 + D)`` = 2.36M). ``output_projection`` chooses: by default (None) the
variant's own, W^O in ``paper`` (the equation) and none in ``released``; ``paper`` with
``output_projection=False`` is the paper variant with Table 9's parameter count.

Stacking ``num_layers`` = k (paper: k = 2): layer i updates both sides at once,
``P_i = MHA(P_{i-1}, QA_{i-1})`` and ``QA_i = MHA(QA_{i-1}, P_{i-1})``; ``share_layers`` uses one
MHA for every layer and both directions (the paper's best setting), otherwise each layer and
direction has its own. ``direction``: ``both``, ``p2q`` (only MHA_1, the passage as query: the
paper's "P-to-Q only", Table 10) or ``q2p`` (only MHA_2). ``block="transformer"`` is TB-DUMA
(Table 6): each MHA is followed by residual + LayerNorm and a residual FFN + LayerNorm.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import common

FUSES = ("concat", "sum", "mul")
DIRECTIONS = ("both", "p2q", "q2p")
VARIANTS = ("paper", "released")
BLOCKS = ("attention", "transformer")


def split_passage_question(h: jax.Array, p_end: jax.Array, q_start: jax.Array, q_end: jax.Array):
  """``h (N, L, D)``, boundaries ``(N,)`` -> ``(C, Q (N, L, D), m_C, m_Q (N, L) float)``.

  ``C[0:p] = h[1:1+p]`` with ``p = p_end``; ``Q[0:n] = h[q_start:q_start+n]`` with
  ``n = q_end - q_start + 1``; zero-filled after.
  """
  n_rows, length, _ = h.shape
  pos = jnp.arange(length)[None, :]
  m_c = pos < p_end[:, None]
  m_q = pos < (q_end - q_start + 1)[:, None]
  idx_c = jnp.clip(pos + 1, 0, length - 1)
  idx_q = jnp.clip(pos + q_start[:, None], 0, length - 1)
  # Gathered in float32: the backward scatter-add (clipped indices repeat the last row) would be
  # a serialised compare-and-swap loop on a GPU in bfloat16.
  h32 = h.astype(jnp.float32)
  take = lambda idx, m: (jnp.take_along_axis(
      h32, jnp.broadcast_to(idx, (n_rows, length))[..., None], axis=1) * m[..., None]
  ).astype(h.dtype)
  return take(idx_c, m_c), take(idx_q, m_q), m_c.astype(jnp.float32), m_q.astype(jnp.float32)


class CoAttention(nnx.Module):
  """Multi-head attention with ``query`` from one sequence and key/value from another.

  Names mirror the released ``bert_att`` (``query``, ``key``, ``value``; ``output`` = W^O in the
  paper variant; TB-DUMA adds ``LayerNorm``, ``ffn``, ``ffn_output``, ``ffn_LayerNorm``)."""

  def __init__(self, dim: int, num_heads: int, *, variant: str, block: str, eps: float,
               init_std: float, dtype, rngs: nnx.Rngs, output_projection: bool | None = None):
    if dim % num_heads:
      raise ValueError(f"hidden size {dim} is not a multiple of num_heads {num_heads}")
    mk = lambda i, o, axes: common.dense(i, o, axes, init_std=init_std, dtype=dtype, rngs=rngs)
    self.query = mk(dim, dim, ("embed", "heads"))
    self.key = mk(dim, dim, ("embed", "heads"))
    self.value = mk(dim, dim, ("embed", "heads"))
    if output_projection is None:
      output_projection = variant == "paper"
    self.output = mk(dim, dim, ("heads", "embed")) if output_projection else None
    self.num_heads, self.variant, self.block = num_heads, variant, block
    if block == "transformer":
      self.LayerNorm = common.layer_norm(dim, eps, dtype=dtype, rngs=rngs)
      self.ffn = mk(dim, 4 * dim, ("embed", "mlp"))
      self.ffn_output = mk(4 * dim, dim, ("mlp", "embed"))
      self.ffn_LayerNorm = common.layer_norm(dim, eps, dtype=dtype, rngs=rngs)

  def __call__(self, query_seq: jax.Array, kv_seq: jax.Array, kv_mask: jax.Array) -> jax.Array:
    """``query_seq (N, Lq, D)``, ``kv_seq (N, Lk, D)``, ``kv_mask (N, Lk)`` -> ``(N, Lq, D)``."""
    n, lq, d = query_seq.shape
    h, dh = self.num_heads, d // self.num_heads
    q = self.query(query_seq).reshape(n, lq, h, dh)
    k = self.key(kv_seq).reshape(n, -1, h, dh)
    v = self.value(kv_seq).reshape(n, -1, h, dh)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(jnp.float32(dh))
    if self.variant == "released":
      scores = scores + (1.0 - kv_mask[:, None, None, :]) * -10000.0
    else:
      scores = jnp.where(kv_mask[:, None, None, :] > 0, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v).reshape(n, lq, d)
    if self.output is not None:
      out = self.output(out)
    if self.block == "transformer":
      out = self.LayerNorm(out + query_seq)
      out = self.ffn_LayerNorm(self.ffn_output(common.gelu_exact(self.ffn(out)))
                               + out)
    return out


def masked_mean(x: jax.Array, mask: jax.Array | None) -> jax.Array:
  """Mean over the length axis of ``(N, L, D)``: over all L (mask None) or the real tokens."""
  if mask is None:
    return jnp.mean(x, axis=1)
  m = mask[..., None].astype(x.dtype)
  return jnp.sum(x * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)


def fuse(pooled: list[jax.Array], how: str) -> jax.Array:
  if len(pooled) == 1:
    return pooled[0]
  if how == "concat":
    return jnp.concatenate(pooled, axis=-1)
  if how == "sum":
    return pooled[0] + pooled[1]
  if how == "mul":
    return pooled[0] * pooled[1]
  raise ValueError(f"fuse must be one of {FUSES}, got {how!r}")


class Duma(nnx.Module):
  """The DUMA layer: ``h (N, L, D)`` + boundaries -> fused ``(N, F)`` with ``F`` = 2D for concat
  in both directions, else D. With ``return_intermediates`` also the split and both outputs."""

  def __init__(self, dim: int, num_heads: int, *, variant: str = "paper", num_layers: int = 2,
               share_layers: bool = True, fuse: str = "concat", direction: str = "both",
               block: str = "attention", output_projection: bool | None = None,
               eps: float = 1e-12, init_std: float = 0.02, dtype=jnp.float32, rngs: nnx.Rngs):
    for name, value, allowed in (("variant", variant, VARIANTS), ("fuse", fuse, FUSES),
                                 ("direction", direction, DIRECTIONS), ("block", block, BLOCKS)):
      if value not in allowed:
        raise ValueError(f"DUMA {name} must be one of {allowed}, got {value!r}")
    if variant == "released" and (num_layers != 1 or direction != "both" or block != "attention"
                                  or fuse != "concat"):
      raise ValueError("the released DUMA variant is one shared layer, both directions, concat")
    if variant == "released" and output_projection:
      raise ValueError("the released DUMA variant has no output projection W^O")
    if num_layers < 1:
      raise ValueError(f"DUMA num_layers must be >= 1, got {num_layers}")
    self.variant, self.num_layers, self.share = variant, num_layers, share_layers
    self.fuse_how, self.direction = fuse, direction
    make = lambda: CoAttention(dim, num_heads, variant=variant, block=block, eps=eps,
                               init_std=init_std, dtype=dtype, rngs=rngs,
                               output_projection=output_projection)
    if variant == "released":
      self.bert_att = make()  # the released state_dict name
    elif share_layers:
      self.attention = make()
    else:
      n_dir = 2 if direction == "both" else 1
      self.layers = nnx.List([nnx.List([make() for _ in range(n_dir)])
                              for _ in range(num_layers)])

  @property
  def output_dim_factor(self) -> int:
    return 2 if (self.direction == "both" and self.fuse_how == "concat") else 1

  def _mha(self, layer: int, which: int) -> CoAttention:
    if self.variant == "released":
      return self.bert_att
    if self.share:
      return self.attention
    return self.layers[layer][which]

  def __call__(self, h, p_end, q_start, q_end, *, return_intermediates: bool = False):
    c, q, m_c, m_q = split_passage_question(h, p_end, q_start, q_end)
    if self.variant == "released":
      att = self.bert_att
      cq = att(q, c, m_c)  # SPEC: CoAtt(ctx=C, qry=Q, mask=m_C)
      qc = att(c, q, m_q)  # CoAtt(ctx=Q, qry=C, mask=m_Q)
      fused = jnp.concatenate([masked_mean(qc, None), masked_mean(cq, None)], axis=-1)
      if return_intermediates:
        return fused, dict(context_states=c, query_states=q, context_mask=m_c, query_mask=m_q,
                           cq_biatt_output=cq, qc_biatt_output=qc)
      return fused
    p_seq, qa_seq = c, q
    for i in range(self.num_layers):
      new_p, new_qa = p_seq, qa_seq
      if self.direction in ("both", "p2q"):
        new_p = self._mha(i, 0)(p_seq, qa_seq, m_q)  # MHA_1: passage queries question+option
      if self.direction in ("both", "q2p"):
        new_qa = self._mha(i, 1 if self.direction == "both" else 0)(qa_seq, p_seq, m_c)  # MHA_2
      p_seq, qa_seq = new_p, new_qa
    pooled = []
    if self.direction in ("both", "p2q"):
      pooled.append(masked_mean(p_seq, m_c))
    if self.direction in ("both", "q2p"):
      pooled.append(masked_mean(qa_seq, m_q))
    fused = fuse(pooled, self.fuse_how)
    if return_intermediates:
      return fused, dict(context_states=c, query_states=q, context_mask=m_c, query_mask=m_q,
                         passage_output=p_seq, question_output=qa_seq)
    return fused
