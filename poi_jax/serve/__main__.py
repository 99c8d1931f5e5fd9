"""``python -m poi_jax.serve``: see `poi_jax.serve.app`."""
from absl import app, flags

from poi_jax.serve import app as serve_app

__doc__ = serve_app.__doc__  # absl's --help prints the __main__ module's docstring

if __name__ == "__main__":
  serve_app.define_flags()
  flags.mark_flags_as_required(["model"])
  app.run(serve_app.main)
