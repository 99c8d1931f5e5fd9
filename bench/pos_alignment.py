"""How often the `offsets` and `original` POS alignments disagree on the SQuAD 2.0 subset, and why.

  NLTK_DATA=../shared/data/nltk_data python bench/pos_alignment.py \
      [--squad=../shared/data/squad2/squad2-dev-subset.json] [--tokenizer=minilm]

Prints, for the questions, the contexts and both, the fraction of sub-tokens whose tag differs and
the causes (see `poi_jax.data.pos_agreement`). Not a test (`tests/data/test_pos_agreement.py`
runs the function on a few examples).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: configs/ and poi_jax/ from this checkout


def squad_args(description: str) -> argparse.Namespace:
  """``--squad`` and ``--tokenizer`` (shared by the POS benchmarks); sets NLTK_DATA to
  ../shared/data/nltk_data unless set."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--squad",
                      default=str(ROOT.parent / "shared/data/squad2/squad2-dev-subset.json"))
  parser.add_argument("--tokenizer", default="minilm",
                      help="minilm, a HuggingFace tokenizer directory or hub name")
  args = parser.parse_args()
  os.environ.setdefault("NLTK_DATA", str(ROOT.parent / "shared/data/nltk_data"))
  return args


def main() -> None:
  args = squad_args(__doc__.splitlines()[0])
  from transformers.utils import logging as hf_logging

  from poi_jax.data.pos_agreement import squad_agreement
  from poi_jax.data.readers import read_squad
  from poi_jax.models.encoders.load import load_tokenizer, resolve_checkpoint
  hf_logging.set_verbosity_error()  # long contexts are tokenised whole on purpose
  tokenizer = load_tokenizer(resolve_checkpoint(args.tokenizer))
  result = squad_agreement(list(read_squad(args.squad)), tokenizer)
  print(f"POS alignment offsets vs original, {args.squad}, tokenizer {args.tokenizer} "
        f"({type(tokenizer).__name__})")
  for name in ("question", "context", "all"):
    print(f"\n[{name}]\n{result[name].table()}")


if __name__ == "__main__":
  main()
