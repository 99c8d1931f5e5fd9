"""Slow: all-MiniLM-L6-v2 + graph encoder on synthetic NQ pages beats the all-null baseline.

Train: pages of SQuAD 2.0 subset articles 0-9; held-out: articles 10-11 (other Wikipedia
articles). The all-null baseline (no long answer predicted) scores long F1 = 0. Run with
``python -m pytest -m slow tests/slow/test_nq_minilm.py``.
"""
from __future__ import annotations

import pytest

from configs import nq as nq_config
from poi_jax.train import loop
from tests.tasks.test_nq_task import write_pages


@pytest.mark.slow
def test_minilm_beats_the_all_null_baseline(tmp_path):
  train, dev = write_pages(tmp_path, train_articles=range(0, 10), eval_articles=range(10, 12),
                           n_train=400, n_eval=80)
  c = nq_config.get_config("minilm")
  with c.unlocked():
    c.data.train_file, c.data.eval_file = train, dev
    c.train.epochs = 2.0
    c.train.batch_size = 8
    c.data.max_seq_length = 192
    c.model.graph.max_sentences = 48
    c.model.graph.max_paragraphs = 24
  results = loop.train_and_evaluate(c, str(tmp_path / "work"))
  print("NQ minilm held-out:", {k: round(v, 4) for k, v in results.items()})
  null_long_f1 = 0.0  # no prediction: precision and recall 0
  assert results["long-best-threshold-f1"] > null_long_f1 + 0.2
  assert results["short-best-threshold-f1"] > 0.0
