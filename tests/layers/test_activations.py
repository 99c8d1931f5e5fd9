"""The activation table: BERT's exact GELU (computed through ``erf`` for speed on a CPU) equals
PyTorch's ``gelu`` and its derivative, in float32, over the range activations take."""
import jax
import jax.numpy as jnp
import numpy as np
import torch

from poi_jax.layers import common


def test_exact_gelu_equals_torch_in_value_and_gradient():
  x = np.linspace(-12.0, 12.0, 200_001, dtype=np.float32)
  gelu = common.activation("gelu")
  assert gelu is common.gelu_exact
  y = np.asarray(jax.jit(gelu)(jnp.asarray(x)))
  dy = np.asarray(jax.jit(jax.vmap(jax.grad(gelu)))(jnp.asarray(x)))
  tx = torch.tensor(x, requires_grad=True)
  ty = torch.nn.functional.gelu(tx)
  ty.sum().backward()
  np.testing.assert_allclose(y, ty.detach().numpy(), atol=2e-6, rtol=0)
  np.testing.assert_allclose(dy, tx.grad.numpy(), atol=2e-6, rtol=0)
  # Not the tanh approximation (which differs by up to ~5e-4 near |x| = 2).
  tanh = np.asarray(jax.nn.gelu(jnp.asarray(x), approximate=True))
  assert np.abs(tanh - y).max() > 1e-4


def test_exact_gelu_keeps_bfloat16():
  x = jnp.linspace(-4.0, 4.0, 101, dtype=jnp.bfloat16)
  y = common.gelu_exact(x)
  assert y.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(y, np.float32),
                             np.asarray(jax.nn.gelu(x.astype(jnp.float32), approximate=False)),
                             atol=0.04, rtol=0)
