"""PyTorch reference of POI-Net's iterative co-attention, written from the paper's §2.2-§2.3 and
the decisions listed in `poi_jax/layers/poi_coattention.py` (never imported by poi_jax).

Deliberately structured differently from the JAX code: one row at a time, each domain sliced out
as its own tensor, the turns an explicit Python loop, float64 optional.
"""
import torch
import torch.nn.functional as F


def _minmax(s):
  """Min-max scaling of a 1-D tensor of one domain's scores; all equal -> all 1."""
  d = s.max() - s.min()
  if d <= 0:
    return torch.ones_like(s)
  return (s - s.min()) / d


def coattention_row(e, con_start, con_end, turns, strategy):
  """e: (L, D) one row; returns r (L,) integrated scores."""
  L = e.shape[0]
  q_idx = torch.arange(0, con_start)
  p_idx = torch.arange(con_start, con_end + 1)
  e_q, e_p = e[q_idx], e[p_idx]
  s_hat_q, s_hat_p = torch.ones(len(q_idx), dtype=e.dtype), torch.ones(len(p_idx), dtype=e.dtype)
  prev_max_q = prev_max_p = torch.tensor(1.0, dtype=e.dtype)  # s^0 = 1
  hats_q, hats_p, betas_q, betas_p = [], [], [], []
  for _ in range(turns):
    ce_q = (s_hat_q[:, None] * e_q).max(dim=0).values  # CE from E^{t-1}
    ce_p = (s_hat_p[:, None] * e_p).max(dim=0).values
    s_p = F.cosine_similarity(e_p, ce_q[None], dim=-1)  # scores on the original E
    s_q = F.cosine_similarity(e_q, ce_p[None], dim=-1)
    beta_p = (prev_max_q + 1) / 2  # paper: beta_P^t from max s_Q^{t-1}
    beta_q = (prev_max_p + 1) / 2
    s_hat_p, s_hat_q = _minmax(s_p), _minmax(s_q)
    hats_p.append(s_hat_p)
    hats_q.append(s_hat_q)
    betas_p.append(beta_p)
    betas_q.append(beta_q)
    prev_max_p, prev_max_q = s_p.max(), s_q.max()

  def integrate(hats, betas):
    if strategy == "average":
      return sum(hats) / len(hats)
    if strategy == "weighted":
      return sum(b * h for b, h in zip(betas, hats)) / sum(betas)
    if strategy == "intuition":
      alphas, acc = [], 1.0
      for b in betas:
        acc = acc * b
        alphas.append(acc)
      return sum(a * h for a, h in zip(alphas, hats)) / sum(alphas)
    if strategy == "forgetting":
      s = hats[0]
      for b, h in zip(betas[1:], hats[1:]):
        s = (s + b * h) / (1 + b)
      return s
    raise ValueError(strategy)

  r = torch.zeros(L, dtype=e.dtype)
  r = r.index_put((q_idx,), integrate(hats_q, betas_q))
  r = r.index_put((p_idx,), integrate(hats_p, betas_p))
  return r


def paper_coattention(h, con_start, con_end, turns, strategy):
  """h (B, L, D) torch; con_start/con_end sequences of ints. Returns (r (B, L), h * r)."""
  r = torch.stack([coattention_row(h[b], int(con_start[b]), int(con_end[b]), turns, strategy)
                   for b in range(h.shape[0])])
  return r, h * r[..., None]
