"""A trained model answering your own text: the Reader (`reader`) and the loading of a workdir or
an ``export/`` directory (`load`). The export's own files are written by the engine
(`poi_jax.model_files.export`); the command line over a Reader is ``python -m poi_jax.predict``.
"""
