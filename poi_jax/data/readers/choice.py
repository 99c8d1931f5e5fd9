"""Multiple-choice readers: RACE (a tree of per-passage JSON files) and DREAM (one JSON list)."""
from __future__ import annotations

import glob
import os

from poi_jax.data.records import ChoiceExample, DataError, load_json

LETTERS = "ABCDEFGH"


def read_race(root: str, level: str = "all") -> list[ChoiceExample]:
  """RACE ``<root>/{high,middle}/*.txt`` (``article``, ``questions``, ``options``, ``answers``
  as letters, ``id``); ``level`` = all | high | middle."""
  if level not in ("all", "high", "middle"):
    raise ValueError(f"RACE level must be all, high or middle, got {level!r}")
  levels = ("high", "middle") if level == "all" else (level,)
  files = []
  for lv in levels:
    found = sorted(glob.glob(os.path.join(root, lv, "*.txt")))
    files += [(lv, f) for f in found]
  if not files:
    raise DataError(root, None, "<dir>", f"no RACE files under {root}/{{{','.join(levels)}}}")
  out = []
  for lv, path in files:
    d = load_json(path)
    pid = d.get("id", os.path.basename(path))
    for field in ("article", "questions", "options", "answers"):
      if field not in d:
        raise DataError(path, pid, field, "missing")
    if not (len(d["questions"]) == len(d["options"]) == len(d["answers"])):
      raise DataError(path, pid, "questions", "questions, options and answers differ in count")
    for i, (q, opts, ans) in enumerate(zip(d["questions"], d["options"], d["answers"])):
      rid = f"{pid}-{i}"
      if ans not in LETTERS[:len(opts)]:
        raise DataError(path, rid, "answers", f"{ans!r} is not one of the {len(opts)} options")
      out.append(ChoiceExample(rid, d["article"], q, list(opts), LETTERS.index(ans), path, lv))
  return out


def read_dream(path: str) -> list[ChoiceExample]:
  """DREAM ``[[dialogue_lines, [{question, choice, answer}], id], ...]``; the dialogue lines
  (with their ``M:``/``W:`` speakers) are joined with newlines into the passage."""
  path = os.fspath(path)
  data = load_json(path)
  if not isinstance(data, list):
    raise DataError(path, None, None, "expected the DREAM list of dialogues")
  out = []
  for n, item in enumerate(data):
    if not (isinstance(item, list) and len(item) == 3):
      raise DataError(path, f"#{n}", None, "each record is [dialogue_lines, questions, id]")
    lines, questions, did = item
    for i, q in enumerate(questions):
      rid = f"{did}-{i}"
      for field in ("question", "choice", "answer"):
        if field not in q:
          raise DataError(path, rid, field, "missing")
      if q["answer"] not in q["choice"]:
        raise DataError(path, rid, "answer", f"{q['answer']!r} is not among the choices")
      out.append(ChoiceExample(rid, "\n".join(lines), q["question"], list(q["choice"]),
                               q["choice"].index(q["answer"]), path))
  return out
