"""poi-jax: discriminative machine reading comprehension (POI-Net, DUMA, ...) in JAX/Flax."""
__version__ = "0.1.0"
