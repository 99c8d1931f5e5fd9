"""A trained model over HTTP (``python -m poi_jax.serve``): the app and its command line (`app`),
the micro-batching worker (`batching`), untrusted request bodies -> records (`requests`), and the
demo page (``static/``, package data)."""
