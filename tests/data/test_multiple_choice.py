"""Multiple-choice features (DREAM, RACE) and accuracy."""
import numpy as np
import pytest
import transformers

from poi_jax.data import pos
from poi_jax.data.features.multiple_choice import build_choice_features
from poi_jax.data.readers import read_dream, read_race
from poi_jax.data.records import DataError
from poi_jax.eval.choice import choice_accuracy


# all-MiniLM-L6-v2's real vocabulary (minilm_dir: tests/conftest.py); under CI=true a skip for
# the lack of it fails the run.
pytestmark = pytest.mark.required


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
  return transformers.AutoTokenizer.from_pretrained(minilm_dir)


def test_dream_boundaries_and_truncation(tokenizer, data_dir):
  ex = list(read_dream(data_dir / "dream" / "dev.json"))[:12]
  f = build_choice_features(ex, tokenizer, max_seq_length=64, with_pos=True)
  a = f.arrays
  n, c, length = a["input_ids"].shape
  assert (n, c, length) == (12, 3, 64)
  sep = tokenizer.sep_token_id
  take = lambda k: np.take_along_axis(a["input_ids"], a[k][..., None], -1)[..., 0]
  assert (take("con_start") == sep).all() and (take("con_end") == sep).all()
  assert (a["p_end"] + 1 == a["con_start"]).all() and (a["q_start"] == a["p_end"] + 2).all()
  assert (a["q_end"] + 1 == a["con_end"]).all()
  # The question and option survive truncation: the second segment decodes to them.
  for i in range(3):
    second = a["input_ids"][0, i, a["q_start"][0, i]:a["q_end"][0, i] + 1]
    text = tokenizer.decode(second)
    assert text == tokenizer.decode(tokenizer(f"{ex[0].question} {ex[0].options[i]}",
                                              add_special_tokens=False)["input_ids"])
  assert ((a["pos_tags"] == 0) == (a["attention_mask"] == 0)).all()
  assert (a["pos_tags"][..., 0] == pos.SPECIAL_ID).all()
  assert list(a["labels"]) == [e.label for e in ex]


def test_race_accuracy_by_level(tokenizer, data_dir):
  ex = list(read_race(data_dir / "race" / "dev", "all"))
  ex = ex[:5] + ex[-5:]
  f = build_choice_features(ex, tokenizer, max_seq_length=64, with_pos=False)
  logits = np.zeros((10, 4))
  logits[np.arange(10), f.arrays["labels"]] = 1.0
  logits[0] = [0, 0, 0, 0]
  logits[0, (f.arrays["labels"][0] + 1) % 4] = 1.0  # one wrong, in "high"
  acc = choice_accuracy(logits, f.arrays["labels"], f.meta["levels"])
  assert acc["accuracy"] == 90.0 and acc["accuracy_high"] == 80.0
  assert acc["accuracy_middle"] == 100.0 and acc["total_middle"] == 5


def test_differing_option_counts_name_the_record(tokenizer, data_dir):
  ex = list(read_dream(data_dir / "dream" / "dev.json"))[:2]
  ex[1].options = ex[1].options[:2]
  with pytest.raises(DataError, match=rf"record '{ex[1].qid}', field 'options'"):
    build_choice_features(ex, tokenizer, max_seq_length=64, with_pos=False)
