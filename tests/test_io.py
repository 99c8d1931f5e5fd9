"""`poi_jax.io.JsonStreamWriter` writes, item by item, exactly the bytes `write_json_atomic`
writes for the whole value (what streamed evaluation relies on)."""
import json

import pytest

from poi_jax.io import JsonStreamWriter, write_json_atomic

VALUES = [{"a": 1}, {"x": [1.5, None, "é\"\n"], "y": {}, "z": []},
          [{"t": "", "start": None, "p": 0.25}], -1e30, "", {}]


@pytest.mark.parametrize("items", [[], [("q1", "an answer")],
                                   [(f"q{i}", v) for i, v in enumerate(VALUES)]])
def test_an_object_streamed_equals_the_whole_dump(tmp_path, items):
  w = JsonStreamWriter(str(tmp_path / "streamed.json"))
  for k, v in items:
    w.add(k, v)
  w.close()
  write_json_atomic(str(tmp_path / "whole.json"), dict(items))
  assert (tmp_path / "streamed.json").read_bytes() == (tmp_path / "whole.json").read_bytes()


@pytest.mark.parametrize("head", [{}, {"version": "v2.0"}, {"a": {"b": [1, 2]}, "c": 1}])
@pytest.mark.parametrize("values", [[], [1], VALUES])
def test_a_list_under_a_key_streamed_equals_the_whole_dump(tmp_path, head, values):
  w = JsonStreamWriter(str(tmp_path / "streamed.json"), list_key="data", head=head)
  for v in values:
    w.append(v)
  w.close()
  w.close()  # a second close writes nothing
  write_json_atomic(str(tmp_path / "whole.json"), {**head, "data": values})
  assert (tmp_path / "streamed.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
  assert json.loads((tmp_path / "streamed.json").read_text()) == {**head, "data": values}


def test_a_key_given_twice_is_an_error_naming_it(tmp_path):
  w = JsonStreamWriter(str(tmp_path / "p.json"))
  w.add("q1", "a")
  with pytest.raises(ValueError, match="'q1' comes twice"):
    w.add("q1", "b")
  w.abort()
