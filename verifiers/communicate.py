"""COMMUNICATE (τ²-bench, methods.md §6): the agent told the user what it had to.

`task.verification.communicate` lists the facts the agent must tell (a refund amount, a
reservation id, a flight number). A fact counts as told when one of its spellings appears,
lower-cased with commas stripped, in the text of some assistant message (tool calls and tool results do not
count: the user never sees them). Score (ours) = share of the required strings said;
`passed` = all of them said and a clean termination. A task with an empty list passes (there
is nothing to communicate), as in τ²-bench.
"""

from __future__ import annotations

from typing import Any

from data.records import Task, Trajectory, Verdict
from verifiers.base import (
    ALTERNATIVE_KINDS,
    BaseVerifier,
    VerifierOptions,
    episode_checks,
    register,
)


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
    """The labels of the facts the user must be told."""
    return [f.label for f in task.verification.communicate]


class CommunicateVerifier(BaseVerifier):
    """Each required fact appears in some assistant message to the user."""

    name = "communicate"
    version = "1.0.0"
    basis_name = "COMMUNICATE"
    audit_kinds = frozenset({"drop_communication"})
    alternative_kinds = frozenset(ALTERNATIVE_KINDS)

    def __init__(self, require_clean_termination: bool = True) -> None:
        self.require_clean_termination = require_clean_termination

    def applies_to(self, task: Task) -> bool:
        """Only tasks that say what must be communicated."""
        return bool(task.verification.communicate)

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        facts = task.verification.communicate
        info = [f.label for f in facts]
        said = [normalize(t) for t in agent_messages_to_user(trajectory)]
        found = [any(normalize(x) in s for x in f.any_of for s in said) for f in facts]
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


register(CommunicateVerifier.name, options=VerifierOptions)(CommunicateVerifier)
