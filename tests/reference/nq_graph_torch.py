"""PyTorch reference of the NQ graph encoder + heads, written from the equations of
``../shared/specs/nq_graph.md`` §1.1 and ``tests/fixtures/parity/SPEC.md`` §3 (test-only).

Deliberately computed differently from `poi_jax.layers.graph`: relative embeddings gathered
into ``(n, n, d)`` tables, the integration softmax as the original's raw ``exp`` normalised with
``index_add_`` over batch-flattened edges, the initializer as explicit per-target means, float64.
Weights come as a dict with the original state_dict names (numpy arrays).
"""
from __future__ import annotations

import math

import numpy as np
import torch

MASK = -10000.0


def _t(x, dtype=torch.float64):
  return torch.as_tensor(np.asarray(x), dtype=dtype)


def _linear(sd, name, x):
  """In ``x``'s dtype (float64 by default; float32 to show the original's overflow)."""
  return x @ _t(sd[f"{name}.weight"], x.dtype).T + _t(sd[f"{name}.bias"], x.dtype)


def _layer_norm(sd, name, x, eps=1e-12):
  mu = x.mean(-1, keepdim=True)
  var = ((x - mu) ** 2).mean(-1, keepdim=True)
  return _t(sd[f"{name}.weight"]) * (x - mu) / torch.sqrt(var + eps) + _t(sd[f"{name}.bias"])


def _gelu(x):
  return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def level_attention(sd, name, x, mask, heads, max_rel):
  """Eq.: S_ij = q_i.k_j/sqrt(d) + q_i.relK[r_ij] (unscaled), + (1-m_j)(-10000), softmax,
  out_i = sum_j P_ij (v_j + relV[r_ij]); x (B, n, H), mask (B, n)."""
  b, n, hdim = x.shape
  d = hdim // heads
  split = lambda y: y.view(b, n, heads, d).transpose(1, 2)  # (B, h, n, d)
  q, k, v = (split(_linear(sd, f"{name}.{p}", x)) for p in ("query", "key", "value"))
  i = torch.arange(n)
  r = torch.clamp(i[None, :] - i[:, None] + max_rel, 0, 2 * max_rel)
  rel_k = _t(sd[f"{name}.relative_key_embeddings.weight"])[r]  # (n, n, d)
  rel_v = _t(sd[f"{name}.relative_value_embeddings.weight"])[r]
  s = q @ k.transpose(-1, -2) / math.sqrt(d) + torch.einsum("bhid,ijd->bhij", q, rel_k)
  s = s + (1.0 - _t(mask))[:, None, None, :] * MASK
  p = torch.softmax(s, dim=-1)
  out = p @ v + torch.einsum("bhij,ijd->bhid", p, rel_v)
  return out.transpose(1, 2).reshape(b, n, hdim)


def integration(sd, name, s_flat, src, tgt, pos, heads, stable=False):
  """Per edge e=(src->tgt,pos): k_e = k_src + relK[pos], v_e = v_src + relV[pos],
  w_e = exp(q_tgt.k_e/sqrt(d)) (raw exp, as the original; ``stable`` subtracts each target's
  max), a_e = w_e / sum over the target's edges, agg_t = sum a_e v_e (0 without edges)."""
  m, hdim = s_flat.shape
  d = hdim // heads
  q, k, v = (_linear(sd, f"{name}.{p}", s_flat).view(m, heads, d)
             for p in ("query", "key", "value"))
  src, tgt, pos = (torch.as_tensor(np.asarray(a), dtype=torch.long) for a in (src, tgt, pos))
  k_e = k[src] + _t(sd[f"{name}.relative_key_embeddings.weight"], k.dtype)[pos][:, None, :]
  v_e = v[src] + _t(sd[f"{name}.relative_value_embeddings.weight"], k.dtype)[pos][:, None, :]
  logits = (q[tgt] * k_e).sum(-1) / math.sqrt(d)  # (E, h)
  if stable:
    top = torch.full((m, heads), -math.inf, dtype=logits.dtype).scatter_reduce(
        0, tgt[:, None].expand(-1, heads), logits, reduce="amax")
    logits = logits - top[tgt]
  w = torch.exp(logits)
  denom = torch.zeros(m, heads, dtype=w.dtype).index_add_(0, tgt, w)
  a = w / denom[tgt]
  return torch.zeros(m, heads, d, dtype=w.dtype).index_add_(0, tgt, a[..., None] * v_e).view(
      m, hdim)


def initializer(sd, x, st_mask, src, tgt, etype, layout):
  """G = [x; 0], + posemb for existing non-token nodes, then per type 1, 6, 11:
  G[t] += mean of G[s] over that type's edges s->t (targets with such an edge only)."""
  t_cap, s_cap, p_cap = layout
  b, _, hdim = x.shape
  n = t_cap + s_cap + p_cap + 1
  g = torch.zeros(b, n, hdim, dtype=torch.float64)
  g[:, :t_cap] = _t(x)
  g[:, t_cap:] += _t(sd["encoder.initializer.position_embeddings.weight"])[None] * _t(
      st_mask)[:, t_cap:, None]
  g = g.view(b * n, hdim)
  etype = np.asarray(etype)
  for ty in (1, 6, 11):
    sel = etype == ty
    s, t = np.asarray(src)[sel], np.asarray(tgt)[sel]
    new = g.clone()
    for target in np.unique(t):
      new[target] = g[target] + g[torch.as_tensor(s[t == target])].mean(0)
    g = new
  return g.view(b, n, hdim)


def forward(sd, x, st_mask, src, tgt, etype, pos, *, layout, heads, num_layers, rel_ranges,
            stable=False):
  """Batch-flattened edges (node + N*b). Returns a dict of every intermediate (float64)."""
  t_cap, s_cap, p_cap = layout
  n = t_cap + s_cap + p_cap + 1
  b = x.shape[0]
  out = {}
  h = initializer(sd, x, st_mask, src, tgt, etype, layout)
  out["initializer"] = h
  starts = (0, t_cap, t_cap + s_cap)
  sizes = layout
  for l in range(num_layers):
    pre = f"encoder.layer.{l}"
    parts = []
    for name, st, size, r in zip(("token", "sentence", "paragraph"), starts, sizes, rel_ranges):
      o = level_attention(sd, f"{pre}.attention.{name}_attention", h[:, st:st + size],
                          np.asarray(st_mask)[:, st:st + size], heads, r)
      out[f"layer.{l}.{name}_attention"] = o
      parts.append(o)
    s = torch.cat(parts + [h[:, n - 1:n]], dim=1)
    agg = integration(sd, f"{pre}.attention.integration", s.reshape(b * n, -1), src, tgt, pos,
                      heads, stable=stable).view(b, n, -1)
    integ = torch.cat([s, agg], dim=-1)
    a = _layer_norm(sd, f"{pre}.attention.output.layer_norm",
                    _linear(sd, f"{pre}.attention.output.dense", integ) + h)
    inter = _gelu(_linear(sd, f"{pre}.intermediate.dense", a))
    h = _layer_norm(sd, f"{pre}.output.layer_norm", _linear(sd, f"{pre}.output.dense", inter) + a)
    out.update({f"layer.{l}.integration": integ, f"layer.{l}.attention_output": a,
                f"layer.{l}.intermediate": inter, f"layer.{l}.layer_output": h})
  out["graph_output"] = h
  m = _t(st_mask) > 0
  tok = _linear(sd, "tok_outputs", torch.tanh(_linear(sd, "tok_dense", h[:, :t_cap])))
  tok = tok.masked_fill(~m[:, :t_cap, None], MASK)
  p0 = t_cap + s_cap
  para = _linear(sd, "para_outputs", torch.tanh(_linear(sd, "para_dense", h[:, p0:p0 + p_cap])))
  para = para[..., 0].masked_fill(~m[:, p0:p0 + p_cap], MASK)
  at = _linear(sd, "answer_type_outputs", torch.tanh(_linear(sd, "doc_dense", h[:, n - 1])))
  out.update(tok_start_logits=tok[..., 0], tok_end_logits=tok[..., 1], para_logits=para,
             answer_type_logits=at)
  return out


def loss(logits: dict, labels: dict):
  """The original's loss: sum of four CrossEntropyLoss(ignore_index=-1) (torch: NaN when every
  target of a term is ignored)."""
  ce = torch.nn.CrossEntropyLoss(ignore_index=-1)
  lab = lambda k: torch.as_tensor(np.asarray(labels[k]), dtype=torch.long)
  return (ce(logits["tok_start_logits"], lab("start_positions"))
          + ce(logits["tok_end_logits"], lab("end_positions"))
          + ce(logits["para_logits"], lab("paragraph_label"))
          + ce(logits["answer_type_logits"], lab("answer_type")))


def random_state_dict(rng: np.random.Generator, *, hidden, intermediate, heads, num_layers,
                      rel_ranges, num_positions, sentences, paragraphs, scale=0.3):
  """Random weights under the original names (for the random-config tests)."""
  d = hidden // heads
  sd = {}
  w = lambda *shape: (rng.standard_normal(shape) * scale).astype(np.float32)
  lin = lambda name, o, i: sd.update({f"{name}.weight": w(o, i), f"{name}.bias": w(o)})
  ln = lambda name: sd.update({f"{name}.weight": (1 + w(hidden)).astype(np.float32),
                               f"{name}.bias": w(hidden)})
  sd["encoder.initializer.position_embeddings.weight"] = w(sentences + paragraphs + 1, hidden)
  for l in range(num_layers):
    pre = f"encoder.layer.{l}.attention"
    for name, r in zip(("token", "sentence", "paragraph"), rel_ranges):
      for p in ("query", "key", "value"):
        lin(f"{pre}.{name}_attention.{p}", hidden, hidden)
      sd[f"{pre}.{name}_attention.relative_key_embeddings.weight"] = w(2 * r + 1, d)
      sd[f"{pre}.{name}_attention.relative_value_embeddings.weight"] = w(2 * r + 1, d)
    for p in ("query", "key", "value"):
      lin(f"{pre}.integration.{p}", hidden, hidden)
    sd[f"{pre}.integration.relative_key_embeddings.weight"] = w(num_positions, d)
    sd[f"{pre}.integration.relative_value_embeddings.weight"] = w(num_positions, d)
    lin(f"{pre}.output.dense", hidden, 2 * hidden)
    ln(f"{pre}.output.layer_norm")
    lin(f"encoder.layer.{l}.intermediate.dense", intermediate, hidden)
    lin(f"encoder.layer.{l}.output.dense", hidden, intermediate)
    ln(f"encoder.layer.{l}.output.layer_norm")
  for name in ("tok_dense", "para_dense", "doc_dense"):
    lin(name, hidden, hidden)
  lin("tok_outputs", 2, hidden)
  lin("para_outputs", 1, hidden)
  lin("answer_type_outputs", 5, hidden)
  return sd
