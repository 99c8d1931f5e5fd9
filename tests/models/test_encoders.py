"""Parity of the Flax encoders with transformers' PyTorch models (float32, 1e-5 absolute)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from poi_jax.models import encoders
from tests.models.encoder_utils import make_hf_model, make_inputs, torch_outputs

# (model_type, HF config kwargs, input lengths per row): three per family, with padding.
CONFIGS = [
    ("bert", dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=37, hidden_act="gelu"), [9, 5, 2]),
    ("bert", dict(vocab_size=120, hidden_size=48, num_hidden_layers=3, num_attention_heads=3,
                  intermediate_size=64, hidden_act="gelu_new", layer_norm_eps=1e-7,
                  type_vocab_size=3), [9, 9, 9]),
    ("bert", dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=20, hidden_act="relu"), [4, 9, 1]),
    ("albert", dict(vocab_size=99, embedding_size=17, hidden_size=32, num_hidden_layers=4,
                    num_attention_heads=4, intermediate_size=40, num_hidden_groups=2,
                    inner_group_num=1), [9, 6, 3]),
    ("albert", dict(vocab_size=80, embedding_size=16, hidden_size=24, num_hidden_layers=3,
                    num_attention_heads=2, intermediate_size=30, num_hidden_groups=1,
                    inner_group_num=2, hidden_act="gelu"), [9, 2, 7]),
    ("albert", dict(vocab_size=64, embedding_size=33, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=8, intermediate_size=48, num_hidden_groups=2,
                    inner_group_num=2, layer_norm_eps=1e-5), [9, 9, 4]),
    ("roberta", dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=37, max_position_embeddings=40, pad_token_id=1), [9, 5, 2]),
    ("roberta", dict(vocab_size=70, hidden_size=24, num_hidden_layers=3, num_attention_heads=2,
                     intermediate_size=50, max_position_embeddings=20, pad_token_id=1,
                     type_vocab_size=1), [9, 9, 3]),
    ("roberta", dict(vocab_size=60, hidden_size=40, num_hidden_layers=1, num_attention_heads=5,
                     intermediate_size=44, max_position_embeddings=30, pad_token_id=1,
                     hidden_act="gelu_new"), [1, 8, 9]),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CONFIGS)]
L = 9


def _save_and_load(tmp_path, model_type, kwargs, **load_kw):
  hf = make_hf_model(model_type, **kwargs)
  hf.save_pretrained(tmp_path)
  enc, _, report = encoders.load_pretrained(str(tmp_path), **load_kw)
  return hf, enc, report


def _inputs(hf, lengths):
  cfg = hf.config
  return make_inputs(cfg.vocab_size, len(lengths), L, lengths, pad_id=cfg.pad_token_id or 0,
                     type_vocab_size=cfg.type_vocab_size)


def _flax_outputs(enc, ids, mask, types):
  out = enc(jnp.asarray(ids, jnp.int32), jnp.asarray(mask, jnp.int32),
            jnp.asarray(types, jnp.int32), output_hidden_states=True)
  return [np.asarray(h) for h in out.hidden_states], np.asarray(out.pooler_output)


@pytest.mark.parametrize("attention", ["auto", "xla"])  # the settings a CPU can run
@pytest.mark.parametrize("model_type,kwargs,lengths", CONFIGS, ids=IDS)
def test_hidden_states_and_pooler_match_transformers(tmp_path, model_type, kwargs, lengths,
                                                     attention):
  hf, enc, report = _save_and_load(tmp_path, model_type, kwargs, attention=attention)
  assert not report.newly_initialized and not report.unused
  ids, mask, types = _inputs(hf, lengths)
  t_hidden, t_pool = torch_outputs(hf, ids, mask, types)
  f_hidden, f_pool = _flax_outputs(enc, ids, mask, types)
  assert len(f_hidden) == len(t_hidden)
  for i, (f, t) in enumerate(zip(f_hidden, t_hidden)):
    np.testing.assert_allclose(f, t, atol=1e-5, rtol=0, err_msg=f"hidden state {i}")
  np.testing.assert_allclose(f_pool, t_pool, atol=1e-5, rtol=0)


@pytest.mark.parametrize("model_type,kwargs,lengths", [CONFIGS[0], CONFIGS[3], CONFIGS[6]],
                         ids=["bert", "albert", "roberta"])
@pytest.mark.parametrize("scan,remat", [(True, False), (False, True), (True, True),
                                        (True, "dots_saveable"),
                                        (False, "dots_with_no_batch_dims_saveable")])
def test_scan_and_remat_match_transformers(tmp_path, model_type, kwargs, lengths, scan, remat):
  hf, enc, _ = _save_and_load(tmp_path, model_type, kwargs, scan_layers=scan, remat=remat)
  ids, mask, types = _inputs(hf, lengths)
  t_hidden, t_pool = torch_outputs(hf, ids, mask, types)
  f_hidden, f_pool = _flax_outputs(enc, ids, mask, types)
  for i, (f, t) in enumerate(zip(f_hidden, t_hidden)):
    np.testing.assert_allclose(f, t, atol=1e-5, rtol=0, err_msg=f"hidden state {i}")
  np.testing.assert_allclose(f_pool, t_pool, atol=1e-5, rtol=0)


@pytest.mark.parametrize("model_type,kwargs,lengths", [CONFIGS[0], CONFIGS[4], CONFIGS[6]],
                         ids=["bert", "albert", "roberta"])
@pytest.mark.parametrize("scan", [False, True])
def test_parameter_gradients_match_torch(tmp_path, model_type, kwargs, lengths, scan):
  """d(sum(last_hidden * w) + sum(pooler * u))/d(params) agrees with torch to 1e-4 relative."""
  hf, enc, _ = _save_and_load(tmp_path, model_type, kwargs, scan_layers=scan)
  ids, mask, types = _inputs(hf, lengths)
  rng = np.random.default_rng(1)
  w = rng.standard_normal((len(lengths), L, hf.config.hidden_size)).astype(np.float32)
  u = rng.standard_normal((len(lengths), hf.config.hidden_size)).astype(np.float32)

  out = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
           token_type_ids=torch.tensor(types))
  loss = (out.last_hidden_state * torch.tensor(w)).sum() + (out.pooler_output * torch.tensor(u)).sum()
  loss.backward()
  t_grads = {k: p.grad.numpy() for k, p in hf.named_parameters() if p.grad is not None}

  graphdef, params, rest = nnx.split(enc, nnx.Param, ...)

  def f(p):
    m = nnx.merge(graphdef, p, rest)
    o = m(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(types))
    return jnp.sum(o.last_hidden_state * w) + jnp.sum(o.pooler_output * u)

  grads = jax.grad(f)(params)
  nnx.update(enc, grads)  # reuse the state_dict view of the encoder to name each gradient
  f_grads = encoders.encoder_state_dict(enc)
  assert set(f_grads) == set(t_grads)
  global_scale = max(np.abs(g).max() for g in t_grads.values())
  for name, tg in t_grads.items():
    scale = max(np.abs(tg).max(), 1e-3)
    if name.endswith("key.bias"):
      # Exactly zero in exact arithmetic (softmax ignores a per-query constant q.b_k); both
      # frameworks return float32 round-off, so compare at the scale of the model's gradients.
      scale = global_scale
    np.testing.assert_allclose(f_grads[name] / scale, tg / scale, atol=1e-4, rtol=0,
                               err_msg=name)


@pytest.mark.parametrize("model_type,kwargs,lengths", [CONFIGS[1], CONFIGS[5], CONFIGS[7]],
                         ids=["bert", "albert", "roberta"])
@pytest.mark.parametrize("scan", [False, True])
def test_export_round_trip_loads_in_transformers(tmp_path, model_type, kwargs, lengths, scan):
  import transformers
  hf, enc, _ = _save_and_load(tmp_path / "src", model_type, kwargs, scan_layers=scan)
  encoders.export_pretrained(enc, str(tmp_path / "out"))
  back, info = transformers.AutoModel.from_pretrained(str(tmp_path / "out"),
                                                      output_loading_info=True,
                                                      attn_implementation="eager")
  back.eval()
  assert not info["missing_keys"] and not info["unexpected_keys"]
  ids, mask, types = _inputs(hf, lengths)
  t_hidden, t_pool = torch_outputs(hf, ids, mask, types)
  b_hidden, b_pool = torch_outputs(back, ids, mask, types)
  for f, t in zip(b_hidden, t_hidden):
    np.testing.assert_allclose(f, t, atol=1e-5, rtol=0)
  np.testing.assert_allclose(b_pool, t_pool, atol=1e-5, rtol=0)


def test_dropout_is_active_in_training_and_reproducible():
  cfg = encoders.EncoderConfig(model_type="bert", vocab_size=50, hidden_size=16,
                               num_hidden_layers=2, num_attention_heads=2, intermediate_size=20,
                               hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
  ids = jnp.ones((2, 5), jnp.int32)
  a = encoders.build_encoder(cfg, rngs=nnx.Rngs(0))
  b = encoders.build_encoder(cfg, rngs=nnx.Rngs(0))
  eval_out = a(ids).last_hidden_state
  t1 = a(ids, deterministic=False).last_hidden_state
  t2 = a(ids, deterministic=False).last_hidden_state
  assert not np.allclose(t1, eval_out) and not np.allclose(t1, t2)  # new mask each call
  np.testing.assert_array_equal(b(ids, deterministic=False).last_hidden_state, t1)


@pytest.mark.parametrize("given,want", [(True, "full"), (False, "none"), ("True", "full"),
                                        ("false", "none"), ("dots_saveable", "dots_saveable")])
def test_remat_accepts_policies_and_the_old_booleans(given, want):
  assert encoders.EncoderConfig(remat=given).remat == want


def test_bad_remat_and_attention_are_clear_errors():
  with pytest.raises(ValueError, match="remat must be one of"):
    encoders.EncoderConfig(remat="sometimes")
  with pytest.raises(ValueError, match="attention must be one of .*explicit_vjp"):
    encoders.EncoderConfig(attention="flash")


def test_config_keys_flow_into_the_encoder_config():
  from configs import squad2
  from poi_jax.models import build
  config = squad2.get_config("tiny")
  with config.unlocked():
    config.model.attention = "xla"
    config.model.attention_dropout = 0.0
    config.model.remat = "dots_with_no_batch_dims_saveable"
  cfg = build.encoder_config(config)
  assert (cfg.attention, cfg.attention_probs_dropout_prob, cfg.hidden_dropout_prob,
          cfg.remat) == ("xla", 0.0, 0.1, "dots_with_no_batch_dims_saveable")
  assert "attention" not in cfg.to_hf() and "remat" not in cfg.to_hf()
