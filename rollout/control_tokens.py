"""Chat-template control tokens in content stay text.

A model can write `<|im_start|>system ...` as text, as a tool name or inside arguments, and a
tool can echo it back. Wherever content meets a chat template and the result is tokenised as
text (the embedded backend renders its prompt to a string and tokenises it; TRL does the
same with training rows), such a string would become a real control token: a forged turn.

`escape_messages` breaks every control token in message content, tool names and arguments
by inserting U+200B (zero-width space) after its first character: `<|im_start|>` becomes
`<\u200b|im_start|>`, which tokenises as ordinary text. Nothing else changes, JSON arguments
stay valid JSON, and the stored records keep the original text (escaping happens only at
rendering). The tokens are the tokenizer's own added and special tokens
(`control_tokens(tokenizer)`) plus any `<|name|>`-shaped token (ChatML, Llama 3, Phi, ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

ZWSP = "\u200b"
GENERIC = r"<\|[A-Za-z0-9_.:\-]{1,64}\|>"  # <|im_start|>, <|eot_id|>, <|start_header_id|>, ...
_PASSES = 8  # escaping can only create a new token when tokens overlap; bounded anyway


def control_tokens(tokenizer: Any) -> list[str]:
    """The strings a tokenizer turns into single added or special tokens (longest first)."""
    found: set[str] = set()
    for attr in ("all_special_tokens", "additional_special_tokens"):
        found.update(t for t in getattr(tokenizer, attr, None) or [] if isinstance(t, str))
    added = getattr(tokenizer, "get_added_vocab", None)
    if callable(added):
        found.update(t for t in added() if isinstance(t, str))
    return sorted((t for t in found if len(t) > 1), key=lambda t: (-len(t), t))


@lru_cache(maxsize=32)
def _pattern(tokens: tuple[str, ...]) -> re.Pattern[str]:
    parts = [re.escape(t) for t in sorted(set(tokens), key=lambda t: (-len(t), t))]
    return re.compile("|".join([*parts, GENERIC]))


def escape_control_tokens(text: str, tokens: Iterable[str] = ()) -> str:
    """`text` with every control token (of `tokens`, or `<|...|>`-shaped) broken up."""
    if not text or "<" not in text:
        return text
    pattern = _pattern(tuple(tokens))
    for _ in range(_PASSES):
        if pattern.search(text) is None:
            return text
        text = pattern.sub(lambda m: m.group(0)[0] + ZWSP + m.group(0)[1:], text)
    return text


def _escape_value(value: Any, tokens: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return escape_control_tokens(value, tokens)
    if isinstance(value, dict):
        return {_escape_value(k, tokens): _escape_value(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_value(v, tokens) for v in value]
    return value


def escape_messages(messages: list[dict[str, Any]], tokens: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Copies of OpenAI-format `messages` with control tokens broken up in `content` (a string
    or text parts), `name`, and tool calls' names and arguments. The input is not changed."""
    toks = tuple(tokens)
    out: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        if "content" in m:
            m["content"] = _escape_value(m["content"], toks)
        if isinstance(m.get("name"), str):
            m["name"] = escape_control_tokens(m["name"], toks)
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                if not isinstance(call, dict):
                    calls.append(call)
                    continue
                c = dict(call)
                fn = c.get("function")
                target = dict(fn) if isinstance(fn, dict) else c
                if isinstance(target.get("name"), str):
                    target["name"] = escape_control_tokens(target["name"], toks)
                if "arguments" in target:
                    # a JSON string stays valid JSON: a token can only sit inside its string literals
                    target["arguments"] = _escape_value(target["arguments"], toks)
                if isinstance(fn, dict):
                    c["function"] = target
                calls.append(c)
            m["tool_calls"] = calls
        out.append(m)
    return out
