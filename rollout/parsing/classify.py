"""The one classifier of a tool call, on both paths (a call written in the text and a native
`tool_calls` entry): strict JSON decoding (duplicate keys marked, NaN and infinities refused)
and `_classify`, which turns one call entry into a `ToolCall` or a `MalformedCall` with its
error class (`rollout.parsing` lists them)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from data.records import ToolCall
from envs.tools import clip
from rollout.model import MalformedCall


class _NotStrict(ValueError):
    """A number strict JSON does not have: NaN, Infinity, or one that overflows to it."""


class _Dup(dict):  # type: ignore[type-arg]
    """A decoded object that repeated a key (holding the last value, as `json` does)."""

    duplicates: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    dups: list[str] = []
    for key, value in pairs:
        if key in obj:
            dups.append(key)
        obj[key] = value
    if not dups:
        return obj
    marked = _Dup(obj)
    marked.duplicates = dups
    return marked


def _constant(name: str) -> Any:
    raise _NotStrict(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStrict(f"number {clip(text, 40)} is out of range")
    return value


# Strict JSON: duplicate keys are marked (`_Dup`), NaN and infinities refused.
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
_loads = _DECODER.decode

_Item = ToolCall | MalformedCall
_RAW_LIMIT = 2_000  # characters of a malformed call kept in `MalformedCall.raw`
_BAD_TEXT = re.compile(r"[\ud800-\udfff\ufffd]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_JSON_ERRORS = (ValueError, RecursionError)  # JSONDecodeError, _NotStrict, int digit limits
_NAME_CHARS = 100  # characters of a model-written name quoted in a detail


def _clean_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD (they cannot be encoded as UTF-8)."""
    return _SURROGATE.sub("\ufffd", text)


def _scan(value: Any) -> tuple[str, str] | None:
    """The first thing in a decoded call that cannot be stored faithfully: a repeated key
    (`duplicate_key`), a non-finite number (`bad_json`) or undecodable text (`invalid_utf8`)."""
    stack = [value]
    bad_text = False
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            bad_text = bad_text or _BAD_TEXT.search(v) is not None
        elif isinstance(v, dict):
            if isinstance(v, _Dup):
                keys = ", ".join(repr(clip(k, _NAME_CHARS)) for k in v.duplicates[:5])
                return "duplicate_key", f"an object repeats the key(s) {keys}"
            for k, item in v.items():
                stack.append(k)
                stack.append(item)
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, float) and not math.isfinite(v):
            return "bad_json", f"{v} is not a JSON number"
    return ("invalid_utf8", "undecodable text") if bad_text else None


def _malformed(error: str, detail: str, raw: str) -> MalformedCall:
    return MalformedCall(error=error, detail=detail, raw=_clean_text(raw[:_RAW_LIMIT]))


def _why(e: BaseException) -> str:
    return "nested too deeply" if isinstance(e, RecursionError) else clip(str(e), 300)


def _raw_of(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[:_RAW_LIMIT]
    except (ValueError, RecursionError):
        return repr(value)[:_RAW_LIMIT]


def _classify(entry: Any, raw: str, *, native: bool = False, cut: bool = False,
              call_id: str | None = None) -> _Item:
    """The one classifier of a call: a decoded `<tool_call>`/fenced/bare object (`native`
    False) or an OpenAI `tool_calls` entry (`native` True). `cut`: the call's own text was
    cut at max_tokens (a native call's arguments string), so broken arguments are
    `truncated` rather than `bad_json`."""
    raw = _clean_text(raw[:_RAW_LIMIT])
    if not isinstance(entry, dict):
        if native:
            kind = type(entry).__name__
            return MalformedCall(error="unsupported_call", detail=f"not a function call: {kind}", raw=raw)
        return MalformedCall(error="bad_json",
                             detail=f"tool call is a JSON {type(entry).__name__}, not an object", raw=raw)
    problem = _scan(entry)
    if problem is not None and problem[0] != "invalid_utf8":
        return MalformedCall(error=problem[0], detail=f"tool call: {problem[1]}", raw=raw)
    fn: Any = entry
    if isinstance(entry.get("function"), dict) and "name" not in entry:
        fn = entry["function"]
    elif native and "name" not in entry:
        kind = entry.get("type") if isinstance(entry.get("type"), str) else "no function"
        return MalformedCall(error="unsupported_call", detail=f"not a function call: {clip(kind, 40)}",
                             raw=raw)
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        return MalformedCall(error="missing_name", detail="tool call has no string name", raw=raw)
    name = name.strip()
    shown = clip(_clean_text(name), _NAME_CHARS)
    args: Any = fn.get("arguments", fn.get("parameters"))
    if problem is not None:  # invalid_utf8 in the name or the arguments
        return _malformed("invalid_utf8", f"{shown}: undecodable text", raw)
    if isinstance(args, str):
        if not args.strip():
            args = None
        else:
            try:
                args = _loads(args)
            except _JSON_ERRORS as e:
                error = "truncated" if cut and not isinstance(e, _NotStrict) else "bad_json"
                return _malformed(error, f"{shown}: arguments: {_why(e)}", raw)
            problem = _scan(args)
            if problem is not None:
                return _malformed(problem[0], f"{shown}: arguments: {problem[1]}", raw)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return MalformedCall(
            error="arguments_not_object",
            detail=f"{shown}: arguments are {type(args).__name__}, not an object",
            raw=raw,
        )
    return ToolCall(name=name, arguments=args, id=call_id)
