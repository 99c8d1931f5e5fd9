r"""Convert encoder checkpoints between HuggingFace (PyTorch layout) and poi-jax.

  python -m poi_jax.convert --from=SRC --to=DIR [--verify]

SRC is a HuggingFace checkpoint directory, a hub name, or ``minilm`` (the offline
all-MiniLM-L6-v2 package). DIR receives a HuggingFace directory (config.json, model.safetensors,
tokenizer files) written from the Flax encoder, so the result loads with
``transformers.AutoModel.from_pretrained(DIR)`` and with ``poi_jax.models.encoders.
load_pretrained(DIR)``. Going through Flax checks every tensor (shape, use) on the way, and
``--verify`` additionally runs both the Flax encoder and, when torch is installed, the exported
PyTorch model on a probe batch and prints their largest difference.
Fine-tuned poi-jax runs export their encoder the same way (``poi_jax.train`` writes
``<workdir>/export/``).
"""
from __future__ import annotations

import sys

import numpy as np
from absl import app, flags, logging

from poi_jax.models import encoders

_FROM = flags.DEFINE_string("from", None, "HF checkpoint dir, hub name, or 'minilm'.")
_TO = flags.DEFINE_string("to", None, "Output directory (HuggingFace layout).")
_VERIFY = flags.DEFINE_bool("verify", False, "Compare Flax and exported PyTorch outputs.")


def convert(src: str, dst: str, verify: bool = False) -> float | None:
  enc, tok, report = encoders.load_pretrained(src)
  if report.newly_initialized:
    raise encoders.CheckpointError(
        f"{report.source}: missing tensors {', '.join(report.newly_initialized)}; refusing to "
        "export an encoder with random parts")
  encoders.export_pretrained(enc, dst, tokenizer=tok)
  print(f"wrote {dst} ({encoders.count_params(enc):,} parameters, {len(report.loaded)} tensors; "
        f"unused in source: {len(report.unused)})")
  if not verify:
    return None
  try:
    import torch
    import transformers
  except ImportError:
    print("--verify: torch is not installed; skipped the PyTorch comparison")
    return None
  import jax.numpy as jnp
  rng = np.random.default_rng(0)
  ids = rng.integers(5, enc.config.vocab_size, size=(2, 16))
  mask = np.ones_like(ids)
  mask[1, 10:] = 0
  flax_out = np.asarray(enc(jnp.asarray(ids), jnp.asarray(mask)).last_hidden_state)
  pt = transformers.AutoModel.from_pretrained(dst, attn_implementation="eager").eval()
  with torch.no_grad():
    pt_out = pt(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
  diff = float(np.abs(flax_out - pt_out.numpy())[mask.astype(bool)].max())
  print(f"max |flax - pytorch| on a probe batch: {diff:.2e}")
  return diff


def main(argv):
  del argv
  if not flags.FLAGS["verbosity"].present:
    # absl's INFO default shows JAX's backend probing ("Unable to initialize backend 'tpu'") on
    # every machine without a TPU; --verbosity=0 brings it back.
    logging.set_verbosity(logging.WARNING)
  if not _FROM.value or not _TO.value:
    print("usage: python -m poi_jax.convert --from=SRC --to=DIR [--verify]", file=sys.stderr)
    return 2
  try:
    convert(_FROM.value, _TO.value, _VERIFY.value)
  except encoders.CheckpointError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  app.run(main)
