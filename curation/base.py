"""Curation strategies: which trajectories become SFT data and which tasks RL data.

A strategy is registered by name, with the pydantic model of its options
(``@register("name", options=OptionsModel)``; `RunConfig.curation_options` is validated
against it), and listed in `CURATORS`' built-ins or a ``trajforge.curators`` entry point.
It receives plain records and returns selections with a reason for every pick and a
counted reason for every drop. `outcome` (pass rates) is the default; topology-based
curation (methods.md §4) registers beside it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
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


MALFORMED_CALL = "invalid_tool_call"  # the name `rollout.agent` gives a call the parser could not read


def is_error_result(content: Any) -> bool:
    """Whether a tool message's content is the world's error object (`envs.calls.error_observation`
    and the agent's parse error: a JSON object with an ``"error"`` key), read as JSON, not by words."""
    if not isinstance(content, str) or not content.lstrip().startswith("{"):
        return False
    try:
        body = json.loads(content)
    except ValueError:
        return False
    return isinstance(body, dict) and bool(body.get("error"))


def failed_message_turns(messages: Sequence[Mapping[str, Any]], tool_names: Iterable[str] | None = None) -> set[int]:
    """Indices of the assistant messages in `messages` that hold a failed call: one the parser
    could not read (`MALFORMED_CALL`), one to a tool not in `tool_names` (when given), or one
    whose tool result is an error (`is_error_result`, matched by `tool_call_id`)."""
    known = set(tool_names) if tool_names is not None else None
    owner: dict[str, int] = {}
    out: set[int] = set()
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or c
                name = fn.get("name")
                if name == MALFORMED_CALL or (known is not None and name not in known):
                    out.add(i)
                if c.get("id"):
                    owner[str(c["id"])] = i
        elif m.get("role") == "tool" and is_error_result(m.get("content")):
            j = owner.get(str(m.get("tool_call_id")))
            if j is None:  # a result no call of the row names: the nearest assistant turn before it made it
                j = next((k for k in range(i - 1, -1, -1) if messages[k].get("role") == "assistant"), None)
            if j is not None:
                out.add(j)
    return out


def failed_turns(t: Trajectory) -> set[int]:
    """Indices in `t.messages` of the assistant turns that failed, from the trajectory's own
    records: the turns of its failed steps (`Step.error`: tool errors, rule violations, unknown
    tools, bad arguments, calls the parser could not read; step turn k is the k-th assistant
    message, as `rollout.branching` reads it), and the turns `failed_message_turns` finds in its
    messages (an error result, a malformed call). A failed step whose turn has no assistant
    message raises `ValueError`: the mistake cannot be located, so no row may be made of it."""
    assistant = [i for i, m in enumerate(t.messages) if m.get("role") == "assistant"]
    out = failed_message_turns(t.messages)
    for s in t.steps:
        if s.error:
            if not 1 <= s.turn <= len(assistant):
                raise ValueError(f"{t.id}: failed step {s.index} names turn {s.turn}, but the trajectory has "
                                 f"{len(assistant)} assistant messages")
            out.add(assistant[s.turn - 1])
    return out


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
