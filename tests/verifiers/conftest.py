"""Fixtures of the verifier tests: constraint-guided airline tasks, and per world the tasks
whose requests depend on each other."""

from __future__ import annotations

import pytest

from data.records import Task
from envs.constraints import world_constraints
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from tests.verifiers.dependent import NEW_RECORD


@pytest.fixture(scope="session")
def cg_tasks() -> list[Task]:
    return get_method("constraint_guided")(
        SynthesisConfig(method="constraint_guided", n_tasks=4, seed=2), get_world("airline")
    ).tasks


@pytest.fixture(scope="session", params=list(NEW_RECORD))
def dependent(request: pytest.FixtureRequest) -> tuple[str, list[Task]]:
    world = get_world(request.param)
    n = 5 * len(world_constraints(world).KINDS)  # the kinds come in turn: every one five times
    result = get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", n_tasks=n, seed=0), world)
    return request.param, [t for t in result.tasks if t.metadata.get("depends_on")]
