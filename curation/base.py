"""Curation strategies: which trajectories become SFT data and which tasks RL data.

A strategy is registered by name, with the pydantic model of its options
(``@register("name", options=OptionsModel)``; `RunConfig.curation_options` is validated
against it), and listed in `CURATORS`' built-ins or a ``trajforge.curators`` entry point.
It receives plain records and returns selections with a reason for every pick and a
counted reason for every drop. `outcome` (pass rates) is the default; topology-based
curation (methods.md §4) registers beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from data.records import Task, Trajectory, Verdict
from data.registry import Registry


@dataclass
class RLPick:
    task: Task
    pass_rate: float
    n_trials: int
    reason: str
    key: float | None = None  # the sampling key under an rl budget (`curation.topology.sampling_keys`)


@dataclass
class Selection:
    sft: list[tuple[Trajectory, Verdict]] = field(default_factory=list)
    sft_reasons: dict[str, str] = field(default_factory=dict)  # sft trajectory id -> why it was kept
    rl: list[RLPick] = field(default_factory=list)
    drops: Counter = field(default_factory=Counter)  # "sft:<reason>" / "rl:<reason>" -> count
    stats: dict = field(default_factory=dict)


def combine_stats(parts: list[dict[str, Any]], means: Mapping[str, str | tuple[str, str]]) -> dict[str, Any]:
    """A curator's stats of several shards as one: counts and histograms add up
    (`data.parts.sum_stats`), and each rate in `means` is recomputed: a (numerator,
    denominator) pair of counts gives the exact ratio (``policy_pass_rate`` from
    ``policy_passes`` / ``policy_trials``); a single count weights the shards' rates (a mean
    of per-task scores weighted by the tasks it averages)."""
    from data.parts import sum_stats

    out = sum_stats(parts)
    for rate, how in means.items():
        if isinstance(how, tuple):
            num, den = out.get(how[0]), out.get(how[1])
            if isinstance(num, int | float) and isinstance(den, int | float):
                out[rate] = round(num / den, 4) if den else 0.0
            continue
        got = [(p[rate], p.get(how, 0)) for p in parts if isinstance(p.get(rate), int | float)]
        total = sum(w for _, w in got)
        if got:
            out[rate] = round(sum(r * w for r, w in got) / total, 4) if total else 0.0
    return out


def failed_calls(t: Trajectory) -> int:
    """Steps of `t` that failed: tool errors and calls that did not parse."""
    return sum(1 for s in t.steps if s.error)


def cleanest_first(t: Trajectory) -> tuple[int, bool, int, str]:
    """Sort key among a task's rows: fewest failed calls, then the reference dialogue before
    a policy rollout, then trial and id (so the first of duplicates is the cleanest)."""
    return failed_calls(t), not t.reference, t.trial, t.id


class Curator(Protocol):
    name: str

    def select(self, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]) -> Selection: ...


CURATORS: Registry[Callable[..., Curator]] = Registry("curation strategy", ["curation.outcome", "curation.topology"],
                                                    group="curators")
register = CURATORS.register


def get_curator(name: str, options: Mapping[str, Any] | None = None) -> Curator:
    """The strategy `name` built with its options (validated against its options model)."""
    return CURATORS.build(name, options)
