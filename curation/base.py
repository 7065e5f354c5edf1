"""Curation strategies: which trajectories become SFT data and which tasks RL data.

A strategy is registered by name and receives plain records; it returns selections with
a reason for every pick and a counted reason for every drop. `outcome` (pass rates) is
the built-in; topology-based curation (methods.md §4) registers beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from data.records import Task, Trajectory, Verdict
from data.registry import Registry


@dataclass
class RLPick:
    task: Task
    pass_rate: float
    n_trials: int
    reason: str


@dataclass
class Selection:
    sft: list[tuple[Trajectory, Verdict]] = field(default_factory=list)
    rl: list[RLPick] = field(default_factory=list)
    drops: Counter = field(default_factory=Counter)  # "sft:<reason>" / "rl:<reason>" -> count
    stats: dict = field(default_factory=dict)


class Curator(Protocol):
    name: str

    def select(self, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]) -> Selection: ...


CURATORS: Registry[Callable[[], Curator]] = Registry("curation strategy", ["curation.outcome", "curation.topology"])
register = CURATORS.register


def get_curator(name: str) -> Curator:
    return CURATORS.get(name)()
