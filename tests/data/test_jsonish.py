"""data.jsonish: values that may arrive as JSON text."""

from data.jsonish import maybe_json


def test_json_text_is_read_and_anything_else_kept() -> None:
    assert maybe_json('{"a": [1, 2]}') == {"a": [1, 2]}
    assert maybe_json("3") == 3
    assert maybe_json("not json") == "not json"
    assert maybe_json("") == ""
    value = {"a": 1}
    assert maybe_json(value) is value and maybe_json(None) is None
