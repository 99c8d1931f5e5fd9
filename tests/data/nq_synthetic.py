"""Synthetic Natural Questions pages (full format) from the SQuAD 2.0 subset (test helper).

A page = ``<H1> title </H1>`` then a window of ``paragraphs_per_page`` consecutive paragraphs of
one article, each ``<P> words </P>`` (a top-level candidate; more paragraphs than the article
has: its paragraphs again, in a cycle, for long pages). A SQuAD question of the page's
paragraph becomes one NQ example: answerable questions get a long answer (the paragraph) and a
short answer (the words overlapping the first SQuAD answer); unanswerable ones a null annotation.
``annotations`` copies the annotation ``num_annotations`` times (dev has 5 annotators; the
official metrics need 2 non-null votes).
"""
from __future__ import annotations

import gzip
import json
import re

from poi_jax.data.json_stream import load_json


def _words(text: str):
  return [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", text)]


def page_examples(squad_path: str, *, paragraphs_per_page: int = 3, max_examples: int = 100,
                  num_annotations: int = 5, articles=None, start_id: int = 1000,
                  questions_per_paragraph: int = 2):
  data = load_json(str(squad_path))["data"]
  out = []
  ex_id = start_id
  for a_i, article in enumerate(data):
    if articles is not None and a_i not in articles:
      continue
    paras = article["paragraphs"]
    for p_i, para in enumerate(paras):
      lo = max(0, min(p_i - paragraphs_per_page // 2, len(paras) - paragraphs_per_page))
      page = [paras[(lo + j) % len(paras)] for j in range(paragraphs_per_page)]
      tokens, cands, spans = [], [], {}
      byte = 0

      def add(tok, html):
        nonlocal byte
        b = len(tok.encode())
        tokens.append({"token": tok, "start_byte": byte, "end_byte": byte + b,
                       "html_token": html})
        byte += b + 1

      add("<H1>", True)
      for w in article["title"].replace("_", " ").split():
        add(w, False)
      add("</H1>", True)
      for k, pp in enumerate(page):
        start = len(tokens)
        add("<P>", True)
        word_index = []
        for s, e, w in _words(pp["context"]):
          word_index.append((s, e, len(tokens)))
          add(w, False)
        add("</P>", True)
        cands.append({"start_token": start, "end_token": len(tokens),
                      "start_byte": tokens[start]["start_byte"],
                      "end_byte": tokens[-1]["end_byte"], "top_level": True})
        spans[(lo + k) % len(paras)] = (len(cands) - 1, word_index)
      cand_i, word_index = spans[p_i]
      for qa in para["qas"][:questions_per_paragraph]:
        if len(out) >= max_examples:
          return out
        if qa.get("is_impossible") or not qa["answers"]:
          ann = {"long_answer": {"start_token": -1, "end_token": -1, "start_byte": -1,
                                 "end_byte": -1, "candidate_index": -1},
                 "short_answers": [], "yes_no_answer": "NONE"}
        else:
          ans = qa["answers"][0]
          a0, a1 = ans["answer_start"], ans["answer_start"] + len(ans["text"])
          toks = [t for s, e, t in word_index if s < a1 and e > a0]
          if not toks:
            continue
          c = cands[cand_i]
          ann = {"long_answer": dict(c, candidate_index=cand_i),
                 "short_answers": [{"start_token": toks[0], "end_token": toks[-1] + 1,
                                    "start_byte": tokens[toks[0]]["start_byte"],
                                    "end_byte": tokens[toks[-1]]["end_byte"]}],
                 "yes_no_answer": "NONE"}
          ann["long_answer"].pop("top_level")
        out.append({"example_id": ex_id, "question_text": qa["question"].strip().lower(),
                    "question_tokens": qa["question"].strip().lower().split(),
                    "document_title": article["title"], "document_tokens": tokens,
                    "long_answer_candidates": cands,
                    "annotations": [ann] * num_annotations})
        ex_id += 1
  return out


def write_jsonl_gz(path, examples):
  with gzip.open(path, "wt", encoding="utf-8") as f:
    for ex in examples:
      f.write(json.dumps(ex) + "\n")
  return str(path)
