"""Typed tools: a decorated function becomes an OpenAI tool schema and a validated call.

A tool is a plain function whose first parameter is the database connection::

    @tool(write=True)
    def cancel_reservation(db: sqlite3.Connection, reservation_id: str) -> dict:
        \"\"\"Cancel a reservation. ...

        Args:
            reservation_id: The reservation to cancel, e.g. "R1A2B3".
        \"\"\"

The JSON schema comes from the signature (types, defaults) and the docstring (summary and
`Args:` lines). Arguments are checked before the function runs; every problem is a
`ToolArgumentError` naming the argument.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

ECHO_CHARS = 200  # characters of a model-written value quoted back in an error message
MESSAGE_CHARS = 2000  # characters of an error message returned to the model


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` cut to `limit` characters, with a mark saying how many were cut (model strings
    are echoed into observations; a 200 KB name must not come back as a 200 KB message)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} characters cut]"


class ToolError(Exception):
    """A tool refused the call. `code` is a rule id (e.g. R02_SEATS) or an error kind."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ToolArgumentError(ToolError):
    """The call's arguments do not fit the tool's signature."""


@dataclass
class ToolSpec:
    name: str
    fn: Callable[..., Any]
    write: bool
    description: str
    parameters: dict[str, Any]
    params: dict[str, inspect.Parameter] = field(default_factory=dict)
    hints: dict[str, Any] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Checked (and losslessly coerced) arguments, or a ToolArgumentError."""
        if not isinstance(arguments, dict):
            raise ToolArgumentError("bad_arguments", f"arguments must be an object, got {type(arguments).__name__}")
        unknown = sorted(set(arguments) - set(self.params))
        if unknown:
            shown = [clip(str(u)) for u in unknown[:10]]
            raise ToolArgumentError(
                "unknown_argument", f"{self.name} has no argument(s) {shown}; expected {sorted(self.params)}"
            )
        out: dict[str, Any] = {}
        for pname, p in self.params.items():
            if pname not in arguments:
                if p.default is inspect.Parameter.empty:
                    raise ToolArgumentError("missing_argument", f"{self.name} needs argument {pname!r}")
                continue
            out[pname] = _coerce(pname, arguments[pname], self.hints[pname])
        return out


_TOOL_ATTR = "__trajforge_tool__"


def tool(write: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a function as a tool; `write=True` for tools that may change the state."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, _TOOL_ATTR, {"write": write})
        return fn

    return mark


def is_tool(obj: Any) -> bool:
    return callable(obj) and hasattr(obj, _TOOL_ATTR)


def _json_type(tp: Any) -> dict[str, Any]:
    origin = get_origin(tp)
    if origin is Literal:
        values = list(get_args(tp))
        return {"type": _json_type(type(values[0]))["type"], "enum": values}
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in get_args(tp) if a is not type(None)]
        return _json_type(inner[0])
    if origin is list:
        (item,) = get_args(tp) or (str,)
        return {"type": "array", "items": _json_type(item)}
    return {
        str: {"type": "string"},
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
        dict: {"type": "object"},
    }.get(tp, {"type": "string"})


def _coerce(name: str, value: Any, tp: Any) -> Any:
    def bad(expected: str) -> ToolArgumentError:
        return ToolArgumentError("wrong_type", f"argument {name!r} must be {expected}, got {clip(repr(value))}")

    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        inner = [a for a in get_args(tp) if a is not type(None)]
        return _coerce(name, value, inner[0])
    if origin is Literal:
        allowed = list(get_args(tp))
        if value not in allowed:
            raise bad(f"one of {allowed}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise bad("a list")
        (item,) = get_args(tp) or (str,)
        return [_coerce(name, v, item) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if value in (0, 1) and not isinstance(value, float):
            return bool(value)
        raise bad("a boolean")
    if tp is int:
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            return int(value)
        raise bad("an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise bad("a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad("a string")
    return value


_ARG_LINE = re.compile(r"^ {2,8}(\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary (text before `Args:`) and per-argument descriptions (Google style)."""
    doc = inspect.cleandoc(doc or "")
    head, _, rest = doc.partition("Args:")
    descriptions: dict[str, str] = {}
    current: str | None = None
    for line in rest.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            break  # the next section (Returns:, Raises:) ends the arguments
        m = _ARG_LINE.match(line)
        indent = len(line) - len(line.lstrip())
        if m and (current is None or indent <= 4):
            current = m.group(1)
            descriptions[current] = m.group(2).strip()
        elif current:
            descriptions[current] += " " + line.strip()
    return " ".join(head.split()), descriptions


def build_spec(fn: Callable[..., Any]) -> ToolSpec:
    """The ToolSpec of a `@tool` function (its first parameter, the database, is skipped)."""
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn, include_extras=False)
    params = dict(list(sig.parameters.items())[1:])
    summary, arg_docs = _parse_docstring(fn.__doc__ or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, p in params.items():
        prop = _json_type(hints.get(pname, str))
        if pname in arg_docs:
            prop["description"] = arg_docs[pname]
        if p.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            prop["default"] = p.default
        properties[pname] = prop
    parameters = {"type": "object", "properties": properties, "required": required}
    return ToolSpec(
        name=fn.__name__,
        fn=fn,
        write=getattr(fn, _TOOL_ATTR)["write"],
        description=summary,
        parameters=parameters,
        params=params,
        hints={k: hints.get(k, str) for k in params},
    )


def collect_tools(module: Any) -> dict[str, ToolSpec]:
    """Every `@tool` function defined in a module, by name, in definition order."""
    specs = [build_spec(obj) for obj in vars(module).values() if is_tool(obj)]
    return {s.name: s for s in specs}
