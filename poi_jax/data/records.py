"""Typed example records; each keeps the file and the id it came from (for error messages)."""
from __future__ import annotations

import dataclasses


class DataError(ValueError):
  """Bad input data: the message names the file, the record id and the field."""

  def __init__(self, path, record, field: str, problem: str):
    super().__init__(f"{path}: record {record!r}, field {field!r}: {problem}")
    self.path, self.record, self.field = path, record, field


@dataclasses.dataclass
class SquadExample:
  qid: str
  question: str
  context: str
  answers: list[dict]  # [{"text", "answer_start"}]; the gold answers
  is_impossible: bool
  plausible_answers: list[dict]
  title: str
  source: str


@dataclasses.dataclass
class ChoiceExample:
  qid: str
  passage: str
  question: str
  options: list[str]
  label: int  # index of the correct option
  source: str
  level: str = ""  # RACE: high | middle
