"""The builders the task configs share: defaults, variants and the sections of shared heads.

``configs/<task>.py`` (one file per task, at the repository's top) builds its config from these
modules and imports nothing else, so a config file loads from any working directory, from a
plain (non-editable) install, and as a copy a user edits elsewhere (as big_vision's configs
import ``big_vision.configs.common``):

* `poi_jax.config.base`: what every task shares, the common variants (``tiny``, ``minilm``,
  ``bf16``, ...) and their helpers (`apply_variants`, `use_variant_data`, ...);
* `poi_jax.config.heads`: POI-Net's ``coattention`` and DUMA's ``duma`` sections (squad1, squad2,
  race, dream);
* `poi_jax.config.qopn`: QOPN's config, shared by ``configs/newsqa.py`` and ``configs/nlquad.py``.

Importing them imports ml_collections only (no JAX).
"""
