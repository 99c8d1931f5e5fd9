"""PyTorch reference of QOPN written from the paper's equations 1-8 and the decisions of issue 9
(test-only; never imported by poi_jax).

Everything runs one example at a time on its REAL parts only: the K real segments, each cut to
its real tokens, so no padding mask is needed anywhere and a masking mistake in the Flax code
cannot be mirrored here.

* Multi-head attention: with ``output_projection``, ``torch.nn.MultiheadAttention`` (per-head
  projections, softmax(QK^T / sqrt(d_head)) V, output projection W^O); without it, eq. 2-3 as
  written (Q, K, V projections, per-head softmax(QK^T / sqrt(d_head)) V, heads concatenated, no
  W^O), computed here head by head. ``block_style="paper"``: that alone;
  ``"paper_residual"``: ``LN(x + MHA(x))``; ``"transformer"``: ``LN(x + MHA(x))`` then
  ``LN(h + FFN(h))`` with a GELU FFN of width 4D.
* QOII (eq. 2-3): for each question row i (the first special token + the question),
  ``R_i = [H_i^0 .. H_i^{K-1}]`` (K x D) attends over the K segments.
* GBIF (eq. 4-6): ``u = [R; R^; R*R^; R-R^]``, ``F = tanh(W_f u + b_f)``, ``G = sigmoid(W_g u +
  b_g)``, ``R~ = G*F + (1-G)*R``.
* QGIP: per segment, self-attention over ``[R~ rows ; context rows H^k[q_rows:]]``.
* Head (eq. 7): Z = the context rows of all segments, concatenated; candidates = the segment
  tokens (separators excluded); one log-softmax over all candidates of the article.
* Loss (eq. 8): mean over examples of ``-(log p^s + log p^e)``.
"""
import numpy as np
import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):

  def __init__(self, dim, heads, block_style, output_projection=True):
    super().__init__()
    assert block_style in ("paper", "paper_residual", "transformer"), block_style
    self.heads, self.block_style = heads, block_style
    if output_projection:
      self.mha = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
    else:  # eq. 2: W_q, W_k, W_v and their biases; eq. 3 has no output projection
      self.mha = None
      self.wq, self.wk, self.wv = (torch.nn.Linear(dim, dim) for _ in "qkv")
    if block_style in ("paper_residual", "transformer"):
      self.ln1 = torch.nn.LayerNorm(dim, eps=1e-12)
    if block_style == "transformer":
      self.ff1 = torch.nn.Linear(dim, 4 * dim)
      self.ff2 = torch.nn.Linear(4 * dim, dim)
      self.ln2 = torch.nn.LayerNorm(dim, eps=1e-12)

  def eq3(self, x):
    """``softmax(Q_h K_h^T / sqrt(d_head)) V_h`` for each head h, concatenated: ``(T, D)``."""
    dh = x.shape[-1] // self.heads
    q, k, v = self.wq(x), self.wk(x), self.wv(x)
    outs = []
    for h in range(self.heads):
      cut = slice(h * dh, (h + 1) * dh)
      p = torch.softmax(q[:, cut] @ k[:, cut].T / dh ** 0.5, dim=-1)
      outs.append(p @ v[:, cut])
    return torch.cat(outs, dim=-1)

  def forward(self, x):
    """``x (T, D)`` -> ``(T, D)``: every row attends to every row."""
    if self.mha is not None:
      out = self.mha(x[None], x[None], x[None], need_weights=False)[0][0]
    else:
      out = self.eq3(x)
    if self.block_style in ("paper_residual", "transformer"):
      out = self.ln1(out + x)
    if self.block_style == "transformer":
      out = self.ln2(self.ff2(F.gelu(self.ff1(out))) + out)
    return out

class Block(torch.nn.Module):

  def __init__(self, dim, heads, block_style="paper_residual", output_projection=False,
               use_qoii=True, use_gbif=True, use_qgip=True):
    super().__init__()
    self.qoii = Attention(dim, heads, block_style, output_projection)
    self.qgip = Attention(dim, heads, block_style, output_projection)
    self.fusion = torch.nn.Linear(4 * dim, dim)  # W_f, b_f
    self.gate = torch.nn.Linear(4 * dim, dim)  # W_g, b_g
    self.use_qoii, self.use_gbif, self.use_qgip = use_qoii, use_gbif, use_qgip

  def gbif(self, r, r_hat):
    u = torch.cat([r, r_hat, r * r_hat, r - r_hat], dim=-1)
    f = torch.tanh(self.fusion(u))
    g = torch.sigmoid(self.gate(u))
    return g * f + (1 - g) * r

  def forward(self, segs, q_rows):
    """``segs``: the K real segments, each ``(n_k, D)`` real rows; -> the same shapes."""
    rows = q_rows if self.use_qoii else 1  # -QOII: the [CLS] rows only
    r = torch.stack([s[:rows] for s in segs], dim=1)  # (rows, K, D): R_i = r[i]
    r_hat = torch.stack([self.qoii(r[i]) for i in range(rows)])
    r_tilde = self.gbif(r, r_hat) if self.use_gbif else r_hat
    out = []
    for k, s in enumerate(segs):
      seq = torch.cat([r_tilde[:, k], s[q_rows:]])  # [X^k ; context rows]
      y = self.qgip(seq) if self.use_qgip else seq
      if not self.use_qoii:  # the question-token rows pass through
        y = torch.cat([y[:1], s[1:q_rows], y[1:]])
      out.append(y)
    return out

class Qopn(torch.nn.Module):
  """Blocks + global head. ``encoder`` (optional) is a transformers model run per segment."""

  def __init__(self, dim, heads, num_blocks, encoder=None, **flags):
    super().__init__()
    self.blocks = torch.nn.ModuleList([Block(dim, heads, **flags) for _ in range(num_blocks)])
    self.qa = torch.nn.Linear(dim, 2, bias=False)  # w_s, w_e
    self.encoder = encoder

  def load_named(self, named: dict) -> None:
    """Copies ``{parameter name: array}`` (every block and head parameter must be given)."""
    mine = dict(self.named_parameters())
    missing = {n for n in mine if not n.startswith("encoder.")} - set(named)
    assert not missing, f"parameters not given: {sorted(missing)}"
    with torch.no_grad():
      for n, v in named.items():
        assert mine[n].shape == tuple(v.shape), (n, mine[n].shape, v.shape)
        mine[n].copy_(torch.tensor(np.asarray(v)))

  def encode(self, ids, types):
    """One segment's real tokens ``(n,)`` -> ``(n, D)``."""
    out = self.encoder(input_ids=ids[None], token_type_ids=types[None],
                       attention_mask=torch.ones_like(ids)[None])
    return out.last_hidden_state[0]

  def reason(self, segs, q_rows):
    for block in self.blocks:
      segs = block(segs, q_rows)
    return segs

  def log_probs(self, segs, q_rows, content_start):
    """Eq. 7: log p^s, log p^e over the article's candidate tokens, in article order.

    ``content_start``: the row of a segment's first token (after the question's separator(s));
    the last row of each segment is its final separator."""
    ys = self.reason(segs, q_rows)
    z = torch.cat([y[q_rows:] for y in ys])  # Z: all context rows, separators included
    keep = []
    offset = 0
    for y in ys:
      n_ctx = y.shape[0] - q_rows
      keep.extend(offset + j for j in range(content_start - q_rows, n_ctx - 1))
      offset += n_ctx
    logits = self.qa(z)[keep]
    return F.log_softmax(logits[:, 0], dim=0), F.log_softmax(logits[:, 1], dim=0)

def loss(log_ps, log_pe, y_s, y_e):
  """Eq. 8 for a list of examples: ``mean(-(log p^s[y_s] + log p^e[y_e]))``."""
  per = [-(ls[s] + le[e]) for ls, le, s, e in zip(log_ps, log_pe, y_s, y_e)]
  return torch.stack(per).mean()
