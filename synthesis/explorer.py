"""Explorer: depth-limited beam search over typed tool calls to find goal states and the
shortest tool-call paths that reach them (LOGIGEN §1, programmatic CPU default).

Candidate calls come from the world's `candidate_calls` hook (arguments drawn from the
database). States are deduplicated by hash, so every reached state keeps the shortest
path found to it; calls that a rule rejects leave the state unchanged and are pruned.
"""

from __future__ import annotations

import functools
import random
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from data.records import ToolCall
from envs import state as st
from envs.world import Env, World


@dataclass
class Reached:
    """A state the search reached, with the shortest path found to it."""

    state_hash: str
    path: list[ToolCall]
    snapshot: bytes
    rejected: dict[str, int] = field(default_factory=dict)  # rule id -> rejections on the way
    # tables the path's calls may have written (a superset of those that differ from the
    # root's); None when unknown
    written: frozenset[str] | None = frozenset()


@dataclass
class ExplorerConfig:
    max_depth: int = 2
    beam_width: int = 6
    max_expansions: int = 2_000
    step_penalty: float = 0.5  # goal preference per step beyond the first


def explore(world: World, env: Env, focus: dict[str, Any], cfg: ExplorerConfig, rng: random.Random) -> tuple[Reached, dict[str, Reached], dict[str, int]]:
    """Search from `env`'s state. Returns (root, reached states by hash, rule rejections)."""
    root = Reached(env.state_hash(), [], env.snapshot())
    seen: dict[str, Reached] = {root.state_hash: root}
    rejections: dict[str, int] = {}
    frontier = [root]
    expansions = 0
    for _depth in range(cfg.max_depth):
        next_frontier: list[Reached] = []
        for node in frontier:
            base = st.restore(node.snapshot)

            @functools.cache
            def hashes(base: sqlite3.Connection = base) -> st.StateHashes:
                return st.StateHashes.of(base)  # once a call succeeds: children re-read what they write

            for call in world.design.candidate_calls(base, focus):
                if expansions >= cfg.max_expansions:
                    break
                expansions += 1
                child = world.copy_env(node.snapshot, hashes)
                obs = child.call(call)
                if not obs.ok:
                    if obs.code:
                        rejections[obs.code] = rejections.get(obs.code, 0) + 1
                    child.close()
                    continue
                h = child.state_hash()
                if h not in seen:
                    own = child.written
                    written = None if own is None or node.written is None else node.written | own
                    reached = Reached(h, [*node.path, call], child.snapshot(), written=written)
                    seen[h] = reached
                    next_frontier.append(reached)
                child.close()
            base.close()
        if len(next_frontier) > cfg.beam_width:
            next_frontier = rng.sample(next_frontier, cfg.beam_width)
        frontier = next_frontier
        if not frontier:
            break
    return root, seen, rejections
