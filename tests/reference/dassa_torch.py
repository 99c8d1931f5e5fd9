"""PyTorch reference of DASSA attention written from `../shared/specs/dassa.md` §3.1 and
`tests/fixtures/parity/SPEC.md` §4 (test-only; never imported by poi_jax).

Literal transcription of the formulas: the ``(D+E)`` concatenation is materialised per head, the
scope mask is built by comparing scope ids, and the masked softmax fills with -1e32 (or -inf, to
check that both agree when a key is allowed).
"""
from __future__ import annotations

import numpy as np
import torch


class TorchDassa(torch.nn.Module):
  """Parameters under the original ``state_dict`` names (SPEC §4)."""

  def __init__(self, input_dim, num_heads, attention_dim, values_dim, emb_dim, num_labels,
               out_dim=None):
    super().__init__()
    dh = attention_dim // num_heads
    out_dim = input_dim if out_dim is None else out_dim
    self.h, self.input_dim, self.values_dim = num_heads, input_dim, values_dim
    self._queries_projection = torch.nn.Parameter(torch.empty(num_heads, input_dim + emb_dim, dh))
    self._keys_projection = torch.nn.Parameter(torch.empty(num_heads, input_dim + emb_dim, dh))
    self._semantic_label_embedding_q_w = torch.nn.Embedding(num_labels, emb_dim)
    self._semantic_label_embedding_k_w = torch.nn.Embedding(num_labels, emb_dim)
    self._semantic_label_embedding_q_b = torch.nn.Embedding(num_labels, dh)
    self._semantic_label_embedding_k_b = torch.nn.Embedding(num_labels, dh)
    self._values_projection = torch.nn.Linear(input_dim, values_dim)
    self._output_projection = torch.nn.Linear(values_dim, out_dim)

  def load(self, sd: dict[str, np.ndarray]) -> "TorchDassa":
    self.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in sd.items()}, strict=True)
    return self

  def _proj(self, x, labels, w, emb_w, emb_b):
    # x (B,T,D), labels (B,H,T) -> (B,H,T,dh), one head at a time.
    heads = []
    for h in range(self.h):
      lab = labels[:, h]
      cat = torch.cat([x, emb_w(lab)], dim=-1)  # (B, T, D+E)
      heads.append(cat @ w[h] + emb_b(lab))
    return torch.stack(heads, dim=1)

  def forward(self, x, labels, scopes, mask=None, mode="released", fill=-1e32):
    """Returns (out (B,T,out), P (B,H,T,T))."""
    b, t, _ = x.shape
    q = self._proj(x, labels, self._queries_projection, self._semantic_label_embedding_q_w,
                   self._semantic_label_embedding_q_b)
    k = self._proj(x, labels, self._keys_projection, self._semantic_label_embedding_k_w,
                   self._semantic_label_embedding_k_b)
    dv = self.values_dim // self.h
    v = self._values_projection(x).view(b, t, self.h, dv).permute(0, 2, 1, 3)
    scale = float(self.input_dim // self.h) ** 0.5
    s = torch.matmul(q / scale, k.transpose(-1, -2))
    m = (scopes.unsqueeze(-1) == scopes.unsqueeze(-2)) & (scopes.unsqueeze(-2) > 0)
    if mode == "masked":
      real = (mask > 0)[:, None, None, :].expand_as(m)
      m = m & real
      probs = torch.zeros_like(s)
      for bi in range(b):
        for h in range(self.h):
          for i in range(t):
            allowed = m[bi, h, i]
            if allowed.any():
              probs[bi, h, i] = torch.softmax(s[bi, h, i].masked_fill(~allowed, fill), -1)
            elif real[bi, h, i].any():
              probs[bi, h, i] = real[bi, h, i].float() / real[bi, h, i].float().sum()
            else:
              probs[bi, h, i] = 1.0 / t
    else:
      probs = torch.softmax(s.masked_fill(~m, fill), dim=-1)
    o = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, t, self.values_dim)
    return self._output_projection(o), probs


def random_state_dict(rng: np.random.Generator, input_dim, num_heads, attention_dim, values_dim,
                      emb_dim, num_labels, out_dim=None) -> dict[str, np.ndarray]:
  out_dim = input_dim if out_dim is None else out_dim
  dh = attention_dim // num_heads
  n = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)
  return {
      "_queries_projection": n(num_heads, input_dim + emb_dim, dh),
      "_keys_projection": n(num_heads, input_dim + emb_dim, dh),
      "_semantic_label_embedding_q_w.weight": n(num_labels, emb_dim),
      "_semantic_label_embedding_k_w.weight": n(num_labels, emb_dim),
      "_semantic_label_embedding_q_b.weight": n(num_labels, dh),
      "_semantic_label_embedding_k_b.weight": n(num_labels, dh),
      "_values_projection.weight": n(values_dim, input_dim),
      "_values_projection.bias": n(values_dim),
      "_output_projection.weight": n(out_dim, values_dim),
      "_output_projection.bias": n(out_dim),
  }
