"""The items hygiene compares: what one row or record says (its first and every user turn, its
tool-call sequence), read from `sft`/`rl` rows, generic rows, `Task`s, `Trajectory`s or strings."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from data.jsonish import maybe_json
from data.records import Task, Trajectory, canonical_json, content_hash

Row = dict[str, Any]


@dataclass
class Item:
    """What hygiene looks at in one row or record."""

    id: str
    instruction: str  # the first user turn (the task as posed)
    user_texts: list[str] = field(default_factory=list)  # every user turn
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)

    def tool_text(self) -> str:
        return " ".join(f"{name}({canonical_json(args)})" for name, args in self.tool_calls)


def normalize(text: str) -> str:
    """NFKC, lower case, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _content(m: dict[str, Any]) -> str:
    c = m.get("content") or ""
    if isinstance(c, list):
        return " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
    return str(c)


def _from_messages(rid: str, messages: Sequence[dict[str, Any]]) -> Item:
    users = [_content(m) for m in messages if m.get("role") == "user"]
    calls: list[tuple[str, Any]] = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for c in m.get("tool_calls") or []:
            fn = c.get("function", c)
            calls.append((str(fn.get("name", "")), maybe_json(fn.get("arguments", {}))))
    return Item(rid, users[0] if users else "", users, calls)


def item_of(x: Any) -> Item:
    """An `Item` from an `sft`/`rl` row, a generic row (`instruction`, `tool_calls`), a `Task`,
    a `Trajectory` or a string."""
    if isinstance(x, Task):
        return Item(
            x.id,
            x.instruction,
            [x.instruction],
            [(c.name, c.arguments) for c in x.reference_solution],
        )
    if isinstance(x, Trajectory):
        item = _from_messages(x.id, x.messages)
        item.tool_calls = [(c.name, c.arguments) for c in x.actions()]
        return item
    if isinstance(x, str):
        return Item("text-" + content_hash(x), x, [x], [])
    if not isinstance(x, dict):
        raise TypeError(
            f"hygiene takes rows (dicts), Task, Trajectory or str; got {type(x).__name__}"
        )
    rid = str(x.get("trajectory_id") or x.get("id") or x.get("task_id") or "row-" + content_hash(x))
    if "messages" in x:
        return _from_messages(rid, x["messages"])
    if "prompt" in x:
        item = _from_messages(rid, x["prompt"])
        if isinstance(x.get("task"), str):
            task = json.loads(x["task"])
            item.tool_calls = [
                (c["name"], c.get("arguments", {})) for c in task.get("reference_solution", [])
            ]
        return item
    if "instruction" in x:
        calls = [
            (c["name"], maybe_json(c.get("arguments", {}))) if isinstance(c, dict) else (str(c[0]), c[1])
            for c in x.get("tool_calls", [])
        ]
        return Item(rid, str(x["instruction"]), [str(x["instruction"])], calls)
    raise ValueError(
        f"row {rid}: no messages, prompt or instruction to check (columns: {sorted(x)})"
    )
