"""DumaForMultipleChoice: parity with a PyTorch assembly, parameter accounting, bad input."""
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from poi_jax.models import checks, encoders
from poi_jax.models import duma as duma_model
from tests.reference import duma_torch

CFG = dict(model_type="bert", vocab_size=60, hidden_size=16, num_hidden_layers=2,
           num_attention_heads=4, intermediate_size=24, hidden_dropout_prob=0.0,
           attention_probs_dropout_prob=0.0)


def _batch(rng, b=2, c=2, l=16):
  ids = rng.integers(3, 60, size=(b, c, l))
  lengths = np.array([[16, 12], [9, 14]])
  mask = (np.arange(l)[None, None] < lengths[..., None]).astype(np.int64)
  p_end = np.array([[6, 5], [3, 7]])
  q_end = lengths - 2
  return dict(input_ids=ids * mask, attention_mask=mask, token_type_ids=np.zeros_like(ids),
              p_end=p_end, q_start=p_end + 2, q_end=q_end, labels=np.array([1, 0]))


def _torch_logits(model, batch, tmp_path):
  """The PyTorch assembly: transformers' BERT with the Flax encoder's weights (through the
  exporter), the DUMA reference and the classifier -> logits ``(2, 2)``."""
  encoders.export_pretrained(model.encoder, str(tmp_path))
  pt = transformers.BertModel.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
  flat = lambda x: torch.tensor(x.reshape(4, -1))
  with torch.no_grad():
    h = pt(input_ids=flat(batch["input_ids"]), attention_mask=flat(batch["attention_mask"])
           ).last_hidden_state
    ref = duma_torch.TorchDuma.from_flax(model.duma, 16, 4, 2, True, "concat", "both",
                                         "attention")
    bounds = np.stack([batch[k].reshape(-1) for k in ("p_end", "q_start", "q_end")], -1)
    w = torch.tensor(np.asarray(model.classifier_2.kernel.get_value()))
    logits = ref(h, bounds) @ w + torch.tensor(np.asarray(model.classifier_2.bias.get_value()))
  return logits.reshape(2, 2).numpy()


def test_model_matches_pytorch_assembly(tmp_path):
  model = duma_model.DumaForMultipleChoice(encoders.EncoderConfig(**CFG), rngs=nnx.Rngs(0))
  batch = _batch(np.random.default_rng(0))
  out = model({k: jnp.asarray(v) for k, v in batch.items()})
  np.testing.assert_allclose(np.asarray(out["logits"]), _torch_logits(model, batch, tmp_path),
                             atol=1e-5)


ALBERT_BASE = dict(model_type="albert", vocab_size=30000, embedding_size=128, hidden_size=768,
                   num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)


@pytest.mark.parametrize("output_projection,per_mha", [(False, 3), (True, 4), (None, 4)])
def test_parameter_accounting(output_projection, per_mha):
  """Shared k layers: DUMA adds one MHA + the 2D->1 classifier, for any k. Without W^O (Table 9:
  +1.8M on ALBERT-base) that MHA is 3 (D^2 + D) = 1.77M; with the W^O of eq. (1) (the paper
  variant's default, None) 4 (D^2 + D) = 2.36M, which Table 9 does not report."""
  cfg = encoders.EncoderConfig(**ALBERT_BASE)
  d = cfg.hidden_size
  for k in (1, 2, 3):
    m = nnx.eval_shape(lambda: duma_model.DumaForMultipleChoice(
        cfg, num_layers=k, output_projection=output_projection, rngs=nnx.Rngs(0)))
    parts = duma_model.parameter_breakdown(m)
    assert parts["duma"] == per_mha * (d * d + d)
    assert parts["classifier"] == 2 * d + 1
  if output_projection is False:
    assert round((parts["duma"] + parts["classifier"]) / 1e6, 1) == 1.8  # Table 9
  unshared = nnx.eval_shape(lambda: duma_model.DumaForMultipleChoice(
      cfg, num_layers=2, share_layers=False, output_projection=output_projection,
      rngs=nnx.Rngs(0)))
  assert duma_model.parameter_breakdown(unshared)["duma"] == 2 * 2 * per_mha * (d * d + d)


def test_model_without_output_projection_matches_pytorch(tmp_path):
  """The Table 9 setting (no W^O) against the PyTorch assembly (W^O = identity there)."""
  model = duma_model.DumaForMultipleChoice(encoders.EncoderConfig(**CFG), output_projection=False,
                                           rngs=nnx.Rngs(0))
  assert model.duma.attention.output is None
  batch = _batch(np.random.default_rng(1))
  out = model({k: jnp.asarray(v) for k, v in batch.items()})
  np.testing.assert_allclose(np.asarray(out["logits"]), _torch_logits(model, batch, tmp_path),
                             atol=1e-5)


def test_released_variant_refuses_an_output_projection():
  with pytest.raises(ValueError, match="no output projection"):
    duma_model.DumaForMultipleChoice(encoders.EncoderConfig(**CFG), variant="released",
                                     num_layers=1, output_projection=True, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("field,value,msg", [
    ("q_end", np.array([[6, 12], [9, 14]]), r"p_end >= q_end in record 0 option 0"),
    ("q_end", np.array([[14, 12], [9, 16]]), r"q_end >= sequence length 16 in record 1 option 1"),
    ("p_end", np.array([[0, 5], [3, 7]]), r"p_end < 1"),
])
def test_bad_boundaries_name_the_record(field, value, msg):
  model = duma_model.DumaForMultipleChoice(encoders.EncoderConfig(**CFG), rngs=nnx.Rngs(0))
  batch = _batch(np.random.default_rng(0))
  batch[field] = value
  with pytest.raises(checks.BatchError, match=msg):
    model({k: jnp.asarray(v) for k, v in batch.items()})
