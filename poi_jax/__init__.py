"""poi-jax: discriminative machine reading comprehension (POI-Net, DUMA, ...) in JAX/Flax.

``from poi_jax import Reader`` answers questions with a trained model
(`poi_jax.inference.reader`); it is imported on first use, so ``import poi_jax`` stays cheap and changes no JAX/Flax setting.
"""
__version__ = "0.1.0"


def __getattr__(name):
  if name == "Reader":
    from poi_jax.inference.reader import Reader
    return Reader
  raise AttributeError(f"module 'poi_jax' has no attribute {name!r}")
