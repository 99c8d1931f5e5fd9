"""Writes a small NarrativeQA-format set (qaps.csv + summaries.csv) from the shared SQuAD 2.0
paragraphs: each paragraph is a summary, its answerable questions the questions, the first two
gold answers the two free-form answers. Test helper."""
from __future__ import annotations

import csv
import pathlib

from poi_jax.data.json_stream import load_json


def write_narrativeqa(squad_path, out_dir, *, train_docs: int, valid_docs: int,
                      max_questions: int = 6) -> pathlib.Path:
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  data = load_json(str(squad_path))["data"]
  summaries, qaps = [], []
  n = 0
  for article in data:
    for para in article["paragraphs"]:
      qas = [qa for qa in para["qas"] if qa["answers"]][:max_questions]
      if len(qas) < 2:
        continue
      split = "train" if n < train_docs else "valid"
      doc_id = f"doc{n:03d}"
      summaries.append({"document_id": doc_id, "set": split, "summary": para["context"]})
      for qa in qas:
        texts = [a["text"] for a in qa["answers"]]
        qaps.append({"document_id": doc_id, "set": split, "question": qa["question"],
                     "answer1": texts[0], "answer2": texts[1] if len(texts) > 1 else texts[0]})
      n += 1
      if n == train_docs + valid_docs:
        break
    if n == train_docs + valid_docs:
      break
  for name, rows in (("summaries.csv", summaries), ("qaps.csv", qaps)):
    with open(out / name, "w", newline="", encoding="utf-8") as f:
      w = csv.DictWriter(f, fieldnames=list(rows[0]))
      w.writeheader()
      w.writerows(rows)
  return out
