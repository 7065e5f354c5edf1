"""`synthesis.explorer`: the beam search over typed tool calls keeps one shortest path per
reached state, each replaying to that state."""

from __future__ import annotations

import random

from envs import state as st
from envs.world import World
from synthesis.explorer import ExplorerConfig, explore
from synthesis.set_designer import design_states


def test_explorer_dedups_states_and_finds_shortest_paths(airline: World) -> None:
    variant, ref = design_states(airline, seed=4, scale=30, n=1)[0]
    env = airline.env(ref)
    root, reached, rejections = explore(airline, env, variant.focus, ExplorerConfig(max_depth=2), random.Random(0))
    assert root.state_hash == ref.state_hash and len(reached) > 5
    for r in reached.values():
        replayed = airline.env(ref)
        for call in r.path:
            assert replayed.call(call).ok
        assert replayed.state_hash() == r.state_hash
        assert len(r.path) <= 2
    assert len({r.state_hash for r in reached.values()}) == len(reached)
    assert st.state_hash(st.restore(root.snapshot)) == root.state_hash


def test_depth_and_expansions_bound_the_search(airline: World) -> None:
    variant, ref = design_states(airline, seed=4, scale=30, n=1)[0]
    root, reached, _ = explore(airline, airline.env(ref), variant.focus, ExplorerConfig(max_depth=1),
                               random.Random(0))
    assert reached[root.state_hash] is root and root.path == []
    assert all(len(r.path) <= 1 for r in reached.values())
    _, capped, _ = explore(airline, airline.env(ref), variant.focus, ExplorerConfig(max_depth=2, max_expansions=3),
                           random.Random(0))
    assert len(capped) <= 1 + 3  # the root and at most one state per expansion
    _, none, _ = explore(airline, airline.env(ref), variant.focus, ExplorerConfig(max_depth=0), random.Random(0))
    assert list(none) == [root.state_hash]
