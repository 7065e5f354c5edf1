"""Constraint sets (CoVe, methods.md §2): the one object that generates and verifies a task.

A `Constraint` is a kind plus exact fields drawn from a world's database ("book flight F
in economy for 2, paid with P"). Fuzzification replaces the identifiers in those fields
with vague but unique descriptions (`FuzzyRef`); the verifier checks the constraints on
the final state. A world that supports constraint-guided synthesis has a
``constraints.py`` in its folder with these hooks, all pure functions of databases:

- ``sample_constraints(conn, rng) -> list[Constraint]``: a set solvable by construction;
- ``fuzzify(conn, constraints, rng) -> Fuzzification``: unique descriptions of the ids
  (raises `FuzzifyError` when a description stays ambiguous);
- ``matching_ids(conn, entity, where) -> list[str]``: the records a description's
  attributes match (used to re-check uniqueness);
- ``goal(constraints, fuzzy) -> envs.design.Goal``: the user's instruction, from the
  descriptions only;
- ``reference_calls(conn, constraints) -> list[ToolCall]``: reads, then the writes that
  satisfy the set;
- ``check(conn_initial, conn_final, constraints) -> (list[bool], list[dict])``: outcome
  checks; each detail names the record (``{"table", "key"}``) that satisfies it;
- ``audit_mutations(conn, constraints, reference) -> dict[str, list[ToolCall]]``: known-bad
  variants of the reference (wrong item, wrong payment, an extra write).

Optional: ``IDENTITY_FIELDS`` and ``known_identity(conn, constraints)`` for worlds whose
users identify themselves by something other than ``user_id`` (an email, a patient id).
Helpers shared by the worlds' hooks live in `envs/cove.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from envs.loader import load_module


class Constraint(BaseModel):
    """One requirement on the final state: `kind` (e.g. "book", "cancel", "bags") and its
    exact fields (ids included). Every constraint here is met by one write."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    fields: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]


def dump_constraints(constraints: list[Constraint]) -> list[dict[str, Any]]:
    """JSON-able form, as stored in `task.verification.constraints`."""
    return [c.model_dump() for c in constraints]


def load_constraints(raw: list[dict[str, Any]]) -> list[Constraint]:
    return [Constraint.model_validate(c) for c in raw]


@dataclass
class FuzzyRef:
    """A vague description of one record that replaces its id in what the user says.

    `where` holds the attributes the description states (column of the world's entity
    view -> value, scope such as the user included); it matched exactly the one record."""

    slot: str  # which id it replaces, e.g. "c0.flight_id"
    entity: str  # entity view the attributes refer to, e.g. "flight"
    record_id: str
    text: str
    where: dict[str, Any]
    level: int  # how many times more attributes were added before it became unique
    first_matches: int  # records the first draw matched (1 = unique at once)

    def as_dict(self) -> dict[str, Any]:
        return {"entity": self.entity, "where": dict(self.where), "level": self.level}


@dataclass
class Fuzzification:
    refs: dict[str, FuzzyRef] = field(default_factory=dict)

    def texts(self) -> dict[str, str]:
        return {slot: r.text for slot, r in self.refs.items()}

    def attributes(self) -> dict[str, dict[str, Any]]:
        return {slot: r.as_dict() for slot, r in self.refs.items()}

    @property
    def redraws(self) -> int:
        return sum(r.level for r in self.refs.values())

    @property
    def first_draw_unique(self) -> int:
        return sum(r.first_matches == 1 for r in self.refs.values())


class FuzzifyError(Exception):
    """No description with the available attributes is unique: the task is dropped."""

    def __init__(self, entity: str, record_id: str, matches: int) -> None:
        super().__init__(f"no unique description of {entity} {record_id!r} ({matches} records match the most specific)")
        self.entity = entity
        self.record_id = record_id
        self.matches = matches


def record_key(values: list[Any]) -> str:
    """A row key in the form `envs.state.canonical_dump` uses (JSON list of primary-key values)."""
    return json.dumps(list(values), separators=(",", ":"))


class _HasFolder(Protocol):
    name: str
    folder: Path


def world_constraints(world: _HasFolder) -> ModuleType:
    """The world's ``constraints.py`` module (loaded once per folder)."""
    path = Path(world.folder) / "constraints.py"
    if not path.exists():
        raise LookupError(f"world {world.name!r} has no constraints.py: constraint-guided synthesis "
                          "and verification are not available for it")
    return load_module(path, world.name)
