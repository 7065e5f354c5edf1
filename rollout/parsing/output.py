"""One raw model output parsed end to end (`parse_model_output`): what every backend returns
for a completion."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from data.records import ToolCall
from rollout.model import MalformedCall
from rollout.parsing.classify import _clean_text
from rollout.parsing.native import decode_native_tool_calls
from rollout.parsing.text import parse_tool_calls
from rollout.parsing.validate import validate_calls


class ParsedOutput(BaseModel):
    """Everything `parse_model_output` found in one raw model output."""

    text: str = ""
    calls: list[ToolCall] = Field(default_factory=list)
    malformed: list[MalformedCall] = Field(default_factory=list)

    @property
    def error_classes(self) -> list[str]:
        return [m.error for m in self.malformed]


def tool_names_of(tools: list[dict[str, Any]] | None) -> list[str]:
    """The function names of OpenAI tool schemas."""
    names = []
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return names


def parse_model_output(
    output: str | bytes = "",
    tools: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    native: list[Any] | None = None,
    tool_names: Iterable[str] | None = None,
) -> ParsedOutput:
    """Parse one raw model output end to end and classify every malformed call: what every
    backend (embedded, OpenAI-compatible, vLLM offline) returns for a completion.

    `output` may be bytes as they came off the wire: invalid UTF-8 is replaced (U+FFFD) and
    a call holding it is `invalid_utf8`. `native` (OpenAI `tool_calls`) takes precedence
    over calls written in the text, as in the OpenAI client. With `tools`, parsed calls are
    checked against the schemas too (`validate_calls`); `tool_names` (default: those of
    `tools`) only sharpen the `unsupported_syntax` rule. Never raises.
    """
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    names = tool_names if tool_names is not None else tool_names_of(tools)
    if native:
        calls, malformed = decode_native_tool_calls(native, finish_reason)
        text = _clean_text(text)
    else:
        text, calls, malformed = parse_tool_calls(text, finish_reason, names)
    if tools is not None:
        calls, invalid = validate_calls(calls, tools)
        malformed = malformed + invalid
    return ParsedOutput(text=text, calls=calls, malformed=malformed)
