"""Parsed calls checked against the OpenAI tool schemas: `unknown_tool`, `unknown_argument`,
`missing_argument`, `wrong_type` (the environment's own classes)."""

from __future__ import annotations

import json
from typing import Any

from data.records import ToolCall
from envs.tools import clip
from rollout.model import MalformedCall
from rollout.parsing.classify import _NAME_CHARS, _RAW_LIMIT

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def validate_calls(
    calls: list[ToolCall], tools: list[dict[str, Any]]
) -> tuple[list[ToolCall], list[MalformedCall]]:
    """Split `calls` into those that fit the OpenAI tool schemas `tools` and those that do
    not: `unknown_tool`, `unknown_argument`, `missing_argument` or `wrong_type` (a value
    of the wrong JSON type or outside the schema's `enum`), the environment's classes."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            schemas[fn["name"]] = params if isinstance(params, dict) else {}
    ok: list[ToolCall] = []
    bad: list[MalformedCall] = []
    for call in calls:
        problem = _schema_problem(call, schemas)
        if problem is None:
            ok.append(call)
        else:
            error, detail = problem
            raw = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
            bad.append(MalformedCall(error=error, detail=detail, raw=raw[:_RAW_LIMIT]))
    return ok, bad


def _schema_problem(
    call: ToolCall, schemas: dict[str, dict[str, Any]]
) -> tuple[str, str] | None:
    if call.name not in schemas:
        known = ", ".join(sorted(schemas)) or "none"
        return "unknown_tool", f"no tool named {clip(call.name, _NAME_CHARS)!r}; tools are: {known}"
    schema = schemas[call.name]
    props = schema.get("properties") or {}
    unknown = sorted(set(call.arguments) - set(props))
    if unknown:
        names = [clip(u, _NAME_CHARS) for u in unknown[:10]]
        return "unknown_argument", f"{call.name} has no argument(s) {names}"
    for name in schema.get("required") or []:
        if name not in call.arguments:
            return "missing_argument", f"{call.name} needs argument {name!r}"
    for name, value in call.arguments.items():
        if not _fits(value, props.get(name) or {}):
            return "wrong_type", f"{call.name}: argument {name!r} does not fit its schema: {clip(repr(value), 60)}"
    return None


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether `value` has the schema's JSON type(s) and is in its `enum` (if any)."""
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        return any(_fits(value, o) for o in options if isinstance(o, dict))
    kinds = schema.get("type")
    if kinds is None:
        return True
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        types = _JSON_TYPES.get(kind)
        if types is None:
            return True  # a type we do not check
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            return True
        if isinstance(value, types):
            if kind == "array" and isinstance(schema.get("items"), dict):
                return all(_fits(v, schema["items"]) for v in value)
            return True
    return False
