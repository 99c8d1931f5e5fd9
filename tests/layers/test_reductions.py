"""`max_at_argmax` / `min_at_argmin`: jnp.max's values, torch.max(x, dim)'s gradient, and a
gradient that stays finite when XLA computes the operand twice with different rounding."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from poi_jax.layers.reductions import max_at_argmax, min_at_argmin


def _with_ties(seed=0, shape=(3, 7, 5)):
  """Random values, a masked (-inf) stretch and, in every column, the maximum written twice."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(shape).astype(np.float32)
  x[:, 5:, :] = -np.inf  # positions outside a domain, as the co-attention masks them
  top = x[:, :5].max(axis=1)
  x[:, 1, :] = top  # ties: position 1 and the original argmax (unless that is 1 already)
  x[0, :, 0] = -np.inf  # a column with nothing in it
  return x


@pytest.mark.parametrize("axis", [1, -2])
def test_values_are_jnp_max_and_min(axis):
  x = jnp.asarray(_with_ties())
  np.testing.assert_array_equal(np.asarray(max_at_argmax(x, axis)), np.asarray(jnp.max(x, axis)))
  y = jnp.where(jnp.isinf(x), 5.0, x)
  np.testing.assert_array_equal(np.asarray(min_at_argmin(y, axis)), np.asarray(jnp.min(y, axis)))


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_gradient_is_torch_max_over_a_dim_including_ties(reduce):
  """torch.max(x, dim) / torch.min(x, dim) send the whole gradient to the index they return."""
  x = np.where(np.isinf(_with_ties()), 3.0, _with_ties()).astype(np.float32)
  if reduce == "min":
    x = -x
  w = np.random.default_rng(1).standard_normal((x.shape[0], x.shape[2])).astype(np.float32)
  ours = max_at_argmax if reduce == "max" else min_at_argmin
  g = jax.grad(lambda v: jnp.sum(ours(v, 1) * w))(jnp.asarray(x))
  xt = torch.tensor(x, requires_grad=True)
  torch_reduce = torch.max if reduce == "max" else torch.min
  (torch_reduce(xt, dim=1).values * torch.tensor(w)).sum().backward()
  np.testing.assert_array_equal(np.asarray(g), xt.grad.numpy())
  assert (np.count_nonzero(np.asarray(g), axis=1) <= 1).all()


def test_without_ties_the_gradient_is_jnp_max_s():
  x = jnp.asarray(np.random.default_rng(2).standard_normal((4, 9, 6)).astype(np.float32))
  w = jnp.asarray(np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32))
  np.testing.assert_array_equal(
      np.asarray(jax.grad(lambda v: jnp.sum(max_at_argmax(v, 1) * w))(x)),
      np.asarray(jax.grad(lambda v: jnp.sum(jnp.max(v, 1) * w))(x)))


def test_forward_mode_vmap_and_jit():
  x = jnp.asarray(np.random.default_rng(4).standard_normal((2, 5, 3)).astype(np.float32))
  t = jnp.ones_like(x)
  value, tangent = jax.jvp(lambda v: max_at_argmax(v, -1), (x,), (t,))
  np.testing.assert_array_equal(np.asarray(value), np.asarray(jnp.max(x, -1)))
  np.testing.assert_array_equal(np.asarray(tangent), np.ones((2, 5), np.float32))
  mapped = jax.jit(jax.vmap(lambda v: max_at_argmax(v, 0)))(x)
  np.testing.assert_array_equal(np.asarray(mapped), np.asarray(jnp.max(x, 1)))


# XLA's CPU backend at optimisation level 0 computes a layer norm that two fusions share twice,
# with different rounding; JAX's reduce_max rule then finds no position equal to the max and
# divides by zero. The flag must be set before the backend starts: a child process.
_RECOMPUTED_OPERAND = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp
    from poi_jax.layers import poi_coattention as coatt
    cs, ce = jnp.array([4, 2, 1]), jnp.array([13, 10, 7])

    def loss(x, w, variant):
      mu = x.mean(-1, keepdims=True)
      h = (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-12)
      coattention = {"paper": coatt.paper_coattention, "released": coatt.released_coattention}
      return jnp.sum(coattention[variant](h, cs, ce)[1] * w)
    grad = jax.jit(jax.grad(loss), static_argnums=2)
    rng, bad = np.random.default_rng(0), []
    for trial in range(4):
      x, w = (jnp.asarray(rng.standard_normal((3, 14, 24)).astype(np.float32)) for _ in "xw")
      for variant in ("paper", "released"):
        if not np.isfinite(np.asarray(grad(x, w, variant))).all():
          bad.append((trial, variant))
    assert not bad, f"non-finite gradients: {bad}"
""")


def test_coattention_gradients_stay_finite_when_the_compiler_recomputes_their_input():
  env = {**os.environ, "XLA_FLAGS": "--xla_backend_optimization_level=0", "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, "-c", _RECOMPUTED_OPERAND], env=env, timeout=600,
                        capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-2000:]
