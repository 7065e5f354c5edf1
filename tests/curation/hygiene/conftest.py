"""Fixtures of the hygiene tests: synthesized tasks (airline; retail and telecom) and a
registered toy evaluation set."""

from __future__ import annotations

from typing import Any

import pytest

from curation.hygiene import EVAL_SETS, register_eval_set
from data.records import Task
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from tests.curation.hygiene.planted import EVAL_TEXT


@pytest.fixture(scope="session")
def many_tasks() -> list[Task]:
    world = get_world("airline")
    out: list[Task] = []
    for method in ("logic_driven", "constraint_guided"):
        for seed in (0, 1):
            out += get_method(method)(
                SynthesisConfig(method=method, n_tasks=7, seed=seed), world
            ).tasks
    assert len({t.id for t in out}) == len(out)
    return out


@pytest.fixture()
def eval_set() -> Any:
    register_eval_set(
        "toy_eval",
        [EVAL_TEXT, "What is the baggage allowance for a gold member?"],
        tool_sequences=['update_baggage({"reservation_id":"RZZ1","total_bags":3})'],
    )
    yield "toy_eval"
    EVAL_SETS.pop("toy_eval", None)


@pytest.fixture(scope="session")
def world_tasks() -> dict[str, list[Task]]:
    return {
        w: get_method("logic_driven")(SynthesisConfig(world=w, n_tasks=3, seed=1), get_world(w)).tasks
        for w in ("retail", "telecom")
    }
