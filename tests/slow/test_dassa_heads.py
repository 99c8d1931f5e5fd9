"""Slow: QANet on the NarrativeQA-format set written from SQuAD 2.0 paragraphs, with the offline
DASSA heads (lexicon connectives + 3-sentence spans in blocks 1, 3, 5) vs the same model with
only "No" heads (Table 2 baseline). Prints both scores; asserts that both learn (well above the
untrained model) rather than a ranking, which a set this small cannot settle."""
from __future__ import annotations

import json

import pytest

from configs import narrativeqa as nqa_config
from poi_jax.train import loop
from tests.tasks.narrativeqa_data import write_narrativeqa


def _run(tmp_path, nqa_dir, heads, steps):
  c = nqa_config.get_config("tiny")
  with c.unlocked():
    c.data.train_file = c.data.eval_file = str(nqa_dir)
    c.model.dassa.heads = heads
    c.model.qanet.hidden, c.model.qanet.num_heads = 64, 8
    c.train.max_steps, c.train.batch_size, c.train.log_every = steps, 8, 50
    c.train.save_every = 100000
    c.data.narrativeqa.train_passage_tokens = c.data.narrativeqa.eval_passage_tokens = 400
  workdir = tmp_path / f"{heads}-{steps}"
  return loop.train_and_evaluate(c, str(workdir))


@pytest.mark.slow
def test_dassa_heads_on_vs_off(tmp_path, data_dir):
  nqa_dir = write_narrativeqa(data_dir / "squad2" / "squad2-dev-subset.json", tmp_path / "data",
                              train_docs=200, valid_docs=40)
  scores = {heads: _run(tmp_path, nqa_dir, heads, 1500) for heads in ("offline", "baseline")}
  untrained = _run(tmp_path, nqa_dir, "baseline", 1)
  print(json.dumps({"untrained": untrained, **scores}, indent=1))
  for heads, s in scores.items():
    assert s["rouge_l"] > untrained["rouge_l"] + 5.0, (heads, s, untrained)
