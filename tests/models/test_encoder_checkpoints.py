"""Real weights (all-MiniLM-L6-v2), bfloat16 compute, and bad checkpoints."""
import json
import os
import shutil
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from poi_jax.models import encoders
from tests.models.encoder_utils import make_hf_model

SENTENCES = [
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy.",
    "Where was the Charles Porter steam engine indicator shown?",
    "Green Scenes is a series of three-hour events on greener lifestyles.",
]


# The real-weight parity (minilm_dir: tests/conftest.py); under CI=true a skip fails the run.
pytestmark = pytest.mark.required


def test_minilm_real_weights_match_transformers(minilm_dir):
  enc, tok, report = encoders.load_pretrained(minilm_dir)
  assert tok is not None and tok.is_fast
  assert not report.newly_initialized, report.newly_initialized
  assert not report.unused, report.unused
  batch = tok(SENTENCES, padding=True, return_tensors="np")
  hf = transformers.AutoModel.from_pretrained(minilm_dir, attn_implementation="eager").eval()
  with torch.no_grad():
    t = hf(**{k: torch.tensor(v) for k, v in batch.items()}, output_hidden_states=True)
  f = enc(jnp.asarray(batch["input_ids"]), jnp.asarray(batch["attention_mask"]),
          jnp.asarray(batch["token_type_ids"]), output_hidden_states=True)
  assert len(f.hidden_states) == len(t.hidden_states) == 7
  for i, (a, b) in enumerate(zip(f.hidden_states, t.hidden_states)):
    np.testing.assert_allclose(np.asarray(a), b.numpy(), atol=1e-5, rtol=0, err_msg=f"layer {i}")
  np.testing.assert_allclose(np.asarray(f.pooler_output), t.pooler_output.numpy(), atol=1e-5)


def test_minilm_alias_resolves_to_the_shipped_package(minilm_dir):
  assert encoders.resolve_checkpoint("minilm") == minilm_dir


def test_bfloat16_compute_is_close_to_float32(minilm_dir):
  """bf16 has an 8-bit mantissa (relative step 2^-8 = 0.0039): after 6 layers of bf16 matmuls
  (float32 params, float32 softmax and LayerNorm statistics) the hidden states of a real model
  stay within 0.1 absolute of float32 on O(1) activations, and their cosine similarity > 0.999.
  A wrong cast (e.g. bf16 softmax or parameters) fails this."""
  enc32, tok, _ = encoders.load_pretrained(minilm_dir)
  enc16, _, _ = encoders.load_pretrained(minilm_dir, dtype="bfloat16")
  batch = tok(SENTENCES, padding=True, return_tensors="np")
  args = [jnp.asarray(batch[k]) for k in ("input_ids", "attention_mask", "token_type_ids")]
  a = np.asarray(enc32(*args).last_hidden_state)
  b16 = enc16(*args).last_hidden_state
  assert b16.dtype == jnp.bfloat16
  b = np.asarray(b16.astype(jnp.float32))
  mask = batch["attention_mask"].astype(bool)
  np.testing.assert_allclose(b[mask], a[mask], atol=0.1)
  cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
  assert cos[mask].min() > 0.999


def _tiny_checkpoint(path, model_type="bert"):
  make_hf_model(model_type, vocab_size=50, hidden_size=16, num_hidden_layers=1,
                num_attention_heads=2, intermediate_size=20).save_pretrained(path)
  return path


def test_missing_config_json_is_a_clear_error(tmp_path):
  ckpt = _tiny_checkpoint(tmp_path / "c")
  os.remove(ckpt / "config.json")
  with pytest.raises(encoders.CheckpointError, match="no config.json"):
    encoders.load_pretrained(str(ckpt))


def test_unsupported_model_type_is_a_clear_error(tmp_path):
  ckpt = _tiny_checkpoint(tmp_path / "c")
  cfg = json.loads((ckpt / "config.json").read_text())
  cfg["model_type"] = "gpt2"
  (ckpt / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(encoders.CheckpointError, match=r"config.json: unsupported model_type 'gpt2'"):
    encoders.load_pretrained(str(ckpt))


def test_wrong_tensor_shape_names_file_and_tensor(tmp_path):
  from safetensors.numpy import load_file, save_file
  ckpt = _tiny_checkpoint(tmp_path / "c")
  sd = load_file(ckpt / "model.safetensors")
  name = "encoder.layer.0.attention.self.query.weight"
  sd[name] = np.zeros((16, 15), np.float32)
  save_file(sd, ckpt / "model.safetensors")
  with pytest.raises(encoders.CheckpointError,
                     match=r"model.safetensors: tensor 'encoder.layer.0.attention.self.query."
                     r"weight' has shape \(16, 15\), the model expects \(16, 16\)"):
    encoders.load_pretrained(str(ckpt))


def test_truncated_safetensors_is_a_clear_error(tmp_path):
  ckpt = _tiny_checkpoint(tmp_path / "c")
  f = ckpt / "model.safetensors"
  data = f.read_bytes()
  f.write_bytes(data[: len(data) // 2])
  with pytest.raises(encoders.CheckpointError, match="model.safetensors: .*truncated or corrupt"):
    encoders.load_pretrained(str(ckpt))


def test_missing_weights_file_is_a_clear_error(tmp_path):
  ckpt = _tiny_checkpoint(tmp_path / "c")
  os.remove(ckpt / "model.safetensors")
  with pytest.raises(encoders.CheckpointError, match="no weights file"):
    encoders.load_pretrained(str(ckpt))


def test_pytorch_bin_checkpoint_loads(tmp_path):
  hf = make_hf_model("bert", vocab_size=50, hidden_size=16, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=20)
  (tmp_path / "c").mkdir()
  hf.config.save_pretrained(tmp_path / "c")
  torch.save(hf.state_dict(), tmp_path / "c" / "pytorch_model.bin")  # the pre-safetensors format
  enc, _, report = encoders.load_pretrained(str(tmp_path / "c"))
  assert report.source.endswith("pytorch_model.bin") and not report.newly_initialized
  ids = np.array([[5, 6, 7, 0]])
  mask = (ids != 0).astype(np.int64)
  with torch.no_grad():
    t = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
  f = enc(jnp.asarray(ids), jnp.asarray(mask)).last_hidden_state
  np.testing.assert_allclose(np.asarray(f), t.numpy(), atol=1e-5)


def test_task_checkpoint_reports_head_tensors_unused(tmp_path):
  """A BertForQuestionAnswering checkpoint: `bert.` prefix stripped, `qa_outputs` unused, the
  absent pooler reported as newly initialised."""
  cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=20)
  transformers.BertForQuestionAnswering(cfg).save_pretrained(tmp_path / "qa")
  _, _, report = encoders.load_pretrained(str(tmp_path / "qa"))
  assert report.unused == ["qa_outputs.bias", "qa_outputs.weight"]
  assert sorted(report.newly_initialized) == ["pooler.dense.bias", "pooler.dense.weight"]


def test_hub_name_offline_fails_with_one_clear_line(monkeypatch):
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  with pytest.raises(encoders.CheckpointError) as e:
    encoders.resolve_checkpoint("albert/albert-base-v2-does-not-exist-offline")
  msg = str(e.value)
  assert "\n" not in msg and "HuggingFace hub" in msg and "local checkpoint directory" in msg


def _encode(tok):
  """A pair batch through every path the featurizers use (truncation, stride, offsets)."""
  return tok(["Where was the Charles Porter steam engine indicator shown?", "naïve café 北京?"],
             [SENTENCES[0] * 4, "Green Scenes, don't."], truncation="only_second", max_length=32,
             stride=8, return_overflowing_tokens=True, return_offsets_mapping=True, padding=True)


def _tokenizer_dir(src, tmp_path, tokenizer_class):
  dst = tmp_path / "tok"
  shutil.copytree(src, dst)
  cfg = json.loads((dst / "tokenizer_config.json").read_text())
  if tokenizer_class is None:
    cfg.pop("tokenizer_class")
  else:
    cfg["tokenizer_class"] = tokenizer_class
  (dst / "tokenizer_config.json").write_text(json.dumps(cfg))
  return str(dst)


@pytest.mark.parametrize("tokenizer_class", ["as shipped", "BertTokenizerFast", None,
                                             "NoSuchTokenizer"])
def test_tokenizer_is_the_one_autotokenizer_loads(minilm_dir, tmp_path, tokenizer_class):
  """The named class loaded directly (shipped name, an older "...Fast" name) and the
  AutoTokenizer fallback (no name, an unknown one) give AutoTokenizer's tokenizer: same class,
  same special tokens, same encodings."""
  d = minilm_dir if tokenizer_class == "as shipped" else _tokenizer_dir(minilm_dir, tmp_path,
                                                                          tokenizer_class)
  ours = encoders.load.load_tokenizer(d)
  auto = transformers.AutoTokenizer.from_pretrained(d, use_fast=True)
  assert type(ours) is type(auto) and ours.is_fast
  assert ours.all_special_tokens == auto.all_special_tokens
  assert ours.model_max_length == auto.model_max_length
  assert ours.backend_tokenizer.to_str() == auto.backend_tokenizer.to_str()
  assert dict(_encode(ours)) == dict(_encode(auto))


def test_loading_the_tokenizer_does_not_import_torch(minilm_dir):
  """AutoTokenizer imports transformers' configuration module, and with it torch whenever torch
  is installed (1-2 s at each start of a run, evaluation or Reader); loading the class that
  tokenizer_config.json names does not."""
  code = ("import sys; from poi_jax.models.encoders import load; "
          f"assert load.load_tokenizer({minilm_dir!r}) is not None; "
          "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == "[]", r.stdout[:300]
