"""Types a world's `design.py` returns to the synthesis layer.

A world folder's `design.py` provides four hooks, all pure functions of a database:

- ``variants(conn, rng, n) -> list[Variant]``: boundary-adjacent initial states (Set Designer);
- ``candidate_calls(conn, focus) -> list[ToolCall]``: typed write calls whose arguments
  come from the database, for the Explorer's search;
- ``lookup_calls(focus) -> list[ToolCall]``: the read calls a careful agent makes first;
- ``describe(changes, before, after, variant) -> Goal | None``: the user-perspective
  projection of a state change (``None`` when it cannot be stated unambiguously), and
  ``goal_score(changes, variant) -> float`` to prefer goals that sit on the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envs.state import CellChange


@dataclass
class Variant:
    """A boundary-adjacent initial state: patches applied to the seeded base state."""

    kind: str  # e.g. "seats_exact", "cancel_outside_window"
    patches: list[str]
    focus: dict[str, Any]  # the records the task is about (user, flights, reservations)
    rules: list[str]  # rule ids whose limit the state sits next to
    persona: str = "novice"
    note: str = ""
    preference: dict[str, Any] = field(default_factory=dict)  # e.g. an infeasible first choice
    allow_no_change: bool = False  # the right outcome may be to change nothing (refusal)


@dataclass
class Goal:
    """What the user wants, as the user would say it (never the solution's tool calls)."""

    instruction: str
    reason: str
    known_info: dict[str, str]
    unknown_info: list[str] = field(default_factory=list)


def changes_by_row(changes: list[CellChange], table: str) -> dict[str, dict[str, CellChange]]:
    """The changes to `table`, grouped by row key, then by column (for a `describe` hook)."""
    rows: dict[str, dict[str, CellChange]] = {}
    for c in changes:
        if c.table == table:
            rows.setdefault(c.key, {})[c.column] = c
    return rows
