"""Grounding a generation in its world: its gold calls run on the seeded state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from data.records import StateRef, ToolCall
from data.self_play import Generation
from envs import state as st
from envs.world import World


@dataclass
class WorldCheck:
    """Whether a generation's gold calls run on the world's base state, and where they lead."""

    ok: bool
    reason: str | None = None  # unknown_tool, unknown_menu_tool, call_failed
    detail: str = ""
    initial_state: StateRef | None = None
    target_state_hash: str | None = None
    target_diff: list[dict[str, Any]] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)


def validate_on_world(world: World, generation: Generation, seed: int = 0, scale: int = 30,
                      ref: StateRef | None = None) -> WorldCheck:
    """Every gold and menu tool exists in `world`, and the gold calls, run in order on a fresh
    copy of the base state (`ref`, or seed/scale), all succeed (reads included)."""
    unknown = [c.name for c in generation.calls if c.name not in world.tools]
    if unknown:
        return WorldCheck(False, "unknown_tool", f"not tools of {world.name}: {unknown}")
    unknown_menu = [n for n in generation.menu_names if n not in world.tools]
    if unknown_menu:
        return WorldCheck(False, "unknown_menu_tool", f"menu tools not in {world.name}: {unknown_menu}")
    ref = ref or world.state_ref(seed, scale)
    env = world.env(ref)
    try:
        before = st.canonical_dump(env.conn)
        observations = []
        for call in generation.calls:
            obs = env.call(ToolCall(name=call.name, arguments=dict(call.arguments)))
            if not obs.ok:
                return WorldCheck(False, "call_failed", f"{call.name}: {obs.error} {obs.code}: {obs.detail}", ref)
            observations.append(obs.content)
        diff = st.diff_dumps(before, st.canonical_dump(env.conn))
        return WorldCheck(True, None, "", ref, env.state_hash(), [c.as_dict() for c in diff], observations)
    finally:
        env.close()
