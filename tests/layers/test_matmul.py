"""The dense layers' CPU matmul (`poi_jax.layers.matmul`): same values and gradients as
`jax.lax.dot_general`, used by `common.dense` on a CPU, other dimension numbers untouched."""
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from flax import nnx

from poi_jax.layers import common, matmul

LINEAR = (((2,), (0,)), ((), ()))


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.normal(size=(3, 5, 8)), jnp.float32),
          jnp.asarray(rng.normal(size=(8, 6)), jnp.float32))


def test_values_and_gradients_match_lax_dot_general():
  x, w = _inputs()
  weights = jnp.asarray(np.random.default_rng(1).normal(size=(3, 5, 6)), jnp.float32)

  def loss(dot, x, w):  # a non-uniform cotangent, so that a wrong transpose shows
    return jnp.sum(jnp.tanh(dot(x, w, LINEAR)) * weights)

  want = jax.grad(lambda x, w: loss(jax.lax.dot_general, x, w), argnums=(0, 1))(x, w)
  got = jax.grad(lambda x, w: loss(matmul.dot_general, x, w), argnums=(0, 1))(x, w)
  np.testing.assert_allclose(np.asarray(matmul.dot_general(x, w, LINEAR)),
                             np.asarray(jax.lax.dot_general(x, w, LINEAR)), rtol=0, atol=1e-6)
  for g, r in zip(got, want):
    assert g.shape == r.shape
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-5, atol=1e-5)


def _weight_grad_dots(dot):
  x, w = _inputs()
  jaxpr = jax.make_jaxpr(jax.grad(lambda x, w: jnp.sum(jnp.tanh(dot(x, w, LINEAR))),
                                  argnums=1))(x, w)
  eqns = []

  def walk(jx):
    for e in jx.eqns:
      eqns.append(e)
      for sub in jax.extend.core.jaxprs_in_params(e.params):
        walk(sub)
  walk(jaxpr.jaxpr)
  return ([e.params["dimension_numbers"] for e in eqns if e.primitive.name == "dot_general"],
          [e for e in eqns if e.primitive.name == "transpose"])


def test_cpu_weight_gradient_is_one_tokens_by_tokens_matmul():
  """dW = x2.T @ dy2 (tokens flattened, contracted on axis 0 of both), with no transpose after;
  JAX's own rule (what XLA's CPU pipeline turns into a transposed copy) differs."""
  dims, transposes = _weight_grad_dots(matmul.dot_general)
  if jax.default_backend() == "cpu":
    assert (((0,), (0,)), ((), ())) in [tuple(map(lambda p: tuple(map(tuple, p)), d))
                                          for d in dims]
    assert not transposes
  plain_dims, plain_transposes = _weight_grad_dots(jax.lax.dot_general)
  assert plain_transposes or (((0,), (0,)), ((), ())) not in plain_dims


def test_dense_layers_use_it_and_other_contractions_pass_through():
  layer = common.dense(8, 6, ("embed", "mlp"), init_std=0.02, dtype=jnp.float32,
                       rngs=nnx.Rngs(0))
  assert layer.dot_general is matmul.dot_general
  x, w = _inputs()
  assert not matmul._is_linear(x, w, (((2,), (1,)), ((), ())))
  assert not matmul._is_linear(x, w.astype(jnp.bfloat16), LINEAR)
  batched = jnp.ones((3, 8, 6))
  out = matmul.dot_general(x, batched, (((2,), (1,)), ((0,), (0,))))
  np.testing.assert_allclose(np.asarray(out), np.asarray(jnp.einsum("bld,bdo->blo", x, batched)),
                             rtol=1e-5, atol=1e-5)
