"""How many POS tags change when NLTK tags the cased text (``data.pos_lowercase=False``, the
default) instead of the lowercased text (``True``, the released pipeline), on the SQuAD 2.0 subset.

  NLTK_DATA=../shared/data/nltk_data python bench/pos_case.py \
      [--squad=../shared/data/squad2/squad2-dev-subset.json] [--tokenizer=minilm]

Prints, for the questions and the contexts (each context once): NLTK words, the share tagged
NNP/NNPS each way, and the words whose tag changes (compared where the two tokenisations give the
same words); then the same at the model's input: the sub-token tag ids of the extractive features
(``offsets`` alignment, one window per context) that differ. Not a test
(`tests/data/test_pos.py` checks the option on one sentence).
"""
from __future__ import annotations

import collections
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: configs/ and poi_jax/ from this checkout

from bench.pos_alignment import squad_args  # noqa: E402 (after the path set-up)

PROPER = ("NNP", "NNPS")


def word_table(texts, tag_words) -> str:
  n = collections.Counter()
  for text in texts:
    low, cased = tag_words(text, lowercase=True), tag_words(text, lowercase=False)
    n["words_lower"] += len(low)
    n["words_cased"] += len(cased)
    n["proper_lower"] += sum(t in PROPER for _, t in low)
    n["proper_cased"] += sum(t in PROPER for _, t in cased)
    if [w.lower() for w, _ in cased] != [w for w, _ in low]:
      n["texts_tokenised_differently"] += 1
      continue
    n["compared"] += len(low)
    n["changed"] += sum(a != b for (_, a), (_, b) in zip(low, cased))
  return (f"  texts {len(texts)}, NLTK words {n['words_cased']}\n"
          f"  NNP/NNPS share: lowercased {100 * n['proper_lower'] / n['words_lower']:.1f}%, "
          f"cased {100 * n['proper_cased'] / n['words_cased']:.1f}%\n"
          f"  tags changed: {n['changed']} of {n['compared']} words "
          f"({100 * n['changed'] / max(n['compared'], 1):.1f}%; "
          f"{n['texts_tokenised_differently']} texts tokenised differently, not compared)")


def main() -> None:
  args = squad_args(__doc__.splitlines()[0])
  import numpy as np
  from transformers.utils import logging as hf_logging

  from poi_jax.data.features.extractive import build_extractive_features
  from poi_jax.data.pos import tag_words
  from poi_jax.data.readers import read_squad
  from poi_jax.models.encoders.load import load_tokenizer, resolve_checkpoint
  hf_logging.set_verbosity_error()
  examples = list(read_squad(args.squad))
  contexts = list(dict.fromkeys(ex.context for ex in examples))
  print(f"POS tags on cased vs lowercased text, {args.squad}")
  print(f"[questions]\n{word_table([ex.question for ex in examples], tag_words)}")
  print(f"[contexts]\n{word_table(contexts, tag_words)}")
  tokenizer = load_tokenizer(resolve_checkpoint(args.tokenizer))
  firsts = list({ex.context: ex for ex in reversed(examples)}.values())  # one question/context
  ids = {}
  for lowercase in (True, False):
    f = build_extractive_features(firsts, tokenizer, max_seq_length=384, doc_stride=128,
                                  max_query_length=64, is_training=False, with_pos=True,
                                  pos_lowercase=lowercase)
    ids[lowercase] = f.arrays["pos_tags"]
  real = ids[True] > 0
  changed = int((ids[True] != ids[False])[real].sum())
  print(f"[features, tokenizer {args.tokenizer}: {len(firsts)} questions, "
        f"{len(ids[True])} windows of 384]\n  sub-token tag ids changed: {changed} of "
        f"{int(real.sum())} ({100 * changed / real.sum():.1f}%)")


if __name__ == "__main__":
  main()
