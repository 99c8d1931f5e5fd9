"""How often [CLS] gets co-attention score 0 (so the SQuAD 2.0 null score ``s_0 + e_0`` is the
span head's bias alone, with no gradient through [CLS]), on the SQuAD 2.0 subset with the
pretrained all-MiniLM-L6-v2 encoder (no fine-tuning).

  NLTK_DATA=../shared/data/nltk_data python bench/poi_cls_null.py \\
      [--squad=../shared/data/squad2/squad2-dev-subset.json] [--questions=600]

Windows as ``configs/squad2.py:minilm`` builds them (256 tokens, overlap 128, question 64); the
co-attention of ``model.coattention`` (paper, 3 turns, each strategy; and the released variant).
[CLS] (position 0) lies in domain A (the question side); its integrated score is 0 exactly when
it is the least similar token of A to B's pooled evidence at every turn (min-max scaling). Prints
the share of windows where that happens, and where [CLS] is A's minimum at the first turn.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--squad",
                      default=str(ROOT.parent / "shared/data/squad2/squad2-dev-subset.json"))
  parser.add_argument("--questions", type=int, default=600, help="the first N questions")
  parser.add_argument("--batch", type=int, default=32)
  args = parser.parse_args()
  os.environ.setdefault("NLTK_DATA", str(ROOT.parent / "shared/data/nltk_data"))
  import jax
  import jax.numpy as jnp
  import numpy as np

  from poi_jax.data.features.extractive import build_extractive_features
  from poi_jax.data.readers import read_squad
  from poi_jax.layers import poi_coattention as coatt
  from poi_jax.models.encoders.load import load_pretrained

  encoder, tokenizer, _ = load_pretrained("minilm")
  examples = list(read_squad(args.squad))[:args.questions]
  f = build_extractive_features(examples, tokenizer, max_seq_length=256, doc_stride=128,
                                max_query_length=64, is_training=False, with_pos=False)
  a = f.arrays

  @jax.jit
  def scores(ids, mask, types, cs, ce):
    h = encoder(ids, mask, types, deterministic=True).last_hidden_state
    out = {s: coatt.paper_coattention(h, cs, ce, turns=3, strategy=s)[0][:, 0]
           for s in coatt.STRATEGIES}
    out["released"] = coatt.released_coattention(h, cs, ce)[0][:, 0]
    m_a, m_b = coatt.domain_masks(cs, ce, h.shape[1])
    e = h.astype(jnp.float32)
    ce_b = jnp.max(jnp.where(m_b[..., None] > 0, e, -jnp.inf), axis=1)  # turn 1: B's evidence
    s = coatt.cosine(e, ce_b)
    s_a = jnp.where(m_a > 0, s, jnp.inf)
    out["cls_is_min_turn1"] = (jnp.argmin(s_a, axis=1) == 0).astype(jnp.float32)
    return out

  n = len(a["input_ids"])
  got = {}
  for i in range(0, n, args.batch):
    sl = slice(i, min(i + args.batch, n))
    out = scores(*(jnp.asarray(a[k][sl]) for k in ("input_ids", "attention_mask",
                                                   "token_type_ids", "con_start", "con_end")))
    for k, v in out.items():
      got.setdefault(k, []).append(np.asarray(v))
  got = {k: np.concatenate(v) for k, v in got.items()}
  print(f"{args.squad}: first {len(examples)} questions, {n} windows of 256 (minilm, "
        f"pretrained, no fine-tuning)")
  share = 100 * got["cls_is_min_turn1"].mean()
  print(f"  [CLS] least similar of its domain at turn 1: {share:.1f}%")
  for k in (*coatt.STRATEGIES, "released"):
    zero = got[k] == 0
    print(f"  {k:>10}: [CLS] score 0 (null score = bias) in {zero.sum()} windows "
          f"({100 * zero.mean():.1f}%); median [CLS] score {np.median(got[k]):.3f}")


if __name__ == "__main__":
  main()
