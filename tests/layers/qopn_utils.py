"""Helpers shared by the QOPN layer and model tests: random segment layouts, Flax <-> PyTorch
parameter/gradient mapping."""
import numpy as np
import torch
from flax import nnx


def random_layout(rng, *, batch=None, k_max=None, sep_between=None, max_seg=9):
  """Per example: number of real segments, question rows, separators between question and
  segment (1 = BERT, 2 = RoBERTa), segment token counts. Returns (layout list, K, L)."""
  batch = batch or int(rng.integers(1, 4))
  k_max = k_max or int(rng.integers(1, 7))
  layout = []
  for b in range(batch):
    k = int(rng.integers(1, k_max + 1)) if b else k_max  # row 0 fills K
    q_rows = int(rng.integers(2, 6))
    sep = sep_between or int(rng.integers(1, 3))
    seg_lens = [int(rng.integers(1, max_seg + 1)) for _ in range(k)]
    layout.append(dict(k=k, q_rows=q_rows, sep=sep, seg_lens=seg_lens))
  length = max(d["q_rows"] + d["sep"] + n + 1 for d in layout for n in d["seg_lens"])
  length += int(rng.integers(0, 3))  # extra padding
  return layout, k_max, length


def masks(layout, k_max, length):
  """attention_mask, span_mask (B, K, L), segment_mask (B, K), question_rows (B,) as numpy."""
  b = len(layout)
  att = np.zeros((b, k_max, length), np.float32)
  span = np.zeros((b, k_max, length), np.float32)
  seg = np.zeros((b, k_max), np.float32)
  for i, d in enumerate(layout):
    cs = d["q_rows"] + d["sep"]
    for k, n in enumerate(d["seg_lens"]):
      att[i, k, :cs + n + 1] = 1
      span[i, k, cs:cs + n] = 1
      seg[i, k] = 1
  qr = np.array([d["q_rows"] for d in layout], np.int32)
  return att, span, seg, qr


def real_segments(h, layout):
  """Per example, the list of its real segments cut to their real rows (torch tensors)."""
  out = []
  for i, d in enumerate(layout):
    cs = d["q_rows"] + d["sep"]
    out.append([torch.tensor(np.asarray(h[i, k, :cs + n + 1]), requires_grad=False)
                for k, n in enumerate(d["seg_lens"])])
  return out


def position_spread(h, att, question_rows) -> float:
  """Std of the rows across the real context positions of a segment (everything after the
  question rows), averaged over features and segments: ``h (B, K, L, D)``, ``att (B, K, L)``."""
  out = []
  for i in range(h.shape[0]):
    for k in range(h.shape[1]):
      rows = np.flatnonzero(att[i, k] > 0)
      rows = rows[rows >= question_rows[i]]
      if len(rows) > 1:
        out.append(np.asarray(h[i, k, rows]).std(axis=0).mean())
  return float(np.mean(out))


def candidate_positions(layout, k_max, length):
  """Flat indices k*L + t of each example's candidates, in article order."""
  out = []
  for d in layout:
    cs = d["q_rows"] + d["sep"]
    out.append(np.array([k * length + cs + j for k, n in enumerate(d["seg_lens"])
                         for j in range(n)]))
  return out


def _g(tree, *path):
  for p in path:
    tree = tree[p]
  return np.asarray(tree)


def attention_as_torch(att: dict, prefix: str, block_style: str) -> dict:
  """Flax `QopnAttention` arrays (pure dict) -> torch `Attention` parameter names (with an
  ``output`` projection: ``torch.nn.MultiheadAttention``'s; without: ``wq``, ``wk``, ``wv``)."""
  if "output" in att:
    out = {
        f"{prefix}.mha.in_proj_weight": np.concatenate(
            [_g(att, n, "kernel").T for n in ("query", "key", "value")]),
        f"{prefix}.mha.in_proj_bias": np.concatenate([_g(att, n, "bias")
                                                      for n in ("query", "key", "value")]),
        f"{prefix}.mha.out_proj.weight": _g(att, "output", "kernel").T,
        f"{prefix}.mha.out_proj.bias": _g(att, "output", "bias"),
    }
  else:
    out = {}
    for mine, theirs in (("wq", "query"), ("wk", "key"), ("wv", "value")):
      out[f"{prefix}.{mine}.weight"] = _g(att, theirs, "kernel").T
      out[f"{prefix}.{mine}.bias"] = _g(att, theirs, "bias")
  if block_style in ("paper_residual", "transformer"):
    out[f"{prefix}.ln1.weight"] = _g(att, "LayerNorm", "scale")
    out[f"{prefix}.ln1.bias"] = _g(att, "LayerNorm", "bias")
  if block_style == "transformer":
    out[f"{prefix}.ln2.weight"] = _g(att, "ffn_LayerNorm", "scale")
    out[f"{prefix}.ln2.bias"] = _g(att, "ffn_LayerNorm", "bias")
    for mine, theirs in (("ff1", "ffn"), ("ff2", "ffn_output")):
      out[f"{prefix}.{mine}.weight"] = _g(att, theirs, "kernel").T
      out[f"{prefix}.{mine}.bias"] = _g(att, theirs, "bias")
  return out


def reasoning_as_torch(blocks: dict, qa: dict, block_style: str, num_blocks: int,
                       stacked: bool = False) -> dict:
  """Pure-dict Flax reasoning blocks + qa_outputs -> torch `Qopn` parameter names."""
  out = {}
  for i in range(num_blocks):
    blk = ({k: _slice(v, i) for k, v in blocks.items()} if stacked else blocks[i])
    p = f"blocks.{i}"
    out.update(attention_as_torch(blk["qoii"], f"{p}.qoii", block_style))
    out.update(attention_as_torch(blk["qgip"], f"{p}.qgip", block_style))
    for n in ("fusion", "gate"):
      out[f"{p}.{n}.weight"] = _g(blk, n, "kernel").T
      out[f"{p}.{n}.bias"] = _g(blk, n, "bias")
  out["qa.weight"] = _g(qa, "kernel").T
  return out


def _slice(tree, i):
  if isinstance(tree, dict):
    return {k: _slice(v, i) for k, v in tree.items()}
  return np.asarray(tree)[i]


def pure(state) -> dict:
  return nnx.to_pure_dict(state)


def assert_grads_close(flax_named: dict, torch_module, rtol=1e-4):
  """Each torch parameter's gradient vs the Flax gradient in torch layout, relative (1e-4) to the
  gradient's scale; the scale has a floor of 1e-3 x the largest gradient of the model, because
  some gradients are exactly zero in exact arithmetic (the last output bias before a softmax that
  is invariant to it) and both sides hold float32 round-off there."""
  named = dict(torch_module.named_parameters())
  assert set(flax_named) <= set(named), set(flax_named) - set(named)
  top = max(float(np.abs(named[n].grad.numpy()).max()) for n in flax_named)
  for name, g in flax_named.items():
    ref = named[name].grad
    assert ref is not None, name
    ref = ref.numpy()
    scale = max(float(np.abs(ref).max()), 1e-3 * top)
    np.testing.assert_allclose(g, ref, rtol=rtol, atol=rtol * scale, err_msg=name)
