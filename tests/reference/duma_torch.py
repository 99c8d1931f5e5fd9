"""PyTorch reference of DUMA's paper variant, built on torch.nn.MultiheadAttention (equation (1)
of the paper: per-head projections, softmax(QK^T/sqrt(d_k))V, concat, W^O; a layer without W^O
gets the identity there, with zero bias). Test-only."""
import numpy as np
import torch
import torch.nn.functional as F


def _split_row(h, p_end, q_start, q_end):
  return h[1:1 + p_end], h[q_start:q_end + 1]


class Block(torch.nn.Module):
  def __init__(self, dim, heads, block):
    super().__init__()
    self.mha = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
    self.block = block
    if block == "transformer":
      self.ln1 = torch.nn.LayerNorm(dim, eps=1e-12)
      self.ff1 = torch.nn.Linear(dim, 4 * dim)
      self.ff2 = torch.nn.Linear(4 * dim, dim)
      self.ln2 = torch.nn.LayerNorm(dim, eps=1e-12)

  def forward(self, x, y):
    """x (Lx, D) queries, y (Ly, D) keys/values; one row, no padding at all."""
    out = self.mha(x[None], y[None], y[None], need_weights=False)[0][0]
    if self.block == "transformer":
      out = self.ln1(out + x)
      out = self.ln2(self.ff2(F.gelu(self.ff1(out))) + out)
    return out

  def load_flax(self, att):
    g = lambda p: torch.tensor(np.asarray(p.get_value()))
    with torch.no_grad():
      self.mha.in_proj_weight.copy_(torch.cat([g(att.query.kernel).T, g(att.key.kernel).T,
                                               g(att.value.kernel).T]))
      self.mha.in_proj_bias.copy_(torch.cat([g(att.query.bias), g(att.key.bias),
                                             g(att.value.bias)]))
      if att.output is None:  # no W^O: Concat(heads) itself
        self.mha.out_proj.weight.copy_(torch.eye(self.mha.embed_dim))
        self.mha.out_proj.bias.zero_()
      else:
        self.mha.out_proj.weight.copy_(g(att.output.kernel).T)
        self.mha.out_proj.bias.copy_(g(att.output.bias))
      if self.block == "transformer":
        for mine, theirs in ((self.ln1, att.LayerNorm), (self.ln2, att.ffn_LayerNorm)):
          mine.weight.copy_(g(theirs.scale))
          mine.bias.copy_(g(theirs.bias))
        for mine, theirs in ((self.ff1, att.ffn), (self.ff2, att.ffn_output)):
          mine.weight.copy_(g(theirs.kernel).T)
          mine.bias.copy_(g(theirs.bias))


class TorchDuma(torch.nn.Module):
  """Row by row, each side sliced to its real tokens (so no masking is needed at all)."""

  def __init__(self, dim, heads, k, share, fuse, direction, block):
    super().__init__()
    n_dir = 2 if direction == "both" else 1
    n_blocks = 1 if share else k * n_dir
    self.blocks = torch.nn.ModuleList([Block(dim, heads, block) for _ in range(n_blocks)])
    self.k, self.share, self.fuse, self.direction, self.n_dir = k, share, fuse, direction, n_dir

  @classmethod
  def from_flax(cls, layer, dim, heads, k, share, fuse, direction, block):
    ref = cls(dim, heads, k, share, fuse, direction, block)
    if share:
      ref.blocks[0].load_flax(layer.attention)
    else:
      for i in range(k):
        for j in range(ref.n_dir):
          ref.blocks[i * ref.n_dir + j].load_flax(layer.layers[i][j])
    return ref.eval()

  def _block(self, layer, which):
    return self.blocks[0] if self.share else self.blocks[layer * self.n_dir + which]

  def forward(self, h, bounds):
    rows = []
    for b, (p_end, q_start, q_end) in enumerate(bounds):
      p, qa = _split_row(h[b], int(p_end), int(q_start), int(q_end))
      for i in range(self.k):
        new_p, new_qa = p, qa
        if self.direction in ("both", "p2q"):
          new_p = self._block(i, 0)(p, qa)
        if self.direction in ("both", "q2p"):
          new_qa = self._block(i, 1 if self.direction == "both" else 0)(qa, p)
        p, qa = new_p, new_qa
      pooled = []
      if self.direction in ("both", "p2q"):
        pooled.append(p.mean(0))
      if self.direction in ("both", "q2p"):
        pooled.append(qa.mean(0))
      if len(pooled) == 1:
        rows.append(pooled[0])
      elif self.fuse == "concat":
        rows.append(torch.cat(pooled))
      elif self.fuse == "sum":
        rows.append(pooled[0] + pooled[1])
      else:
        rows.append(pooled[0] * pooled[1])
    return torch.stack(rows)
