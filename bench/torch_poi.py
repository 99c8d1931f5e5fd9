"""POI-Net for extractive QA in PyTorch eager, for `bench/train_step.py` only (never imported by
poi_jax): transformers' BERT or ALBERT (SDPA attention) with a POS table added to the input
embeddings, the paper's iterative co-attention (forgetting integration) batched over rows with
domain masks, and a Linear(D, 2) span head with transformers' QA loss. ``head="none"``: the span
head directly on the encoder (no POS table, no co-attention)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _masked_max(x, mask, dim):
  return x.masked_fill(mask == 0, float("-inf")).amax(dim=dim)


def _minmax(s, mask):
  lo = s.masked_fill(mask == 0, float("inf")).amin(-1, keepdim=True)
  hi = s.masked_fill(mask == 0, float("-inf")).amax(-1, keepdim=True)
  d = hi - lo
  out = torch.where(d > 0, (s - lo) / torch.where(d > 0, d, torch.ones_like(d)),
                    torch.ones_like(s))
  return out * mask


def coattention(e, con_start, con_end, turns=3):
  """e (B, L, D); con_start/con_end (B,) -> R (B, L, D) (forgetting integration)."""
  b, l, _ = e.shape
  pos = torch.arange(l, device=e.device)[None]
  m_q = (pos < con_start[:, None]).float()
  m_p = ((pos >= con_start[:, None]) & (pos <= con_end[:, None])).float()
  s_hat = m_q + m_p
  max_p = max_q = torch.ones(b, device=e.device)
  forget = None
  for t in range(turns):
    w = e * s_hat[..., None]
    ce_q = _masked_max(w, m_q[..., None], 1)
    ce_p = _masked_max(w, m_p[..., None], 1)
    s = F.cosine_similarity(e, ce_q[:, None], dim=-1) * m_p + \
        F.cosine_similarity(e, ce_p[:, None], dim=-1) * m_q
    s_hat = _minmax(s, m_p) + _minmax(s, m_q)
    beta = m_p * ((max_q + 1) / 2)[:, None] + m_q * ((max_p + 1) / 2)[:, None]
    forget = s_hat if t == 0 else (forget + beta * s_hat) / (1 + beta)
    max_p, max_q = _masked_max(s, m_p, -1), _masked_max(s, m_q, -1)
  r = forget * (m_q + m_p)
  return e * r[..., None]


class PoiNetQA(nn.Module):
  """``shape``: HF config fields with ``model_type`` (bert | albert)."""

  def __init__(self, shape: dict, head: str = "poi"):
    super().__init__()
    import transformers
    kw = {k: v for k, v in shape.items() if k != "model_type"}
    if shape["model_type"] == "albert":
      self.encoder = transformers.AlbertModel(transformers.AlbertConfig(
          **kw, attn_implementation="sdpa"), add_pooling_layer=False)
    else:
      self.encoder = transformers.BertModel(transformers.BertConfig(
          **kw, attn_implementation="sdpa"), add_pooling_layer=False)
    width = shape.get("embedding_size", shape["hidden_size"])
    self.head = head
    self.pos = nn.Embedding(40, width) if head == "poi" else None
    self.qa_outputs = nn.Linear(shape["hidden_size"], 2)

  def forward(self, batch):
    emb = self.encoder.embeddings.word_embeddings(batch["input_ids"])
    if self.pos is not None:
      emb = emb + self.pos(batch["pos_tags"])
    h = self.encoder(inputs_embeds=emb, attention_mask=batch["attention_mask"],
                     token_type_ids=batch["token_type_ids"]).last_hidden_state
    if self.head == "poi":
      h = coattention(h, batch["con_start"], batch["con_end"])
    start, end = self.qa_outputs(h).unbind(-1)
    return (F.cross_entropy(start, batch["start_positions"]) +
            F.cross_entropy(end, batch["end_positions"])) / 2


def training_setup(shape: dict, head: str, batch_np: dict, device: str = "cpu",
                   optimizer: str = "default"):
  """``(model, optimizer, batch)`` as every bench's PyTorch step builds them: `PoiNetQA` from
  seed 0 on ``device``, AdamW (lr 1e-5, weight decay 0.01), the numpy batch as long tensors.
  ``optimizer``: ``default`` (PyTorch's own choice, the for-each kernels), ``fused`` (one fused
  kernel for the whole update: what a PyTorch user tuning for speed picks; CPU and CUDA)."""
  torch.manual_seed(0)
  model = PoiNetQA(shape, head=head).to(device)
  kw = dict(fused=True) if optimizer == "fused" else {}
  opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, **kw)
  batch = {k: torch.tensor(v, dtype=torch.long, device=device) for k, v in batch_np.items()}
  return model, opt, batch
