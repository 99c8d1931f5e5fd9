"""Readers of SQuAD 1.1/2.0, RACE and DREAM in their official formats."""
from poi_jax.data.readers.choice import read_dream, read_race
from poi_jax.data.readers.squad import read_squad
