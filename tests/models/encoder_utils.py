"""Helpers for encoder parity tests: random transformers models saved with save_pretrained."""
import numpy as np
import torch
import transformers

HF_CLASSES = {
    "bert": (transformers.BertConfig, transformers.BertModel),
    "albert": (transformers.AlbertConfig, transformers.AlbertModel),
    "roberta": (transformers.RobertaConfig, transformers.RobertaModel),
}


def make_hf_model(model_type: str, seed: int = 0, **config):
  """A transformers PyTorch model with random weights (biases and LayerNorms randomised too, so a
  wrong transpose or a swapped LayerNorm cannot hide behind zero/one initial values)."""
  cfg_cls, model_cls = HF_CLASSES[model_type]
  cfg = cfg_cls(attn_implementation="eager", **config)
  torch.manual_seed(seed)
  model = model_cls(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.copy_(torch.randn_like(p) * (0.2 if p.ndim > 1 else 0.5) + (1.0 if "LayerNorm.weight" in name
                                                                  or "layer_norm.weight" in name
                                                                  else 0.0))
  return model


def make_inputs(vocab_size: int, batch: int, length: int, lengths, seed: int = 0, pad_id: int = 0,
                type_vocab_size: int = 2):
  """Random ids with right padding to ``lengths``; returns int64 numpy arrays."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(pad_id + 3, vocab_size, size=(batch, length))
  mask = np.zeros((batch, length), np.int64)
  for b, n in enumerate(lengths):
    mask[b, :n] = 1
  ids = np.where(mask == 1, ids, pad_id)
  types = rng.integers(0, type_vocab_size, size=(batch, length)) * mask
  return ids.astype(np.int64), mask, types.astype(np.int64)


def torch_outputs(model, ids, mask, types):
  with torch.no_grad():
    out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                token_type_ids=torch.tensor(types), output_hidden_states=True)
  return [h.numpy() for h in out.hidden_states], out.pooler_output.numpy()
