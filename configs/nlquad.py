"""NLQuAD with QOPN (docs/qopn.md): the keys and variants of ``configs/newsqa.py``
(`poi_jax.config.qopn`); batch 12 and 3 reasoning blocks (the paper's best on NLQuAD), answers up
to 1024 tokens long (NLQuAD answers are whole paragraphs). Usage::

  python -m poi_jax.main --config=configs/nlquad.py:minilm --workdir=/tmp/nlquad \
      --mode=train_and_eval --config.data.train_file=NLQuAD/train.json \
      --config.data.eval_file=NLQuAD/val.json
"""
from poi_jax.config import qopn


def get_config(arg=None):
  return qopn.qopn_config("nlquad", arg, batch_size=12, num_blocks=3, max_answer_length=1024)
