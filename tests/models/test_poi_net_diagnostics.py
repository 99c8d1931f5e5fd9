"""POI-Net's diagnostic options (issue 50: why POI-Net may trail its tuned encoder; the defaults
stay the paper's): the scores from stop_gradient(H), the output layer reading H + R or [H; R],
the POS table started at 0, and the new parameters' own learning rate. `combine` against a
PyTorch reference written from the equations (values and the gradient to H)."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import torch
from flax import nnx

from poi_jax.models import encoders, poi_net
from poi_jax.train import optim
from tests.models.test_poi_net import ALBERT, _qa_batch
from tests.reference import poi_torch

CS, CE = np.array([4, 2, 1]), np.array([13, 10, 7])


def _torch_combine(h, score_gradient, output):
  """R = r(H) ⊙ H with r from the paper's equations (poi_torch), the scores computed from
  H.detach() when the gradient is stopped; then R, H + R or [H; R]."""
  scored = h.detach() if score_gradient == "stop" else h
  r = poi_torch.paper_coattention(scored, CS, CE, 3, "forgetting")[0]
  big_r = h * r[..., None]
  return {"replace": big_r, "add": h + big_r, "concat": torch.cat([h, big_r], -1)}[output]


@pytest.mark.parametrize("score_gradient", ["full", "stop"])
@pytest.mark.parametrize("output", ["replace", "add", "concat"])
def test_combine_matches_the_equations_in_value_and_gradient(score_gradient, output):
  rng = np.random.default_rng(0)
  h = rng.standard_normal((3, 14, 8)).astype(np.float32)
  w = rng.standard_normal((16 if output == "concat" else 8,)).astype(np.float32)

  def f(hj):
    scores, r = poi_net.coatt.paper_coattention(hj, jnp.asarray(CS), jnp.asarray(CE))
    out = poi_net.combine(hj, r, scores, score_gradient=score_gradient, output=output)
    return jnp.sum(jnp.tanh(out) @ jnp.asarray(w)), out

  (value, out), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(h))
  ht = torch.tensor(h, dtype=torch.float64, requires_grad=True)
  out_t = _torch_combine(ht, score_gradient, output)
  (torch.tanh(out_t) @ torch.tensor(w, dtype=torch.float64)).sum().backward()
  np.testing.assert_allclose(np.asarray(out), out_t.detach().numpy(), atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(grad), ht.grad.numpy(), atol=1e-5, rtol=0)


def test_stopping_the_score_gradient_changes_the_gradient_not_the_forward():
  rng = np.random.default_rng(1)
  h = jnp.asarray(rng.standard_normal((3, 14, 8)).astype(np.float32))
  scores, r = poi_net.coatt.paper_coattention(h, jnp.asarray(CS), jnp.asarray(CE))
  g = {sg: jax.grad(lambda x: jnp.sum(jnp.tanh(poi_net.combine(
      x, poi_net.coatt.paper_coattention(x, jnp.asarray(CS), jnp.asarray(CE))[1],
      poi_net.coatt.paper_coattention(x, jnp.asarray(CS), jnp.asarray(CE))[0],
      score_gradient=sg))))(h) for sg in ("full", "stop")}
  np.testing.assert_array_equal(np.asarray(poi_net.combine(h, r, scores, score_gradient="stop")),
                                np.asarray(r))
  assert float(jnp.max(jnp.abs(g["full"] - g["stop"]))) > 1e-4


def _model(cls=poi_net.PoiNetForQuestionAnswering, **kw):
  return cls(encoders.EncoderConfig(**ALBERT), rngs=nnx.Rngs(0), **kw)


def test_concat_widens_the_output_layer_and_add_keeps_it():
  batch = {k: jnp.asarray(v) for k, v in _qa_batch(np.random.default_rng(0)).items()}
  wide, plain = _model(output="concat"), _model(output="add")
  assert wide.qa_outputs.kernel.get_value().shape == (2 * ALBERT["hidden_size"], 2)
  assert plain.qa_outputs.kernel.get_value().shape == (ALBERT["hidden_size"], 2)
  assert wide(batch)["start_logits"].shape == batch["input_ids"].shape
  mc = _model(poi_net.PoiNetForMultipleChoice, output="concat")
  assert mc.classifier.kernel.get_value().shape == (2 * ALBERT["hidden_size"], 1)
  with pytest.raises(ValueError, match="null_from='encoder' reads H alone"):
    _model(output="concat", null_from="encoder")
  with pytest.raises(ValueError, match="output must be one of"):
    _model(output="sum")


def test_a_zero_started_pos_table_leaves_the_encoder_input_unchanged():
  batch = _qa_batch(np.random.default_rng(0))
  model = _model(pos_init="zeros")
  assert not np.any(np.asarray(model.pos_embeddings.embedding.get_value()))
  other_tags = dict(batch, pos_tags=np.ones_like(batch["pos_tags"]) * batch["attention_mask"])
  a, b = (model({k: jnp.asarray(v) for k, v in x.items()}) for x in (batch, other_tags))
  np.testing.assert_array_equal(np.asarray(a["start_logits"]), np.asarray(b["start_logits"]))
  assert np.any(np.asarray(_model().pos_embeddings.embedding.get_value()))  # the default


def test_new_parameters_get_their_own_learning_rate():
  model = _model()
  params = nnx.state(model, nnx.Param)
  mask = optim.new_params_mask(params)
  new = {jax.tree_util.keystr(p) for p, v in jax.tree_util.tree_leaves_with_path(mask) if v}
  assert new and all("pos_embeddings" in p or "qa_outputs" in p for p in new), new
  assert not any("encoder" in p for p in new)
  config = ml_collections.ConfigDict(dict(lr=1e-3, warmup_ratio=0.0, warmup_steps=0,
                                          weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-6,
                                          grad_clip=0.0, accum_steps=1))
  grads = jax.tree.map(jnp.ones_like, params)
  steps = {}
  for scale in (1.0, 10.0):
    config.new_params_lr_scale = scale
    tx, _ = optim.make_optimizer(config, total_steps=10)
    steps[scale], _ = tx.update(grads, tx.init(params), params)
  flat1 = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(steps[1.0])}
  flat10 = {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(steps[10.0])}
  for p, v in flat10.items():
    np.testing.assert_allclose(np.asarray(v), np.asarray(flat1[p]) * (10.0 if p in new else 1.0),
                               rtol=1e-6, atol=1e-12)
