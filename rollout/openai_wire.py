"""The OpenAI chat completions wire format, as `rollout.openai_client` speaks it: JSON in and
out (orjson when installed), conversation messages in the wire's shape, and the fields of a
reply or an error response read defensively (token ids, logprobs, counts, `Retry-After`).

Pure functions, no I/O: the client owns endpoints, retries and the request itself.
"""

from __future__ import annotations

import json
import time
from email.utils import parsedate_to_datetime
from typing import Any

try:  # orjson (a Prefect dependency) encodes a long conversation ~15x faster than json
    import orjson as _orjson
except ImportError:  # pragma: no cover - optional speed-up
    _orjson = None


def dumps(value: Any) -> bytes:
    """`value` as JSON bytes (orjson, or json where orjson refuses it)."""
    if _orjson is not None:
        try:
            return _orjson.dumps(value)
        except TypeError:  # lone surrogates, non-str keys, huge ints: let json escape them
            pass
    return json.dumps(value, ensure_ascii=True, default=str).encode()


def loads(data: bytes) -> Any:
    """JSON bytes decoded (orjson, or json with invalid UTF-8 replaced)."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass  # maybe invalid UTF-8 inside a valid document: json below decides
    return json.loads(data.decode("utf-8", "replace"))


def to_openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` in the wire format: assistant `tool_calls` as `{"id", "type": "function",
    "function": {"name", "arguments": <JSON string>}}` (flat `{"name", "arguments", "id"}`
    calls, as in `ToolCall`, are accepted). Messages that need no change are passed
    through (not copied); the caller's messages are never modified."""
    out: list[dict[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls and message.get("role") == "assistant" and not all(_is_wire(c) for c in calls):
            message = {**message, "tool_calls": [_wire_call(c, i) for i, c in enumerate(calls)]}
        out.append(message)
    return out


def _is_wire(call: Any) -> bool:
    if (
        not isinstance(call, dict)
        or not call.get("id")
        or call.get("type", "function") != "function"
    ):
        return False
    fn = call.get("function")
    return isinstance(fn, dict) and _is_json_object(fn.get("arguments"))


def _is_json_object(text: Any) -> bool:
    if not isinstance(text, str) or not text.startswith("{"):
        return False
    try:
        return isinstance(loads(text.encode("utf-8", "surrogatepass")), dict)
    except (ValueError, RecursionError):
        return False


def _wire_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    """One call in the wire format. Arguments that are not a JSON object (the raw text of a
    malformed call, kept in the history so the model sees its mistake) are wrapped as
    `{"raw": text}`: servers such as `transformers serve` and vLLM parse them (HTTP 500)."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = {"name": call.get("name", ""), "arguments": call.get("arguments", {})}
    arguments = function.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    elif not _is_json_object(arguments):
        arguments = json.dumps({"raw": arguments}, ensure_ascii=False)
    return {
        "id": call.get("id") or f"call_{index}",
        "type": call.get("type", "function"),
        "function": {**function, "arguments": arguments},
    }


def retry_after(headers: dict[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


def error_message(body: bytes) -> str:
    try:
        data = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return body.decode("utf-8", "replace")
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if isinstance(err, str):
            return err
    return repr(data)


def int_list(value: Any) -> list[int] | None:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return None
    return value


def completion_logprobs(value: Any) -> list[float] | None:
    """`choices[0].logprobs.content[*].logprob` (OpenAI format)."""
    content = value.get("content") if isinstance(value, dict) else None
    if not isinstance(content, list):
        return None
    out: list[float] = []
    for entry in content:
        lp = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(lp, int | float) or isinstance(lp, bool):
            return None
        out.append(float(lp))
    return out


def prompt_logprobs(value: Any, prompt_ids: list[int] | None) -> list[float | None] | None:
    """vLLM's `prompt_logprobs`: per prompt position None or `{token_id: {"logprob": ...}}`;
    the logprob of the token actually in the prompt (known from `prompt_token_ids`)."""
    if not isinstance(value, list):
        return None
    out: list[float | None] = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or not entry:
            out.append(None)
            continue
        if prompt_ids is not None and i < len(prompt_ids):
            chosen = entry.get(str(prompt_ids[i]), entry.get(prompt_ids[i]))
        elif len(entry) == 1:
            chosen = next(iter(entry.values()))
        else:
            chosen = None
        lp = chosen.get("logprob") if isinstance(chosen, dict) else chosen
        out.append(float(lp) if isinstance(lp, int | float) and not isinstance(lp, bool) else None)
    return out


def clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def count(value: Any) -> int:
    """A token count from the reply; 0 when absent or not a number."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0
