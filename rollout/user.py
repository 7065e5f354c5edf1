"""User simulators. The scripted user is deterministic and driven by the task's user
scenario; it ends the conversation with the τ²-bench markers."""

from __future__ import annotations

import re
from typing import Any, Protocol

from data.records import Task

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
MARKERS = {STOP: "user_stop", TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}


class UserSimulator(Protocol):
    def first_message(self) -> str: ...

    async def respond(self, messages: list[dict[str, Any]]) -> str: ...


def first_person(text: str) -> str:
    """Turn the task's second-person goal ("You want to ... your card") into the user's words."""
    out = re.sub(r"\bYou want to\b", "I want to", text)
    out = re.sub(r"\byou would\b", "I would", out)
    out = re.sub(r"\byour\b", "my", out)
    return re.sub(r"\bYour\b", "My", out)


def termination_for(message: str) -> str | None:
    for marker, reason in MARKERS.items():
        if marker in message:
            return reason
    return None


class ScriptedUser:
    """States the goal and the user id, answers questions from the known info, confirms up
    to `max_confirmations` times, then stops."""

    def __init__(self, task: Task, max_confirmations: int = 2) -> None:
        self.task = task
        self.max_confirmations = max_confirmations
        self.confirmations = 0
        self.given: set[str] = set()

    def first_message(self) -> str:
        """The goal plus the user's identifier (`user_id`, else the first `*_id` they know)."""
        known = self.task.user.known_info
        key = "user_id" if "user_id" in known else next((k for k in known if k.endswith("_id")), None)
        if key is None:
            return first_person(self.task.instruction)
        self.given.add(key)
        return first_person(self.task.instruction) + f" My {key.replace('_', ' ')} is {known[key]}."

    async def respond(self, messages: list[dict[str, Any]]) -> str:
        last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
        text = (last or {}).get("content") or ""
        lowered = text.lower()
        for key, value in self.task.user.known_info.items():
            if key not in self.given and key.split()[0].replace("_", " ") in lowered:
                self.given.add(key)
                return f"It is {value}."
        if "?" in text and self.confirmations < self.max_confirmations:
            self.confirmations += 1
            return "Yes, please go ahead."
        return f"Thanks, that's all. {STOP}"
