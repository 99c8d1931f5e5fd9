"""QOPN's multi-step reasoning (Question-Oriented Propagation Network, §2.2 of the paper): the
attention of the paper, QOII (eq. 2-3), GBIF (eq. 4-6), QGIP and the block stack.

Tensors: the encoder output of the K segments of B examples, ``h (B, K, L, D)``, each segment
laid out in the encoder's own pair template (BERT ``[CLS] Q [SEP] S [SEP]``, RoBERTa
``<s> Q </s></s> S </s>``) and right-padded to L. ``question_rows (B,)`` = 1 + M (the first
special token + the question; the same for every segment of an example), ``attention_mask
(B, K, L)`` the real tokens, ``segment_mask (B, K)`` the real segments.

Decisions where the paper is silent (issue 9):

* Multi-head attention (`QopnAttention`): query/key/value projections and ``softmax(Q K^T /
  sqrt(d_head)) V`` per head, concatenated (eq. 2-3; lambda = d_head). Masked keys get exactly
  zero probability (``finfo.min`` before the softmax); a query whose keys are all masked (a padded
  segment) gets a finite uniform average, which nothing downstream reads. Three block styles:

  - ``paper_residual`` (the default): eq. 2-3 plus a residual and LayerNorm,
    ``LayerNorm(x + MHA(x))``, nothing else.
  - ``paper``: eq. 2-3 literally, ``MHA(x)`` with no residual. It does not train: at
    initialisation (std 0.02) the attention is nearly uniform, so each block replaces a row by
    close to the mean of the rows' values and keeps ~1/300 of the spread across positions; after
    three blocks nothing tells the positions apart (docs/qopn.md, docs/results.md). The paper's
    Fig. 2 is nearly flat from 1 to 5 blocks (NewsQA: +0.4 F1), which a collapsing stack cannot
    produce, so its authors' code almost certainly had a residual path: hence the default.
    Kept as an option for the literal reading.
  - ``transformer``: ``LayerNorm(x + MHA(x))`` then a residual GELU FFN (D -> 4D -> D) and
    LayerNorm (a BERT layer).

  ``output_projection`` adds the output projection W^O of the Transformer's multi-head attention
  after the concatenation. Eq. 3 has none, so it is off by default (the blocks measured in
  docs/results.md with ``transformer`` had it on).
* QOII attends across the K segments for each question position i < 1 + M (``R_i (K, D)``), with
  padded segments masked as keys; the weights are shared over i. Rows are taken from a static
  window of ``question_window`` rows (the longest question + 1, from the config) so that shapes
  stay static under ``jit``; rows at or past ``question_rows`` are computed and discarded.
* GBIF per (i, k): ``u = [R; R^; R*R^; R-R^] (4D)``, ``F = tanh(W_f u + b_f)``,
  ``G = sigmoid(W_g u + b_g)``, ``R~ = G*F + (1-G)*R`` (parameters ``fusion``, ``gate``).
* QGIP attends within each segment over ``[R~ rows ; context rows]`` (the question rows replaced
  by their gated fusion, "context rows" = everything after the question: separators, segment,
  final separator), padding masked. Its output rows (question and context) are the next block's
  input; blocks do not share weights.
* Ablations (the paper's Table 4): ``use_qoii=False`` (-QOII) runs QOII/GBIF on the [CLS] row
  only and QGIP attends over ``[gated CLS ; context rows]``; the question-token rows are not
  attended to and pass through unchanged. ``use_gbif=False`` (-GBIF): ``R~ = R^``.
  ``use_qgip=False`` (-QGIP, "the overall architecture and the global normalisation kept"): no
  attention in the segment, ``Y = [R~ ; context rows]``, so the context rows, and hence the
  answer, are the encoder's; only the global span softmax remains of QOPN.

Dropout (rate ``dropout``, explicit keys) on each attention's output and on the FFN output; no
dropout at evaluation. Parameters are float32 with logical axis names; compute runs in ``dtype``
with softmax in float32.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from poi_jax.layers import common

BLOCK_STYLES = ("paper_residual", "paper", "transformer")
_RESIDUAL = ("paper_residual", "transformer")


class QopnAttention(nnx.Module):
  """Multi-head self-attention of the paper (eq. 2-3), in one of the block styles of the module
  docstring.

  Parameters: ``query``, ``key``, ``value`` (D -> D); ``output`` (D -> D) with
  ``output_projection``; ``LayerNorm`` with ``paper_residual`` and ``transformer``; with
  ``transformer`` also ``ffn`` (D -> 4D), ``ffn_output`` (4D -> D), ``ffn_LayerNorm``.
  """

  def __init__(self, dim: int, num_heads: int, *, block_style: str = "paper_residual",
               output_projection: bool = False, eps: float = 1e-12, init_std: float = 0.02,
               dropout: float = 0.0, dtype=jnp.float32, rngs: nnx.Rngs):
    if block_style not in BLOCK_STYLES:
      raise ValueError(f"block_style must be one of {BLOCK_STYLES}, got {block_style!r}")
    if dim % num_heads:
      raise ValueError(f"hidden size {dim} is not a multiple of num_heads {num_heads}")
    mk = lambda i, o, axes: common.dense(i, o, axes, init_std=init_std, dtype=dtype, rngs=rngs)
    self.query = mk(dim, dim, ("embed", "heads"))
    self.key = mk(dim, dim, ("embed", "heads"))
    self.value = mk(dim, dim, ("embed", "heads"))
    self.output = mk(dim, dim, ("heads", "embed")) if output_projection else None
    self.num_heads, self.block_style, self.dropout = num_heads, block_style, float(dropout)
    if block_style in _RESIDUAL:
      self.LayerNorm = common.layer_norm(dim, eps, dtype=dtype, rngs=rngs)
    if block_style == "transformer":
      self.ffn = mk(dim, 4 * dim, ("embed", "mlp"))
      self.ffn_output = mk(4 * dim, dim, ("mlp", "embed"))
      self.ffn_LayerNorm = common.layer_norm(dim, eps, dtype=dtype, rngs=rngs)

  def __call__(self, x: jax.Array, mask: jax.Array, key=None, *,
               deterministic: bool = True) -> jax.Array:
    """``x (N, T, D)``, key mask ``mask (N, T)`` {0,1} -> ``(N, T, D)``."""
    n, t, d = x.shape
    h = self.num_heads
    dh = d // h
    k1, k2 = common.split_key(key, 2)
    q = self.query(x).reshape(n, t, h, dh)
    k = self.key(x).reshape(n, t, h, dh)
    v = self.value(x).reshape(n, t, h, dh)
    scores = jnp.einsum("nqhd,nkhd->nhqk", q, k).astype(jnp.float32) / jnp.sqrt(
        jnp.float32(dh))
    scores = jnp.where(mask[:, None, None, :] > 0, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("nhqk,nkhd->nqhd", probs.astype(v.dtype), v).reshape(n, t, d)
    if self.output is not None:
      out = self.output(out)
    out = common.dropout(out, self.dropout, k1, deterministic)
    if self.block_style in _RESIDUAL:
      out = self.LayerNorm(out + x)
    if self.block_style == "transformer":
      ffn = self.ffn_output(common.gelu_exact(self.ffn(out)))
      out = self.ffn_LayerNorm(common.dropout(ffn, self.dropout, k2, deterministic) + out)
    return out


def gbif(r: jax.Array, r_hat: jax.Array, fusion: nnx.Linear, gate: nnx.Linear) -> jax.Array:
  """Gate-based information fusion (eq. 4-6), position-wise: ``(..., D) x 2 -> (..., D)``."""
  u = jnp.concatenate([r, r_hat, r * r_hat, r - r_hat], axis=-1)
  f = jnp.tanh(fusion(u))
  g = jax.nn.sigmoid(gate(u))
  return g * f + (1.0 - g) * r


def qoii_rows(h: jax.Array, rows: int) -> jax.Array:
  """The first ``rows`` rows of each segment, arranged per question position:
  ``(B, K, L, D) -> (B, rows, K, D)`` (R_i of eq. 2 is ``[:, i]``)."""
  return jnp.swapaxes(h[:, :, :rows], 1, 2)


class ReasoningBlock(nnx.Module):
  """One reasoning block: QOII -> GBIF -> QGIP. ``h (B, K, L, D) -> (B, K, L, D)``.

  Parameters: ``qoii`` and ``qgip`` (`QopnAttention`), ``fusion`` and ``gate`` (4D -> D).
  """

  def __init__(self, dim: int, num_heads: int, *, question_window: int,
               block_style: str = "paper_residual", output_projection: bool = False,
               use_qoii: bool = True, use_gbif: bool = True, use_qgip: bool = True,
               eps: float = 1e-12, init_std: float = 0.02, dropout: float = 0.0,
               dtype=jnp.float32, rngs: nnx.Rngs):
    mk_att = lambda: QopnAttention(dim, num_heads, block_style=block_style,
                                   output_projection=output_projection, eps=eps,
                                   init_std=init_std, dropout=dropout, dtype=dtype, rngs=rngs)
    self.qoii = mk_att()
    self.fusion = common.dense(4 * dim, dim, ("mlp", "embed"), init_std=init_std, dtype=dtype,
                               rngs=rngs)
    self.gate = common.dense(4 * dim, dim, ("mlp", "embed"), init_std=init_std, dtype=dtype,
                             rngs=rngs)
    self.qgip = mk_att()
    # -QOII works on the [CLS] row only.
    self.question_window = 1 if not use_qoii else int(question_window)
    self.use_qoii, self.use_gbif, self.use_qgip = bool(use_qoii), bool(use_gbif), bool(use_qgip)

  def fused_question(self, h, segment_mask, key=None, *, deterministic: bool = True):
    """QOII + GBIF on the question window: ``(B, K, L, D) -> R~ (B, K, W, D)``."""
    b, k, l, d = h.shape
    w = min(self.question_window, l)
    r = qoii_rows(h, w)  # (B, W, K, D)
    mask = jnp.broadcast_to(segment_mask[:, None, :], (b, w, k)).reshape(b * w, k)
    r_hat = self.qoii(r.reshape(b * w, k, d), mask, key,
                      deterministic=deterministic).reshape(b, w, k, d)
    r_tilde = gbif(r, r_hat, self.fusion, self.gate) if self.use_gbif else r_hat
    return jnp.swapaxes(r_tilde, 1, 2)

  def __call__(self, h, attention_mask, question_rows, segment_mask, key=None, *,
               deterministic: bool = True):
    b, k, l, d = h.shape
    k1, k2 = common.split_key(key, 2)
    x = self.fused_question(h, segment_mask, k1, deterministic=deterministic)
    w = x.shape[2]
    pos = jnp.arange(l)[None, None, :]
    q_rows = question_rows[:, None, None]
    if self.use_qoii:
      fused_row = pos < q_rows  # every question row takes its gated fusion
    else:
      fused_row = pos == 0  # -QOII: only [CLS]
    x_full = jnp.pad(x, ((0, 0), (0, 0), (0, l - w), (0, 0))).astype(h.dtype)
    seq = jnp.where(fused_row[..., None], x_full, h)
    if not self.use_qgip:
      return seq
    keys = attention_mask > 0
    if not self.use_qoii:
      keys = keys & ~((pos >= 1) & (pos < q_rows))  # question tokens are not attended to
    y = self.qgip(seq.reshape(b * k, l, d), keys.reshape(b * k, l).astype(jnp.float32), k2,
                  deterministic=deterministic).reshape(b, k, l, d)
    if not self.use_qoii:
      y = jnp.where(((pos >= 1) & (pos < q_rows))[..., None], h, y)
    return y


def _stacked(make, n: int, rngs: nnx.Rngs) -> nnx.Module:
  """``n`` modules as one whose parameters carry a leading ``layers`` axis (for ``nnx.scan``)."""

  @nnx.split_rngs(splits=n)
  @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: "layers"})
  def create(r):
    return make(r)

  return create(rngs)


class Reasoning(nnx.Module):
  """``num_blocks`` reasoning blocks, chained (a block's output rows are the next one's input).

  ``scan_blocks``: the blocks' parameters are stacked on a leading ``layers`` axis (path
  ``blocks/...``) and run with ``nnx.scan`` (the trace does not grow with the number of blocks);
  otherwise an ``nnx.List`` (``blocks/<i>/...``) run in a Python loop.
  """

  def __init__(self, dim: int, num_heads: int, *, num_blocks: int = 3, scan_blocks: bool = True,
               rngs: nnx.Rngs, **block_kwargs):
    if num_blocks < 0:
      raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
    self.num_blocks, self.scan_blocks = int(num_blocks), bool(scan_blocks)
    make = lambda r: ReasoningBlock(dim, num_heads, rngs=r, **block_kwargs)
    if self.num_blocks == 0:
      self.blocks = None
    elif self.scan_blocks:
      self.blocks = _stacked(make, self.num_blocks, rngs)
    else:
      self.blocks = nnx.List([make(rngs) for _ in range(self.num_blocks)])

  def __call__(self, h, attention_mask, question_rows, segment_mask, key=None, *,
               deterministic: bool = True):
    """``h (B, K, L, D)`` -> the last block's rows ``(B, K, L, D)``."""
    if self.blocks is None:
      return h
    n = self.num_blocks
    keys = None if (deterministic or key is None) else jax.random.split(key, n)

    def apply(block, x, k):
      return block(x, attention_mask, question_rows, segment_mask, k,
                   deterministic=deterministic)

    if not self.scan_blocks:
      for i, block in enumerate(self.blocks):
        h = apply(block, h, None if keys is None else keys[i])
      return h
    if keys is None:
      @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
      def run_eval(block, x):
        return apply(block, x, None)
      return run_eval(self.blocks, h)

    @nnx.scan(in_axes=(0, nnx.Carry, 0), out_axes=nnx.Carry)
    def run_train(block, x, k):
      return apply(block, x, k)
    return run_train(self.blocks, h, keys)
