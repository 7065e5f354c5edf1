"""Strategy-guided exploration (SGE, methods.md §5): before acting, the agent samples a
short strategy at a high temperature in a separate model call, then acts at a low
temperature with the strategy in its system prompt. With reflection, the strategies (and
outcomes, when known) of earlier trials of the same task are shown, so new trials differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data.records import Sampling, Trajectory

STRATEGY_INSTRUCTIONS = """Before you act, plan. Write a short strategy for this conversation \
in 2 to 4 sentences: what you must find out, which tools you will use and in which order, what \
the policy requires you to check or confirm with the user. Do not call any tool now and do not \
answer the user: write only the strategy.

Tools you can use: {tools}"""

REFLECTION_INTRO = """Earlier attempts at this same request used these strategies:
{earlier}
Write a strategy that is clearly different from all of them; learn from their outcomes."""

STRATEGY_SECTION = "\n\n## Your strategy for this conversation\n{strategy}"
MAX_STRATEGY_CHARS = 1200


class StrategyConfig(BaseModel):
    """Options of strategy-guided exploration; off by default."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    temperature: float = Field(1.0, ge=0)  # for the strategy call
    max_tokens: int = Field(96, ge=1)  # for the strategy call
    act_temperature: float = Field(0.2, ge=0)  # for every action once a strategy is set
    reflection: bool = False  # show earlier trials' strategies and outcomes (trials run in order)
    max_reflections: int = Field(4, ge=0)  # how many earlier trials are shown


@dataclass(frozen=True)
class EarlierTrial:
    """What reflection shows of an earlier trial of the same task."""

    strategy: str
    outcome: str | None = None


def strategy_messages(system: str, first_user: str, tool_names: Sequence[str],
                      earlier: Sequence[EarlierTrial], cfg: StrategyConfig) -> list[dict[str, Any]]:
    """The strategy call's prompt: the agent's system prompt plus the planning instructions
    (and earlier trials, with reflection), then the user's first message."""
    text = system + "\n\n" + STRATEGY_INSTRUCTIONS.format(tools=", ".join(tool_names) or "(none)")
    shown = list(earlier)[-cfg.max_reflections:] if cfg.reflection and cfg.max_reflections else []
    if shown:
        lines = [f"{i}. {e.strategy or '(no strategy)'}" + (f" Outcome: {e.outcome}" if e.outcome else "")
                 for i, e in enumerate(shown, 1)]
        text += "\n\n" + REFLECTION_INTRO.format(earlier="\n".join(lines))
    return [{"role": "system", "content": text}, {"role": "user", "content": first_user}]


def strategy_sampling(base: Sampling, cfg: StrategyConfig) -> Sampling:
    return base.model_copy(update={"temperature": cfg.temperature, "max_tokens": cfg.max_tokens})


def act_sampling(base: Sampling, cfg: StrategyConfig) -> Sampling:
    return base.model_copy(update={"temperature": cfg.act_temperature})


def clean_strategy(text: str) -> str:
    """The strategy as it goes into the system prompt: trimmed, tags removed, clipped."""
    out = text.replace("<strategy>", "").replace("</strategy>", "").strip()
    return out[:MAX_STRATEGY_CHARS].strip()


def describe_outcome(trajectory: Trajectory) -> str:
    """What is known of a trial at rollout time: how it ended, its tool calls and errors."""
    calls = len(trajectory.actions())
    errors = sum(trajectory.error_counts.values())
    kinds = ", ".join(sorted(trajectory.error_counts))
    text = f"ended by {trajectory.termination} after {calls} tool call{'s' if calls != 1 else ''}"
    return text + (f", {errors} error{'s' if errors != 1 else ''} ({kinds})." if errors else ", no errors.")
