"""Shared fixtures: a private Prefect home per test session, synthesized tasks."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="trajforge-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

from data.records import Task  # noqa: E402
from envs.registry import get_world  # noqa: E402
from envs.world import World  # noqa: E402
from synthesis.base import SynthesisConfig, get_method  # noqa: E402


@pytest.fixture(scope="session")
def airline() -> World:
    return get_world("airline")


@pytest.fixture(scope="session")
def tasks(airline: World) -> list[Task]:
    """One task of each boundary kind (7) from a fixed seed."""
    result = get_method("logic_driven")(SynthesisConfig(n_tasks=7, seed=11), airline)
    assert len(result.tasks) == 7
    return result.tasks


BAGS_WRITES = {"update_baggage", "book_reservation"}


def find_compound_bags(airline: World, tasks: list[Task]) -> Task:
    """A bags-at-limit task whose two writes are adding bags and booking (either order
    reaches the target): from `tasks`, else from the next seed that draws one."""

    def compound(found: list[Task]) -> Task | None:
        return next((t for t in found if t.metadata["boundary"] == "bags_at_limit" and sorted(
            c.name for turn in t.dialogue for c in turn.tool_calls if c.name in BAGS_WRITES) == sorted(BAGS_WRITES)),
            None)

    task, seed = compound(tasks), 12
    while task is None and seed < 20:
        task = compound(get_method("logic_driven")(SynthesisConfig(n_tasks=7, seed=seed), airline).tasks)
        seed += 1
    assert task is not None, "no compound bags-at-limit task"
    return task


@pytest.fixture(scope="session")
def compound_bags(airline: World, tasks: list[Task]) -> Task:
    return find_compound_bags(airline, tasks)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory):
    """A real `prefect server start` on loopback for tests that run flows in subprocesses
    or need schedules (which never fire against Prefect's temporary server)."""
    from pipelines.serve import PrefectServer

    server = PrefectServer(home=tmp_path_factory.mktemp("prefect-server-home"))
    yield server.start()
    server.stop()
