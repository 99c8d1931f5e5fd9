"""POI-Net models: whole-model parity with a PyTorch assembly, parameter count, jit, bad input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from poi_jax.models import checks, encoders, poi_net
from tests.reference import poi_torch

ALBERT = dict(model_type="albert", vocab_size=60, embedding_size=13, hidden_size=24,
              num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
              num_hidden_groups=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _qa_batch(rng, b=3, l=14):
  lengths = [14, 11, 8]
  ids = rng.integers(3, 60, size=(b, l))
  mask = np.zeros((b, l), np.int64)
  for i, n in enumerate(lengths):
    mask[i, :n] = 1
  ids = ids * mask
  tags = rng.integers(1, 39, size=(b, l)) * mask
  return dict(input_ids=ids, attention_mask=mask, token_type_ids=np.zeros_like(ids),
              pos_tags=tags, con_start=np.array([4, 2, 1]), con_end=np.array([13, 10, 7]),
              start_positions=np.array([5, 3, 0]), end_positions=np.array([7, 3, 0]))


def _torch_encoder(model, tmp_path):
  """transformers' AlbertModel with the Flax encoder's weights (through the exporter)."""
  encoders.export_pretrained(model.encoder, str(tmp_path))
  return transformers.AlbertModel.from_pretrained(str(tmp_path),
                                                  attn_implementation="eager").eval()


def _torch_hidden(pt, model, batch):
  """PyTorch assembly of POI-Net's encoder: inputs_embeds = word + POS embeddings (AlbertModel
  adds position and type embeddings to inputs_embeds before its LayerNorm)."""
  pos_table = torch.tensor(np.asarray(model.pos_embeddings.embedding.get_value()))
  ids = torch.tensor(batch["input_ids"])
  embeds = pt.embeddings.word_embeddings(ids) + pos_table[torch.tensor(batch["pos_tags"])]
  with torch.no_grad():
    return pt(inputs_embeds=embeds, attention_mask=torch.tensor(batch["attention_mask"]),
              token_type_ids=torch.tensor(batch["token_type_ids"])).last_hidden_state


def _torch_released(h, cs, ce):
  """SPEC §1 written with torch ops, row-independent (test-only transcription of the spec)."""
  L = h.shape[1]
  pos = torch.arange(L)[None]
  m_a = (pos < torch.tensor(cs)[:, None]).float()
  m_b = ((pos >= torch.tensor(cs)[:, None]) & (pos <= torch.tensor(ce)[:, None])).float()
  cos = lambda x, e: torch.nn.functional.cosine_similarity(x, e[:, None, :], dim=-1)

  def norm(x, m, guard):
    mx = x.max(-1, keepdim=True).values
    mn = torch.where(x == 0, torch.ones_like(x), x).min(-1, keepdim=True).values
    d = mx - mn
    if guard:
      d = torch.where(d == 0, torch.ones_like(d), d)
    return (x - mn) * m / d
  h_a, h_b = h * m_a[..., None], h * m_b[..., None]
  a = (cos(h, h_b.max(1).values) + 1) / 2 * m_a
  b = (cos(h, h_a.max(1).values) + 1) / 2 * m_b
  a_hat, b_hat = norm(a, m_a, True), norm(b, m_b, True)
  h1_a, h1_b = h_a * a_hat[..., None], h_b * b_hat[..., None]
  al = cos(h1_a, h1_b.max(1).values) * m_a
  be = cos(h1_b, h1_a.max(1).values) * m_b
  f_a = a_hat + norm(al, m_a, True) * b.max(-1, keepdim=True).values
  f_b = b_hat + norm(be, m_b, True) * a.max(-1, keepdim=True).values
  s = f_a / f_a.max(-1, keepdim=True).values + f_b / f_b.max(-1, keepdim=True).values
  return h * s[..., None]


@pytest.mark.parametrize("variant", ["paper", "released", "none"])
def test_qa_model_matches_pytorch_assembly(tmp_path, variant):
  model = poi_net.PoiNetForQuestionAnswering(encoders.EncoderConfig(**ALBERT),
                                             variant=variant, rngs=nnx.Rngs(0))
  batch = _qa_batch(np.random.default_rng(0))
  out = model({k: jnp.asarray(v) for k, v in batch.items()})
  pt = _torch_encoder(model, tmp_path)
  h = _torch_hidden(pt, model, batch).double()
  if variant == "paper":
    r = poi_torch.paper_coattention(h, batch["con_start"], batch["con_end"], 3, "forgetting")[1]
  elif variant == "released":
    r = _torch_released(h, batch["con_start"], batch["con_end"])
  else:
    r = h
  w = torch.tensor(np.asarray(model.qa_outputs.kernel.get_value()), dtype=torch.float64)
  bias = torch.tensor(np.asarray(model.qa_outputs.bias.get_value()), dtype=torch.float64)
  logits = (r @ w + bias).numpy()
  np.testing.assert_allclose(np.asarray(out["start_logits"]), logits[..., 0], atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(out["end_logits"]), logits[..., 1], atol=1e-5, rtol=0)
  # transformers' QA loss on the same logits.
  ce = torch.nn.CrossEntropyLoss()
  t_loss = (ce(torch.tensor(logits[..., 0]), torch.tensor(batch["start_positions"]))
            + ce(torch.tensor(logits[..., 1]), torch.tensor(batch["end_positions"]))) / 2
  jb = {k: jnp.asarray(v) for k, v in batch.items()}
  np.testing.assert_allclose(float(model.loss(jb, out)), float(t_loss), atol=1e-5)


def test_multiple_choice_model_matches_pytorch_assembly(tmp_path):
  model = poi_net.PoiNetForMultipleChoice(encoders.EncoderConfig(**ALBERT), rngs=nnx.Rngs(1))
  rng = np.random.default_rng(1)
  qa = _qa_batch(rng, b=3)
  b, c = 1, 3  # three options of one question
  batch = {k: qa[k].reshape((b, c) + qa[k].shape[1:]) for k in
           ("input_ids", "attention_mask", "token_type_ids", "pos_tags", "con_start", "con_end")}
  batch["labels"] = np.array([2])
  out = model({k: jnp.asarray(v) for k, v in batch.items()})
  pt = _torch_encoder(model, tmp_path)
  h = _torch_hidden(pt, model, {k: qa[k] for k in ("input_ids", "attention_mask",
                                                   "token_type_ids", "pos_tags")}).double()
  _, r = poi_torch.paper_coattention(h, qa["con_start"], qa["con_end"], 3, "forgetting")
  pooled = torch.stack([r[i, :qa["con_end"][i] + 1].max(0).values for i in range(c)])
  w = torch.tensor(np.asarray(model.classifier.kernel.get_value()), dtype=torch.float64)
  bias = torch.tensor(np.asarray(model.classifier.bias.get_value()), dtype=torch.float64)
  logits = (pooled @ w + bias)[:, 0].reshape(b, c)
  np.testing.assert_allclose(np.asarray(out["logits"]), logits.numpy(), atol=1e-5, rtol=0)
  t_loss = torch.nn.functional.cross_entropy(logits, torch.tensor(batch["labels"]))
  jb = {k: jnp.asarray(v) for k, v in batch.items()}
  np.testing.assert_allclose(float(model.loss(jb, out)), float(t_loss), atol=1e-5)


@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_heads_run_on_bert_and_roberta(model_type):
  cfg = encoders.EncoderConfig(model_type=model_type, vocab_size=60, hidden_size=16,
                               num_hidden_layers=1, num_attention_heads=2, intermediate_size=20,
                               max_position_embeddings=40, pad_token_id=0)
  batch = {k: jnp.asarray(v) for k, v in _qa_batch(np.random.default_rng(2)).items()}
  out = poi_net.PoiNetForQuestionAnswering(cfg, rngs=nnx.Rngs(0))(batch)
  assert out["start_logits"].shape == (3, 14) and np.isfinite(out["start_logits"]).all()


def test_pos_table_is_the_only_parameter_added_albert_base():
  """Paper Table 7: ALBERT-base 11.14M -> POI-Net 11.15M. Shapes only (nnx.eval_shape)."""
  cfg = encoders.EncoderConfig(model_type="albert", vocab_size=30000, embedding_size=128,
                               hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                               intermediate_size=3072)
  enc = nnx.eval_shape(lambda: encoders.build_encoder(cfg, rngs=nnx.Rngs(0)))
  for variant in ("paper", "released"):
    poi = nnx.eval_shape(lambda: poi_net.PoiNetForQuestionAnswering(
        cfg, variant=variant, rngs=nnx.Rngs(0)))
    base = nnx.eval_shape(lambda: poi_net.PoiNetForQuestionAnswering(
        cfg, variant="none", pos_embedding=False, rngs=nnx.Rngs(0)))
    delta = encoders.count_params(poi) - encoders.count_params(base)
    assert delta == 40 * 128  # the POS table; the co-attention has no parameters
    head = 768 * 2 + 2
    assert encoders.count_params(base) == encoders.count_params(enc) + head
  assert round((encoders.count_params(enc) + 40 * 128) / 1e6, 2) - round(
      encoders.count_params(enc) / 1e6, 2) == pytest.approx(0.01, abs=1e-9)


def test_jit_compiles_once_per_shape_and_differentiates():
  model = poi_net.PoiNetForQuestionAnswering(encoders.EncoderConfig(**ALBERT), rngs=nnx.Rngs(0))
  traces = []

  @nnx.jit
  def loss_and_grad(m, batch):
    traces.append(1)
    def f(m):
      return m.loss(batch, m(batch))
    return nnx.value_and_grad(f)(m)

  rng = np.random.default_rng(0)
  for _ in range(3):
    batch = {k: jnp.asarray(v) for k, v in _qa_batch(rng).items()}
    loss, grads = loss_and_grad(model, batch)
    assert np.isfinite(float(loss))
  assert len(traces) == 1
  pos_grad = grads["pos_embeddings"]["embedding"].get_value()
  assert np.abs(np.asarray(pos_grad)).sum() > 0  # the POS table is trained


@pytest.mark.parametrize("field,value,msg", [
    ("con_start", np.array([0, 2, 1]), "con_start < 1"),
    ("con_end", np.array([13, 14, 7]), "con_end >= sequence length 14"),
    ("con_end", np.array([3, 10, 7]), r"con_end < con_start \(inverted domains\) in row\(s\) 0"),
    ("pos_tags", None, r"'pos_tags' has ids outside 0..39 in row\(s\) 1"),
    ("token_type_ids", np.zeros((3, 13), np.int64), "'token_type_ids' has shape"),
])
def test_bad_batches_are_clear_errors(field, value, msg):
  model = poi_net.PoiNetForQuestionAnswering(encoders.EncoderConfig(**ALBERT), rngs=nnx.Rngs(0))
  batch = _qa_batch(np.random.default_rng(0))
  if field == "pos_tags":
    batch["pos_tags"] = batch["pos_tags"].copy()
    batch["pos_tags"][1, 3] = 40
  else:
    batch[field] = value
  with pytest.raises(checks.BatchError, match=msg):
    model({k: jnp.asarray(v) for k, v in batch.items()})


def test_pos_table_reported_new_then_exported_and_read_back(tmp_path):
  cfg = encoders.EncoderConfig(**ALBERT)
  model = poi_net.PoiNetForQuestionAnswering(cfg, rngs=nnx.Rngs(0))
  encoders.export_pretrained(model.encoder, str(tmp_path / "plain"))
  fresh = poi_net.PoiNetForQuestionAnswering(cfg, rngs=nnx.Rngs(5))
  report = poi_net.load_pretrained_into(fresh, str(tmp_path / "plain"))
  assert report.newly_initialized == [poi_net.POS_EXPORT_NAME]
  encoders.export_pretrained(model.encoder, str(tmp_path / "poi"),
                             extra_tensors=model.export_tensors())
  report = poi_net.load_pretrained_into(fresh, str(tmp_path / "poi"))
  assert not report.newly_initialized and poi_net.POS_EXPORT_NAME in report.loaded
  np.testing.assert_array_equal(np.asarray(fresh.pos_embeddings.embedding.get_value()),
                                np.asarray(model.pos_embeddings.embedding.get_value()))


def _null_case_batch(rng, b=24, l=12):
  """Rows whose domain A is [CLS] + one question token (con_start 2): [CLS] is then A's least
  similar token at every turn in a good share of them."""
  ids = rng.integers(3, 60, size=(b, l))
  ids[:, 0] = 2
  return dict(input_ids=ids, attention_mask=np.ones((b, l), np.int64),
              token_type_ids=np.zeros_like(ids), pos_tags=rng.integers(1, 39, size=(b, l)),
              con_start=np.full(b, 2), con_end=np.full(b, l - 1))


def test_null_from_encoder_makes_the_null_score_depend_on_the_input_with_gradient():
  """Where [CLS] scores 0 in the co-attention, the paper's null score s_0 + e_0 is the head's
  bias for every input, with no gradient; ``null_from="encoder"`` reads it from H at [CLS]: it
  then varies with the input and has gradient (to the encoder and the head's kernel). The other
  positions' logits are the same either way."""
  cfg = encoders.EncoderConfig(**ALBERT)
  batch = {k: jnp.asarray(v) for k, v in _null_case_batch(np.random.default_rng(0)).items()}
  models = {n: poi_net.PoiNetForQuestionAnswering(cfg, null_from=n, rngs=nnx.Rngs(0))
            for n in poi_net.NULL_FROM}
  r, _ = models["coattention"].encode(*(batch[k] for k in ("input_ids", "attention_mask",
                                                          "token_type_ids", "pos_tags",
                                                          "con_start", "con_end")),
                                      deterministic=True)
  zero = np.flatnonzero(np.all(np.asarray(r[:, 0]) == 0, axis=-1))
  assert len(zero) >= 3  # [CLS] scored 0 in these rows

  def null_score(model):
    out = model(batch)
    null = (out["start_logits"] + out["end_logits"])[zero, 0]
    return jnp.sum(null * jnp.arange(1, 1 + len(zero)))

  outs = {n: m(batch) for n, m in models.items()}
  bias = float(jnp.sum(models["coattention"].qa_outputs.bias.get_value()))
  paper_null = np.asarray(outs["coattention"]["start_logits"] + outs["coattention"]["end_logits"])
  np.testing.assert_allclose(paper_null[zero, 0], bias, atol=1e-6)  # the bias, whatever the input
  enc_null = np.asarray(outs["encoder"]["start_logits"] + outs["encoder"]["end_logits"])[zero, 0]
  assert np.std(enc_null) > 1e-3
  for k in ("start_logits", "end_logits"):
    np.testing.assert_array_equal(np.asarray(outs["encoder"][k])[:, 1:],
                                  np.asarray(outs["coattention"][k])[:, 1:])
  for name, model in models.items():
    g = nnx.grad(null_score)(model)
    enc = max(float(jnp.abs(x).max()) for x in jax.tree.leaves(g["encoder"]))
    head = float(jnp.abs(g["qa_outputs"]["kernel"].get_value()).max())
    if name == "coattention":
      assert enc == 0.0 and head == 0.0
    else:
      assert enc > 1e-6 and head > 1e-6


def test_unknown_null_from_is_an_error():
  with pytest.raises(ValueError, match="null_from"):
    poi_net.PoiNetForQuestionAnswering(encoders.EncoderConfig(**ALBERT), null_from="cls",
                                       rngs=nnx.Rngs(0))
