"""QOPN end to end (encoder on B*K segments + blocks + global head + loss) vs the PyTorch
reference on transformers' BERT / RoBERTa, run segment by segment on the real tokens only."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from poi_jax.models import encoders
from poi_jax.models import qopn
from tests.layers import qopn_utils as U
from tests.models.encoder_utils import make_hf_model
from tests.reference import qopn_torch

ENC = dict(vocab_size=97, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
           intermediate_size=32, max_position_embeddings=64, hidden_dropout_prob=0.0,
           attention_probs_dropout_prob=0.0)


def _checkpoint(tmp_path, model_type, seed):
  extra = dict(type_vocab_size=1, pad_token_id=1) if model_type == "roberta" else {}
  hf = make_hf_model(model_type, seed, **ENC, **extra)
  hf.save_pretrained(tmp_path / model_type)
  return hf, str(tmp_path / model_type), extra.get("pad_token_id", 0)


def _batch(layout, k, length, pad_id, model_type, rng):
  """Token fields in the encoder's template; ids of specials are arbitrary non-pad ids."""
  b = len(layout)
  att, span, seg, qr = U.masks(layout, k, length)
  ids = np.full((b, k, length), pad_id, np.int32)
  types = np.zeros((b, k, length), np.int32)
  for i, d in enumerate(layout):
    q = rng.integers(5, ENC["vocab_size"], d["q_rows"] - 1)
    cs = d["q_rows"] + d["sep"]
    for kk, n in enumerate(d["seg_lens"]):
      ids[i, kk, 0] = 2  # [CLS] / <s>
      ids[i, kk, 1:d["q_rows"]] = q
      ids[i, kk, d["q_rows"]:cs] = 3  # [SEP] / </s></s>
      ids[i, kk, cs:cs + n] = rng.integers(5, ENC["vocab_size"], n)
      ids[i, kk, cs + n] = 3
      if model_type == "bert":
        types[i, kk, d["q_rows"] + 1:cs + n + 1] = 1
  return dict(input_ids=ids, attention_mask=att.astype(np.int32), token_type_ids=types,
              question_rows=qr, segment_mask=seg, span_mask=span)


def _models(tmp_path, model_type, style, num_blocks, seed, **flags):
  hf, ckpt, pad = _checkpoint(tmp_path, model_type, seed)
  cfg = encoders.read_config(ckpt)
  model = qopn.QopnForQuestionAnswering(cfg, num_blocks=num_blocks, block_style=style,
                                        question_window=8, scan_blocks=True, rngs=nnx.Rngs(seed),
                                        **flags)
  encoders.load_encoder_weights(model.encoder, ckpt)
  # Larger random block weights than the 0.02 init, so that every path matters numerically.
  params = [p for _, p in nnx.iter_graph(model.reasoning) if isinstance(p, nnx.Param)]
  for i, p in enumerate(params):
    p.set_value(jax.random.normal(jax.random.key(100 * seed + i), p.get_value().shape) * 0.3)
  ref = qopn_torch.Qopn(ENC["hidden_size"], ENC["num_attention_heads"], num_blocks, encoder=hf,
                        block_style=style, **flags)
  ref.load_named(U.reasoning_as_torch(U.pure(nnx.state(model.reasoning.blocks)),
                                      U.pure(nnx.state(model.qa_outputs)), style, num_blocks,
                                      stacked=True))
  return model, ref, pad


def _ref_log_probs(ref, batch, layout):
  out = []
  for i, d in enumerate(layout):
    cs = d["q_rows"] + d["sep"]
    segs = [ref.encode(torch.tensor(batch["input_ids"][i, kk, :cs + n + 1], dtype=torch.long),
                       torch.tensor(batch["token_type_ids"][i, kk, :cs + n + 1], dtype=torch.long))
            for kk, n in enumerate(d["seg_lens"])]
    out.append(ref.log_probs(segs, d["q_rows"], cs))
  return out


@nnx.jit
def _forward(model, batch):
  return model(batch, deterministic=True)


CASES = [("bert", "paper", 2, 1, 0, dict(output_projection=True)),
         ("roberta", "transformer", 1, 2, 1, dict(output_projection=True)),
         ("bert", "paper", 3, 1, 2, dict(use_qoii=False)),
         ("roberta", "paper_residual", 2, 2, 3, {})]


@pytest.mark.parametrize("model_type,style,num_blocks,sep,seed,flags", CASES)
def test_model_matches_pytorch(tmp_path, model_type, style, num_blocks, sep, seed, flags):
  rng = np.random.default_rng(seed)
  layout, k, length = U.random_layout(rng, sep_between=sep)
  model, ref, pad = _models(tmp_path, model_type, style, num_blocks, seed, **flags)
  batch = _batch(layout, k, length, pad, model_type, rng)
  cands = U.candidate_positions(layout, k, length)
  ys = [int(rng.integers(0, len(c))) for c in cands]
  ye = [int(rng.integers(y, len(c))) for y, c in zip(ys, cands)]
  batch["start_positions"] = np.array([c[y] for c, y in zip(cands, ys)], np.int32)
  batch["end_positions"] = np.array([c[y] for c, y in zip(cands, ye)], np.int32)
  batch["example_mask"] = np.ones(len(layout), np.float32)
  out = _forward(model, {k_: jnp.asarray(v) for k_, v in batch.items()})
  with torch.no_grad():
    ref_lp = _ref_log_probs(ref, batch, layout)
  for i, (ls, le) in enumerate(ref_lp):
    for name, want in (("start_logits", ls), ("end_logits", le)):
      got = np.asarray(jax.nn.log_softmax(out[name][i]))[cands[i]]
      np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=0, err_msg=f"{name} {i}")
  loss = float(model.loss({k_: jnp.asarray(v) for k_, v in batch.items()}, out))
  ref_loss = qopn_torch.loss([a for a, _ in ref_lp], [b for _, b in ref_lp], ys, ye)
  np.testing.assert_allclose(loss, float(ref_loss), atol=1e-5, rtol=0)


def test_model_block_gradients_match_pytorch(tmp_path):
  rng = np.random.default_rng(4)
  layout, k, length = U.random_layout(rng, batch=2, k_max=3, sep_between=1)
  model, ref, pad = _models(tmp_path, "bert", "paper_residual", 2, 4)  # the default blocks
  batch = _batch(layout, k, length, pad, "bert", rng)
  cands = U.candidate_positions(layout, k, length)
  ys, ye = [0, len(cands[1]) - 1], [len(cands[0]) - 1, len(cands[1]) - 1]
  batch["start_positions"] = np.array([c[y] for c, y in zip(cands, ys)], np.int32)
  batch["end_positions"] = np.array([c[y] for c, y in zip(cands, ye)], np.int32)
  jb = {k_: jnp.asarray(v) for k_, v in batch.items()}
  grads = nnx.jit(nnx.grad(lambda m: m.loss(jb, m(jb, deterministic=True))))(model)
  lp = _ref_log_probs(ref, batch, layout)
  qopn_torch.loss([a for a, _ in lp], [b for _, b in lp], ys, ye).backward()
  g = U.pure(grads)
  named = U.reasoning_as_torch(g["reasoning"]["blocks"], g["qa_outputs"], "paper_residual", 2,
                               stacked=True)
  U.assert_grads_close(named, ref)
  # the encoder receives gradient through the blocks (word embeddings of the real tokens)
  emb = np.asarray(g["encoder"]["embeddings"]["word_embeddings"]["embedding"])
  ref_emb = ref.encoder.embeddings.word_embeddings.weight.grad.numpy()
  np.testing.assert_allclose(emb, ref_emb, rtol=1e-4, atol=1e-4 * np.abs(ref_emb).max())


def test_appending_a_padding_segment_changes_nothing_end_to_end(tmp_path):
  rng = np.random.default_rng(5)
  layout, k, length = U.random_layout(rng, batch=2, k_max=2, sep_between=1)
  model, _, pad = _models(tmp_path, "bert", "transformer", 2, 5)
  batch = _batch(layout, k, length, pad, "bert", rng)
  wider = {n: (np.concatenate([v, np.zeros_like(v[:, :1]) + (pad if n == "input_ids" else 0)],
                              axis=1) if np.ndim(v) >= 2 else v) for n, v in batch.items()}
  a = _forward(model, {n: jnp.asarray(v) for n, v in batch.items()})
  b = _forward(model, {n: jnp.asarray(v) for n, v in wider.items()})
  for name in ("start_logits", "end_logits"):
    np.testing.assert_allclose(np.asarray(jax.nn.log_softmax(b[name]))[:, :k * length],
                               np.asarray(jax.nn.log_softmax(a[name])), atol=1e-6, rtol=0)


def test_bad_batches_are_named_before_compute(tmp_path):
  rng = np.random.default_rng(6)
  layout, k, length = U.random_layout(rng, batch=2, k_max=2, sep_between=1)
  model, _, pad = _models(tmp_path, "bert", "paper", 1, 6)
  batch = _batch(layout, k, length, pad, "bert", rng)
  bad = dict(batch, question_rows=np.array([3, 9], np.int32))
  with pytest.raises(qopn.QopnBatchError, match=r"question_rows.*row\(s\) 1"):
    model(bad)
  sep_row = layout[0]["q_rows"]  # a separator: not an answer candidate
  bad = dict(batch, start_positions=np.array([sep_row, -1], np.int32),
             end_positions=np.array([-1, -1], np.int32))
  with pytest.raises(qopn.QopnBatchError, match=r"start_positions.*row\(s\) 0"):
    model(bad)
  bad = dict(batch, segment_mask=np.zeros_like(batch["segment_mask"]))
  with pytest.raises(qopn.QopnBatchError, match="no real segment"):
    model(bad)


def test_dropout_changes_training_outputs_only(tmp_path):
  rng = np.random.default_rng(7)
  layout, k, length = U.random_layout(rng, batch=2, k_max=2, sep_between=1)
  hf, ckpt, pad = _checkpoint(tmp_path, "bert", 7)
  cfg = encoders.read_config(ckpt)
  model = qopn.QopnForQuestionAnswering(cfg, num_blocks=1, dropout=0.5, question_window=8,
                                        rngs=nnx.Rngs(0))
  batch = {n: jnp.asarray(v) for n, v in _batch(layout, k, length, pad, "bert", rng).items()}
  e1, e2 = _forward(model, batch), _forward(model, batch)
  np.testing.assert_array_equal(np.asarray(e1["start_logits"]), np.asarray(e2["start_logits"]))
  t = nnx.jit(lambda m, b: m(b, deterministic=False))(model, batch)
  real = np.asarray(batch["span_mask"]).reshape(2, -1) > 0
  assert np.all(np.isfinite(np.asarray(t["start_logits"])[real]))
  assert not np.allclose(np.asarray(t["start_logits"])[real], np.asarray(e1["start_logits"])[real])
