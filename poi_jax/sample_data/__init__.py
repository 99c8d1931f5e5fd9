"""Small real data shipped inside the package, so a plain install runs the quickstarts offline.

``SQUAD2_SUBSET``: 12 Wikipedia articles of the official SQuAD 2.0 dev set (4,449 questions, 2,342
unanswerable), the SQuAD 2.0 JSON format compressed with xz (the readers open ``.xz`` files as
they are). Licence CC BY-SA 4.0, attribution in ``NOTICE`` beside it. ``configs/squad2.py:tiny``
and ``configs/squad1.py:minilm_cpu`` read it; any ``--config.data.*_file`` may point at it.
"""
from __future__ import annotations

import importlib.resources
import os

# Each article's question count in file order: the configs split by article (train on the first
# ones, evaluate on the rest) so that no paragraph is on both sides.
SQUAD2_ARTICLES = (("Normans", 208, 96), ("Computational_complexity_theory", 418, 197),
                   ("Huguenot", 424, 217), ("Steam_engine", 444, 215),
                   ("1973_oil_crisis", 255, 106), ("European_Union_law", 421, 231),
                   ("Packet_switching", 373, 104), ("Harvard_University", 262, 112),
                   ("Yuan_dynasty", 445, 228), ("Immune_system", 458, 215),
                   ("Scottish_Parliament", 357, 189), ("Islamism", 384, 197))
"""(title, questions, answerable questions) of each article of `SQUAD2_SUBSET`, in order."""


def path(name: str) -> str:
  """The file ``name`` of this package as a local path (plain and editable installs unpack
  package data as files, which the readers open by name)."""
  return os.fspath(importlib.resources.files(__name__) / name)


SQUAD2_SUBSET = path("squad2-dev-subset.json.xz")
