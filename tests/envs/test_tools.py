"""Typed tools (`envs.tools`): a decorated function's schema comes from its signature and
docstring, and arguments are checked and losslessly coerced before it runs."""

from __future__ import annotations

import sqlite3
import types
from typing import Literal

import pytest

from envs.tools import ToolArgumentError, ToolError, build_spec, clip, collect_tools, is_tool, tool


@tool(write=True)
def book(db: sqlite3.Connection, user_id: str, cabin: Literal["economy", "business"], seats: int,
         insurance: bool = False, note: str | None = None, bags: list[int] | None = None,
         price: float = 0.0) -> dict:
    """Book a flight for a user.

    Args:
        user_id: The user's id, e.g. "u1".
        cabin: The cabin class.
        seats: How many seats,
            at least one.
        insurance: Whether to add travel insurance.

    Returns:
        The booking.
    """
    return {}


def test_schema_from_signature_and_docstring() -> None:
    spec = build_spec(book)
    assert spec.write and spec.name == "book" and spec.description == "Book a flight for a user."
    params = spec.schema()["function"]["parameters"]
    assert params["required"] == ["user_id", "cabin", "seats"]
    props = params["properties"]
    assert props["cabin"] == {"type": "string", "enum": ["economy", "business"], "description": "The cabin class."}
    assert props["seats"]["description"] == "How many seats, at least one."  # continuation lines join
    assert props["insurance"] == {"type": "boolean", "description": "Whether to add travel insurance.",
                                  "default": False}
    assert props["note"]["type"] == "string" and props["bags"]["items"] == {"type": "integer"}
    assert props["price"]["type"] == "number" and "Returns" not in str(props)


def test_validate_coerces_losslessly_and_names_the_problem() -> None:
    spec = build_spec(book)
    ok = spec.validate({"user_id": "u1", "cabin": "economy", "seats": "2", "insurance": 1, "bags": [1, 2.0],
                        "price": 3, "note": None})
    assert ok == {"user_id": "u1", "cabin": "economy", "seats": 2, "insurance": True, "bags": [1, 2],
                  "price": 3.0, "note": None}
    cases = [({"user_id": "u1", "cabin": "economy"}, "missing_argument"),
             ({"user_id": "u1", "cabin": "economy", "seats": 1, "seat": 2}, "unknown_argument"),
             ({"user_id": "u1", "cabin": "first", "seats": 1}, "wrong_type"),
             ({"user_id": "u1", "cabin": "economy", "seats": 1.5}, "wrong_type"),
             ({"user_id": "u1", "cabin": "economy", "seats": True}, "wrong_type"),
             ({"user_id": 7, "cabin": "economy", "seats": 1}, "wrong_type"),
             ({"user_id": "u1", "cabin": "economy", "seats": 1, "insurance": "yes"}, "wrong_type")]
    for args, code in cases:
        with pytest.raises(ToolArgumentError) as info:
            spec.validate(args)
        assert info.value.code == code, args
    with pytest.raises(ToolArgumentError, match="must be an object"):
        spec.validate(["u1"])


def test_clip_collect_and_errors() -> None:
    assert clip("short") == "short" and clip("x" * 250) == "x" * 200 + "... [50 characters cut]"
    module = types.SimpleNamespace(book=book, helper=lambda db: None, CONST=1)
    assert list(collect_tools(module)) == ["book"] and is_tool(book) and not is_tool(module.helper)
    err = ToolError("R01_SEATS", "no seats")
    assert (err.code, err.message, str(err)) == ("R01_SEATS", "no seats", "R01_SEATS: no seats")
