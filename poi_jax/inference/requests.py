"""Untrusted JSON questions -> records: the HTTP request bodies of `poi_jax.serve` (one JSON object
or a list of them) and the input lines of `poi_jax.predict`. Each field is checked, and what is
wrong is an `InputError` (the HTTP status, the field, the item).

Any bytes give a record or a clear error, in time and memory linear in their length (issue 35):

* `loads` decodes strict UTF-8 (a leading byte-order mark is ignored) and refuses nesting deeper
  than `MAX_DEPTH` arrays/objects before parsing, naming the field that holds the byte or the
  nesting (the standard library's parser would recurse once per level: a ``RecursionError`` or,
  for a 5,001-digit integer, a bare ``ValueError``, neither naming anything);
* numbers Python cannot use as they are (integers of more than `MAX_NUMBER_CHARS` characters,
  floats beyond the float range such as ``1e400``, ``NaN`` and ``Infinity``) are parsed into an
  `Unusable` placeholder, never computed with: a field the server reads refuses it by name, a
  field it does not read ignores it, as it ignores any other value there;
* text fields follow `poi_jax.inference.reader.text_problem` (a non-empty string encodable as
  UTF-8: a lone surrogate such as ``"\\ud800"`` is valid JSON but crashed the tokenizer).
"""
from __future__ import annotations

import json
import math
import re

import numpy as np

DEFAULT_TOP_K = 5
# Arrays/objects nested in one body or line. A request needs 3 (a list of objects holding an
# options list); deeper is refused before parsing, so that nothing recurses on client input.
MAX_DEPTH = 32
# Characters of one number literal. Longer integers are not converted (Python refuses over 4,300
# digits with a bare ValueError, and converting is quadratic in the length); no field needs more.
MAX_NUMBER_CHARS = 100
# Options of one multiple-choice question (RACE and DREAM have 3-4): every option count is one
# more compiled shape, and the features grow with it.
MAX_OPTIONS = 16


class InputError(ValueError):
  """A bad request: its HTTP status, the field and the item (index in a list request)."""

  def __init__(self, status: int, field: str, problem: str, item: int | None = None):
    where = f"item {item}: " if item is not None else ""
    super().__init__(f"{where}field {field!r}: {problem}")
    self.status, self.field, self.problem, self.item = status, field, problem, item

  def body(self) -> dict:
    return {"error": str(self), "field": self.field, "item": self.item}


class JSONProblem(ValueError):
  """Bytes that are not usable JSON: ``path`` (the keys and list indices down to where the
  problem is; empty: the whole text), the problem, and the HTTP status it deserves (400 not
  UTF-8 or not JSON, 422 nested too deep)."""

  def __init__(self, path: list, problem: str, status: int):
    super().__init__(problem)
    self.path, self.problem, self.status = path, problem, status


class Unusable:
  """A JSON number left unconverted (`loads`): its literal and why. Fields that need a number
  or a string refuse it with this description; it is never computed with."""

  def __init__(self, literal: str, why: str):
    self.literal, self.why = literal, why

  def __repr__(self) -> str:
    text = self.literal
    return f"{text if len(text) <= 24 else f'{text[:12]}...{text[-6:]}'} ({self.why})"


def brief(value) -> str:
  """``value`` for an error message: its repr, cut to 60 characters (a body can put a megabyte
  where a field belongs), naming its type when that is not plain. Lone surrogates stay
  escaped (repr escapes what is not printable), so the message is always valid UTF-8."""
  if isinstance(value, Unusable):
    return repr(value)
  text = repr(value)
  if len(text) > 60:
    text = f"{text[:50]}... ({len(text):,} characters)"
  if isinstance(value, (str, int, float, bool)) or value is None:
    return text
  return f"{type(value).__name__} {text}"


def field_name(key) -> str:
  """A client's key for an error body: at most 60 characters, always valid UTF-8."""
  name = str(key).encode("utf-8", "backslashreplace").decode("utf-8")
  return name if len(name) <= 60 else f"{name[:57]}..."


# ------------------------------------------------------------------------------------------------
# Bounded JSON
# ------------------------------------------------------------------------------------------------
# A string (to its closing quote, or to the end of an unterminated one: each character is read
# once, whatever the quotes), or a structural character. Numbers and literals are not tokens:
# the walk below needs only the nesting and the keys.
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"?'
_TOKEN = re.compile(_STRING + r'|[\[\]{}:,]', re.S)
_STRINGS = re.compile(_STRING, re.S)
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def _deepest(text: str) -> int:
  """How deep the arrays/objects of JSON ``text`` nest, at C speed (strings cut out, then a
  running sum of openings and closings), so that only bodies past the limit pay for `_walk`,
  which names the field. Bytes of multi-byte characters never equal a bracket."""
  skeleton = np.frombuffer(_STRINGS.sub("", text).encode("utf-8", "surrogatepass"), np.uint8)
  steps = np.isin(skeleton, _OPEN).astype(np.int32) - np.isin(skeleton, _CLOSE)
  return int(np.cumsum(steps).max(initial=0))


class _TooDeep(Exception):
  """`_walk` met an array/object past the limit: ``path`` leads to it."""

  def __init__(self, path: list):
    super().__init__()
    self.path = path


def _walk(text: str, max_depth: int, at: int | None = None) -> list | None:
  """Follows the arrays and objects of JSON ``text`` without building anything: raises
  `_TooDeep` (with the path) when they nest deeper than ``max_depth``; with ``at`` (a character
  offset) returns the path of keys and list indices that holds that character. Linear time,
  bounded memory (at most ``max_depth`` open containers), for any text, JSON or not."""
  stack: list[list] = []  # per open container: [is_object, key (None before its ':'), index]
  last = None  # the last string token, a key if a ':' follows it

  def path() -> list:
    out = []
    for is_object, key, index in stack:
      if is_object and key is None:
        break
      out.append(key if is_object else index)
    return out

  for m in _TOKEN.finditer(text):
    if at is not None and m.end() > at:
      return path()
    tok = m.group()
    if tok in "[{":
      if len(stack) >= max_depth:
        raise _TooDeep(path())
      stack.append([tok == "{", None, 0])
    elif tok in "]}":
      if stack:
        stack.pop()
    elif tok == ",":
      if stack:
        if stack[-1][0]:
          stack[-1][1] = None
        else:
          stack[-1][2] += 1
    elif tok == ":":
      if stack and stack[-1][0] and last is not None:
        try:
          stack[-1][1] = json.loads(last)
        except ValueError:  # a broken key: its text as it is
          stack[-1][1] = last.strip('"')
    if tok[0] == '"':
      last = tok
    elif tok != ":":
      last = None
  return path() if at is not None else None


def _int(literal: str):
  """`json.loads`' integers: converted up to `MAX_NUMBER_CHARS` characters, else `Unusable`."""
  if len(literal) > MAX_NUMBER_CHARS:
    return Unusable(literal, f"an integer of {len(literal.lstrip('-')):,} digits, more than "
                             f"{MAX_NUMBER_CHARS}")
  return int(literal)


def _float(literal: str):
  """`json.loads`' other numbers: a finite float, else (too long, ``1e400``) `Unusable`."""
  if len(literal) > MAX_NUMBER_CHARS:
    return Unusable(literal, f"a number of {len(literal):,} characters, more than "
                             f"{MAX_NUMBER_CHARS}")
  value = float(literal)
  return value if math.isfinite(value) else Unusable(literal, "beyond the float range")


def _constant(literal: str):
  """``NaN``, ``Infinity``, ``-Infinity``: Python's extension of JSON, never a number here."""
  return Unusable(literal, "not a JSON number")


def loads(raw: bytes | str, *, max_depth: int = MAX_DEPTH):
  """JSON ``raw`` (bytes: strict UTF-8, a leading byte-order mark ignored) -> Python values, or
  `JSONProblem` naming where it fails: bytes that are not UTF-8, nesting deeper than
  ``max_depth``, text that is not JSON. Numbers Python cannot use become `Unusable`."""
  if isinstance(raw, (bytes, bytearray)):
    try:
      text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
      # The path of the bad byte: decoded with every bad byte kept as one character, so that
      # character offsets match those of the text up to it.
      loose = bytes(raw).decode("utf-8", "surrogateescape")
      where = len(bytes(raw[:e.start]).decode("utf-8"))
      raise JSONProblem(_path_at(loose, where, max_depth), f"not UTF-8: byte "
                        f"0x{raw[e.start]:02x} at byte {e.start + 1} ({e.reason})", 400) from None
  else:
    text = raw
  text = text.removeprefix("\ufeff")
  # Fewer brackets than the limit cannot nest past it, and `_deepest` measures at C speed: only
  # a body past the limit pays for the walk in Python (which names the field).
  if text.count("[") + text.count("{") > max_depth and _deepest(text) > max_depth:
    try:
      _walk(text, max_depth)
    except _TooDeep as e:
      raise JSONProblem(e.path, f"nested deeper than {max_depth} arrays/objects", 422) from None
  try:
    return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
  except json.JSONDecodeError as e:
    raise JSONProblem(_path_at(text, e.pos, max_depth), f"not JSON ({e})", 400) from None
  except RecursionError:  # unreachable after the walk; kept so that no input can escape
    raise JSONProblem([], f"nested deeper than {max_depth} arrays/objects", 422) from None


def _path_at(text: str, at: int, max_depth: int) -> list:
  """The keys and indices down to character ``at`` of ``text`` (`_walk`), for naming a field."""
  try:
    return _walk(text, max_depth, at) or []
  except _TooDeep as e:
    return e.path


# ------------------------------------------------------------------------------------------------
# Request bodies
# ------------------------------------------------------------------------------------------------
def body_error(e: JSONProblem, status: int | None = None) -> InputError:
  """The `InputError` of a request body's `JSONProblem`: the item and field its path names."""
  item, path = None, list(e.path)
  if path and isinstance(path[0], int):
    item = path.pop(0)
  field = field_name(path[0]) if path and isinstance(path[0], str) else "<body>"
  return InputError(status or e.status, field, e.problem, item)


def _text(obj: dict, field: str, item, *alternatives: str, allow_empty: bool = False) -> str:
  """``obj[field]`` (or the first alternative present), a text `text_problem` accepts."""
  from poi_jax.inference.reader import text_problem  # (JAX and Flax: not on this module's import)
  for name in (field, *alternatives):
    if name in obj:
      problem = text_problem(obj[name], allow_empty=allow_empty)
      if problem:
        raise InputError(422, name, problem, item)
      return obj[name]
  raise InputError(422, field, "missing", item)


def _items(body, max_items: int | None = None) -> tuple[list[dict], bool]:
  """``(objects, single)``: one JSON object or a non-empty list of them; a list longer than
  ``max_items`` (the queue's size: it could never be queued) is a 413 naming the limit."""
  if isinstance(body, dict):
    return [body], True
  if isinstance(body, list) and body:
    if max_items is not None and len(body) > max_items:
      raise InputError(413, "<body>", f"{len(body):,} questions in one request, more than the "
                       f"queue holds (--max_queue={max_items}): send at most {max_items} a "
                       f"request")
    for i, o in enumerate(body):
      if not isinstance(o, dict):
        raise InputError(422, "<body>", f"expected a JSON object, got {brief(o)}", i)
    return body, False
  raise InputError(422, "<body>", f"expected a JSON object or a non-empty list of objects, "
                                  f"got {brief(body)}")


def _options(obj: dict, item) -> tuple[bool, float | None, int]:
  explain = obj.get("explain", False)
  if not isinstance(explain, bool):
    raise InputError(422, "explain", f"must be true or false, got {brief(explain)}", item)
  delta = obj.get("null_threshold")
  # Unusable (1e400, NaN, a 500-digit integer) is neither int nor float: refused here, so that
  # no infinity reaches the decoder or the JSON answer.
  if delta is not None and (isinstance(delta, bool) or not isinstance(delta, (int, float))):
    raise InputError(422, "null_threshold", f"must be a finite number, got {brief(delta)}", item)
  top_k = obj.get("top_k", DEFAULT_TOP_K)
  if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
    raise InputError(422, "top_k", f"must be a positive integer, got {brief(top_k)}", item)
  return explain, None if delta is None else float(delta), top_k


def parse_answer(obj: dict, item):
  """One `/v1/answer` item -> ``(SquadExample, (explain, null_threshold, top_k))``."""
  from poi_jax.data.records import SquadExample
  question, context = _text(obj, "question", item), _text(obj, "context", item)
  return SquadExample("0", question, context, [], False, [], "", "<serve>"), _options(obj, item)


def check_options(options, item, max_options: int | None = MAX_OPTIONS) -> list[str]:
  """A multiple-choice question's options: a list of 2 to ``max_options`` (None: any number)
  strings encodable as UTF-8 (an empty option is allowed, as in the data)."""
  from poi_jax.inference.reader import text_problem  # (JAX and Flax: not on this module's import)
  most = max_options if max_options is not None else float("inf")
  if not isinstance(options, list) or not 2 <= len(options) <= most:
    wanted = f"2 to {max_options}" if max_options is not None else "at least 2"
    shown = f"{len(options)} options" if isinstance(options, list) else brief(options)
    raise InputError(422, "options", f"must be a list of {wanted} strings, got {shown}", item)
  for k, o in enumerate(options):
    problem = text_problem(o, allow_empty=True)
    if problem:
      raise InputError(422, "options", f"option {k} {problem}", item)
  return list(options)


def parse_choose(obj: dict, item):
  """One `/v1/choose` item -> ``(ChoiceExample, (False, None, 0))``."""
  from poi_jax.data.records import ChoiceExample
  question = _text(obj, "question", item)
  passage = _text(obj, "passage", item, "context")
  if "options" not in obj:
    raise InputError(422, "options", "missing", item)
  options = check_options(obj["options"], item)
  return ChoiceExample("0", passage, question, options, 0, "<serve>"), (False, None, 0)
