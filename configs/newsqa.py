"""NewsQA with QOPN (the Question-Oriented Propagation Network; docs/qopn.md).

Variants:

* (none) / ``paper``: the paper's settings: RoBERTa-large (hub), at most 6 segments of a
  512-token window, Adam lr 3e-5 (no weight decay), 6 epochs, warmup 10%, batch 32, 4 reasoning
  blocks (the best on NewsQA, Fig. 2), 16 heads (the encoder's).
* ``roberta_base``: the same on RoBERTa-base (the paper's "QOPN (RoBERTa-base)" row).
* ``minilm``: the real all-MiniLM-L6-v2 encoder (offline), 256-token windows.
* ``tiny``: a small random ALBERT with the MiniLM tokenizer, 128-token windows, a few steps (CPU
  tests and smoke runs).

The ``model.qopn`` and ``data.qopn`` sections and the variants are `poi_jax.config.qopn`'s
(shared with ``configs/nlquad.py``). Usage::

  python -m poi_jax.main --config=configs/newsqa.py:tiny --workdir=/tmp/newsqa \
      --mode=train_and_eval --config.data.train_file=combined-newsqa-data-v1.json \
      --config.data.eval_file=combined-newsqa-data-v1.json
"""
from poi_jax.config import qopn


def get_config(arg=None):
  return qopn.qopn_config("newsqa", arg, batch_size=32, num_blocks=4, max_answer_length=64)
