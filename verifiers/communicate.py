"""COMMUNICATE (τ²-bench, methods.md §6): the agent told the user what it had to.

`task.metadata["communicate_info"]` lists the strings the agent must say (a refund amount,
a reservation id, a flight number). Each counts as said when it appears, lower-cased with
commas stripped, in the text of some assistant message (tool calls and tool results do not
count: the user never sees them). Score (ours) = share of the required strings said;
`passed` = all of them said and a clean termination. A task with an empty list passes (there
is nothing to communicate), as in τ²-bench.
"""

from __future__ import annotations

from typing import Any

from data.records import Task, Trajectory, Verdict
from verifiers.base import episode_checks, register

INFO_KEY = "communicate_info"


def normalize(text: str) -> str:
    """Lower-cased, commas stripped (τ²-bench's comparison form)."""
    return text.lower().replace(",", "")


def message_text(message: dict[str, Any]) -> str:
    """The text of one OpenAI-format message (string content or a list of text parts)."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def agent_messages_to_user(trajectory: Trajectory) -> list[str]:
    """The text the agent addressed to the user: every assistant message's content."""
    return [
        message_text(m)
        for m in trajectory.messages
        if m.get("role") == "assistant" and message_text(m)
    ]


def required_info(task: Task) -> list[str]:
    raw = task.metadata.get(INFO_KEY, [])
    if not isinstance(raw, list) or not all(isinstance(x, str | int | float) for x in raw):
        raise ValueError(
            f"task {task.id}: metadata[{INFO_KEY!r}] must be a list of strings, got {raw!r}"
        )
    return [str(x) for x in raw]


class CommunicateVerifier:
    """Each required string appears in some assistant message to the user."""

    name = "communicate"
    version = "1.0.0"

    def __init__(self, require_clean_termination: bool = True) -> None:
        self.require_clean_termination = require_clean_termination

    def applies_to(self, task: Task) -> bool:
        """Only tasks that say what must be communicated."""
        return INFO_KEY in task.metadata

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        info = required_info(task)
        said = [normalize(t) for t in agent_messages_to_user(trajectory)]
        found = [any(normalize(x) in s for s in said) for x in info]
        score = sum(found) / len(found) if found else 1.0
        reasons = [
            f"never told the user {x!r}" for x, ok in zip(info, found, strict=True) if not ok
        ]
        # No replay here: the recorded final state is taken as is.
        score, clean, episode = episode_checks(
            trajectory, trajectory.final_state_hash or "", score, self.require_clean_termination
        )
        reasons += episode
        return Verdict(
            trajectory_id=trajectory.id,
            task_id=task.id,
            verifier=self.name,
            verifier_version=self.version,
            passed=all(found) and (clean or not self.require_clean_termination),
            score=round(score, 6),
            reasons=reasons,
            details={"required": info, "found": found, "assistant_messages": len(said)},
        )


register(CommunicateVerifier.name)(CommunicateVerifier)
