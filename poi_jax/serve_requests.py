"""HTTP request bodies -> records for `poi_jax.serve`: one JSON object or a list of them, each
field checked, and `InputError` (the HTTP status, the field, the item) for what is wrong."""
from __future__ import annotations

DEFAULT_TOP_K = 5


class InputError(ValueError):
  """A bad request: its HTTP status, the field and the item (index in a list request)."""

  def __init__(self, status: int, field: str, problem: str, item: int | None = None):
    where = f"item {item}: " if item is not None else ""
    super().__init__(f"{where}field {field!r}: {problem}")
    self.status, self.field, self.problem, self.item = status, field, problem, item

  def body(self) -> dict:
    return {"error": str(self), "field": self.field, "item": self.item}


def _text(obj: dict, field: str, item, *alternatives: str) -> str:
  for name in (field, *alternatives):
    if name in obj:
      value = obj[name]
      if not isinstance(value, str):
        raise InputError(422, name, f"must be a string, got {type(value).__name__}", item)
      if not value.strip():
        raise InputError(422, name, "must not be empty", item)
      return value
  raise InputError(422, field, "missing", item)


def _items(body) -> tuple[list[dict], bool]:
  """``(objects, single)``: one JSON object or a non-empty list of them."""
  if isinstance(body, dict):
    return [body], True
  if isinstance(body, list) and body:
    for i, o in enumerate(body):
      if not isinstance(o, dict):
        raise InputError(422, "<body>", f"expected a JSON object, got {type(o).__name__}", i)
    return body, False
  raise InputError(422, "<body>", "expected a JSON object or a non-empty list of objects")


def _options(obj: dict, item) -> tuple[bool, float | None, int]:
  explain = obj.get("explain", False)
  if not isinstance(explain, bool):
    raise InputError(422, "explain", f"must be true or false, got {explain!r}", item)
  delta = obj.get("null_threshold")
  if delta is not None and (isinstance(delta, bool) or not isinstance(delta, (int, float))):
    raise InputError(422, "null_threshold", f"must be a number, got {delta!r}", item)
  top_k = obj.get("top_k", DEFAULT_TOP_K)
  if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
    raise InputError(422, "top_k", f"must be a positive integer, got {top_k!r}", item)
  return explain, None if delta is None else float(delta), top_k


def parse_answer(obj: dict, item):
  from poi_jax.data.records import SquadExample
  question, context = _text(obj, "question", item), _text(obj, "context", item)
  return SquadExample("0", question, context, [], False, [], "", "<serve>"), _options(obj, item)


def parse_choose(obj: dict, item):
  from poi_jax.data.records import ChoiceExample
  question = _text(obj, "question", item)
  passage = _text(obj, "passage", item, "context")
  options = obj.get("options")
  if not isinstance(options, list) or len(options) < 2:
    raise InputError(422, "options", f"must be a list of at least 2 strings, got {options!r}",
                     item)
  for o in options:
    if not isinstance(o, str):
      raise InputError(422, "options", f"holds {o!r}, not a string", item)
  return ChoiceExample("0", passage, question, list(options), 0, "<serve>"), (False, None, 0)
