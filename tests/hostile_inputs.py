"""Seeded hostile questions for the fuzz tests of the server (tests/test_serve.py) and of the
predict CLI's lines (tests/test_reader.py), issue 35.

`Fuzzer` mutates one good question into a request body (or one JSON line) of a class:

* ``depth``: arrays/objects nested 5 to 100,000 deep, in a field, an ignored field or the top;
* ``number``: number literals of 101 to 20,000 characters (integers, negatives, fractions,
  exponents) where the server reads a number, a text or nothing;
* ``nonfinite``: ``1e400``, ``-1e400``, ``1E+999``, ``NaN``, ``Infinity`` and finite edge values
  (``1e-400``, ``1e308``, ``-0.0``, a subnormal);
* ``encoding``: invalid UTF-8 bytes inside a string (stray continuation bytes, overlong forms,
  an encoded surrogate, past U+10FFFF, truncated sequences), a raw NUL byte, an escaped
  ``\\u0000`` (valid), UTF-16, a truncated body, a UTF-8 byte-order mark (valid);
* ``surrogate``: lone surrogates (``\\ud800``, ``\\udfff``, reversed pairs) in a text, an ignored
  field, a key; a valid pair (an emoji) is valid;
* ``type``: each field the server reads with each wrong type (null, booleans, numbers, lists,
  objects, empty or blank strings), a missing field, a body that is not an object;
* ``length``: lists longer than the queue, passages over the window limit, bodies over the size
  limit, long ignored lists and long ids.

Each `Case` says what must come back: the field the error names (None: the question must be
answered; ``"*"``: any field, e.g. a body cut at a random byte), the item of a list request,
and for some the status. The generator is deterministic for a seed, so a failing case is
reproduced by its class and seed (both in the assertion message).
"""
from __future__ import annotations

import dataclasses
import json
import random

CLASSES = ("depth", "number", "nonfinite", "encoding", "surrogate", "type", "length")
# The server's and the predict CLI's limits (poi_jax.inference.requests): the cases straddle them.
MAX_DEPTH = 32
MAX_NUMBER_CHARS = 100
BAD_UTF8 = (b"\xff", b"\xfe", b"\x80", b"\xbf\xbf", b"\xc3\x28", b"\xc0\xaf", b"\xe0\x80\xaf",
            b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80",
            b"\xe2\x82", b"\xf0\x9f\x98")
SURROGATES = ("\\ud800", "\\udfff", "\\udc00\\ud800", "\\ud83d", "a\\ud800b", "\\udbff",
              "\\ud83d\\ude00")  # the last: a valid pair (U+1F600)
NONFINITE = ("1e400", "-1e400", "1E+999", "NaN", "Infinity", "-Infinity")
FINITE_EDGES = ("1e-400", "1e308", "-0.0", "2.5e-320")
WRONG_TYPES = ("null", "true", "false", "1", "-3", "0", "1.5", "[]", "{}", '["a"]', '""',
               '"   "', '"x"')


@dataclasses.dataclass
class Case:
  """One hostile input: ``data`` (a request body, or a line without its newline), the field the
  error must name (None: answered; ``"*"``: any), the item of a list request, the status."""
  cls: str
  seed: int
  what: str
  data: bytes
  field: str | None
  item: int | None = None
  status: int | None = None


def _js(value) -> bytes:
  return json.dumps(value).encode()


def _obj(fields: dict[bytes, bytes]) -> bytes:
  """A JSON object from raw key and value fragments (so that a value can be any bytes)."""
  return b"{" + b", ".join(k + b": " + v for k, v in fields.items()) + b"}"


def _valid_type(field: str, literal: str) -> bool:
  """Whether ``literal`` is a valid value of ``field`` (the servers' and the CLI's rules)."""
  value = json.loads(literal)
  if field in ("question", "context"):
    return isinstance(value, str) and bool(value.strip())
  if field == "top_k":
    return type(value) is int and value >= 1
  if field == "explain":
    return isinstance(value, bool)
  if field == "null_threshold":
    return value is None or type(value) in (int, float)
  if field == "id":
    return isinstance(value, str) or type(value) is int
  return True


class Fuzzer:
  """Hostile variants of ``good`` (a dict of the fields of a question that is answered).

  ``line``: predict CLI lines (fields ``id``, ``question``, ``context``; errors name
  ``<line>``) instead of server bodies (fields ``question``, ``context``, ``top_k``,
  ``explain``, ``null_threshold``; ``<body>``; list requests). ``max_body``: the server's
  ``--max_body_bytes`` (cases stay under it unless they test it); ``max_items``: its
  ``--max_queue``; ``too_many_words``: a word count no passage of ``--max_windows`` windows
  holds.
  """

  def __init__(self, good: dict, *, line: bool = False, max_body: int = 1 << 20,
               max_items: int | None = None, too_many_words: int | None = None):
    self.good, self.line, self.max_body = good, line, max_body
    self.max_items, self.too_many_words = max_items, too_many_words
    self.reads = ["id", "question", "context"] if line else ["question", "context", "top_k",
                                                              "explain", "null_threshold"]
    self.top = "<line>" if line else "<body>"

  def cases(self, seed: int, per_class: int) -> list[Case]:
    """``per_class`` cases of every class, seeds ``seed``, ``seed + 1``, ... per class."""
    return [self.case(cls, seed + k) for cls in CLASSES for k in range(per_class)]

  def case(self, cls: str, seed: int) -> Case:
    rng = random.Random(f"{cls}-{seed}")
    what, data, field, item, status = getattr(self, f"_{cls}")(rng)
    # A third of the server's mistakes also as the second item of a list request (its error
    # names item 1), where the list stays under the size limit.
    listable = (not self.line and item is None and status is None and field not in (None,
                                                                                  self.top))
    if listable and rng.random() < 0.3 and len(data) + len(self._body()) + 10 < self.max_body:
      what, data, item = f"{what}, as item 1 of a list", b"[" + self._body() + b", " + data + \
          b"]", 1
    if self.line:
      assert b"\n" not in data, what  # one case, one line
    return Case(cls, seed, what, data, field, item, status)

  # -- helpers -------------------------------------------------------------------------------
  def _fields(self) -> dict[bytes, bytes]:
    return {_js(k): _js(v) for k, v in self.good.items()}

  def _body(self, **raw: bytes) -> bytes:
    fields = self._fields()
    for k, v in raw.items():
      fields[_js(k)] = v
    return _obj(fields)

  def _room(self) -> int:
    """Bytes a value may take and keep the body under the size limit."""
    return self.max_body - len(self._body()) - 300

  # -- the classes ---------------------------------------------------------------------------
  def _depth(self, rng):
    d = rng.choice([5, 30, 31, 32, 33, 40, 100, 1000, 10_000, 100_000])
    where = rng.choice(self.reads + ["note", self.top])
    # At the top, arrays only: a body of nested lists is refused as such at any depth (a nested
    # object at the top would be an object without the question).
    shape = "array" if where == self.top else rng.choice(["array", "object", "mixed"])
    unit = {"array": 2, "object": 7, "mixed": 9}[shape]
    d = max(min(d, self._room() // unit), 2)
    if shape == "array":
      value = b"[" * d + b"]" * d
    elif shape == "object":
      value = b'{"k": ' * d + b"0" + b"}" * d
    else:
      value = b'[{"k": ' * (d // 2) + b"0" + b"}]" * (d // 2)
      d = 2 * (d // 2)
    what = f"{shape} nested {d} deep in {where}"
    if where == self.top:  # a list whose item 0 is not an object
      return what, value, self.top, (None if self.line else 0), None
    data = self._body(**{where: value})
    if where == "note" and d + 1 <= MAX_DEPTH:  # an ignored field within the limit
      return what, data, None, None, None
    return what, data, where, None, None

  def _number(self, rng):
    n = min(rng.choice([101, 300, 4301, 5001, 20_000]), self._room() - 10)
    digits = "".join(rng.choice("123456789") for _ in range(n))
    literal = rng.choice([digits, "-" + digits, "0." + digits, "1e" + digits, digits + ".5"])
    where = rng.choice(self.reads + ["note"])
    what = f"a number literal of {len(literal)} characters in {where}"
    return what, self._body(**{where: literal.encode()}), (None if where == "note" else where), \
        None, None

  def _nonfinite(self, rng):
    literal = rng.choice(NONFINITE + FINITE_EDGES)
    where = rng.choice(self.reads + ["note"])
    ok = where == "note" or (where == "null_threshold" and literal in FINITE_EDGES)
    return f"{literal} in {where}", self._body(**{where: literal.encode()}), \
        (None if ok else where), None, None

  def _encoding(self, rng):
    kinds = ["byte", "byte", "byte", "nul_raw", "nul_escaped", "utf16", "truncated"]
    kind = rng.choice(kinds + ([] if self.line else ["bom"]))
    texts = ["question", "context"] + (["id"] if self.line else [])
    where = rng.choice(texts + ["note"])
    text = str(self.good.get(where, "a note"))
    cut = rng.randrange(1, max(len(text), 2))
    before, after = _js(text[:cut])[:-1], _js(text[cut:])[1:]
    if kind == "byte":
      bad = rng.choice(BAD_UTF8)
      return (f"invalid UTF-8 {bad!r} in {where}", self._body(**{where: before + bad + after}),
              where, None, None)
    if kind == "nul_raw":  # a control character inside a JSON string: not JSON
      return f"a raw NUL byte in {where}", self._body(**{where: before + b"\x00" + after}), \
          where, None, None
    if kind == "nul_escaped":  # "\u0000": a valid character, answered
      return f"an escaped NUL in {where}", self._body(**{where: before + b"\\u0000" + after}), \
          None, None, None
    if kind == "utf16":
      return "the body in UTF-16", self._body().decode().encode(
          rng.choice(["utf-16", "utf-16-le", "utf-16-be"])), self.top, None, 400
    if kind == "truncated":
      body = self._body()
      return "the body cut short", body[:rng.randrange(1, len(body) - 1)], "*", None, 400
    return "a UTF-8 byte-order mark first", b"\xef\xbb\xbf" + self._body(), None, None, None

  def _surrogate(self, rng):
    literal = rng.choice(SURROGATES)
    texts = ["question", "context"] + (["id"] if self.line else [])
    where = rng.choice(texts + ["note", "a key"])
    valid = literal == SURROGATES[-1]
    if where == "a key":  # an ignored key: any string
      fields = self._fields()
      fields[b'"' + literal.encode() + b'"'] = b"1"
      return f"{literal} as a key", _obj(fields), None, None, None
    text = str(self.good.get(where, "a note"))
    value = _js(text)[:-1] + literal.encode() + b'"'
    return f"{literal} in {where}", self._body(**{where: value}), \
        (None if valid or where == "note" else where), None, None

  def _type(self, rng):
    where = rng.choice(self.reads + ["<top>", "<missing>"])
    if where == "<top>":
      literal = rng.choice(["null", "1", '"x"', "[]", "[1]", "true", "{}", '[["a"]]'])
      # {}: an object without the question; [1], [["a"]]: item 0 is not an object.
      field = "question" if literal == "{}" else self.top
      item = 0 if (literal in ("[1]", '[["a"]]') and not self.line) else None
      return f"the body {literal}", literal.encode(), field, item, None
    if where == "<missing>":
      missing = rng.choice(["question", "context"])
      fields = self._fields()
      del fields[_js(missing)]
      return f"no {missing}", _obj(fields), missing, None, None
    literal = rng.choice(WRONG_TYPES)
    return f"{where}: {literal}", self._body(**{where: literal.encode()}), \
        (None if _valid_type(where, literal) else where), None, None

  def _length(self, rng):
    if self.line:
      kind = rng.choice(["list", "ignored_list", "long_id", "long_question"])
      if kind == "list":
        small = _obj({b'"question"': b'"Q?"', b'"context"': b'"C."'})
        return "a line holding a list of 10,000 questions", b"[" + b", ".join(
            [small] * 10_000) + b"]", self.top, None, None
      if kind == "ignored_list":
        return "an ignored list of 100,000 numbers", self._body(
            note=b"[" + b",".join([b"1"] * 100_000) + b"]"), None, None, None
      if kind == "long_id":
        return "an id of 100,000 characters", self._body(id=_js("i" * 100_000)), None, None, None
      return "a question of 5,000 words", self._body(question=_js("why " * 5000)), None, None, \
          None
    kinds = ["too_many", "too_big", "ignored_list"]
    kinds += ["too_many_words"] if self.too_many_words else []
    kind = rng.choice(kinds)
    if kind == "too_many" and self.max_items:
      n = self.max_items + rng.choice([1, 2, 44, 300])
      small = _obj({b'"question"': b'"Q?"', b'"context"': b'"C."'})
      return f"a list of {n} questions (--max_queue={self.max_items})", b"[" + b", ".join(
          [small] * n) + b"]", "<body>", None, 413
    if kind == "too_many_words":
      words = " ".join(["w"] * self.too_many_words)
      return f"a passage of {self.too_many_words} words", self._body(context=_js(words)), \
          "context", None, 422
    if kind == "ignored_list":
      n = max(min(10_000, self._room() // 2), 1)
      return f"an ignored list of {n} numbers", self._body(
          note=b"[" + b",".join([b"1"] * n) + b"]"), None, None, None
    return "a body over --max_body_bytes", self._body(context=_js("x" * self.max_body)), \
        "<body>", None, 413
