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


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory):
    """A real `prefect server start` on loopback for tests that run flows in subprocesses
    or need schedules (which never fire against Prefect's temporary server)."""
    from pipelines.serve import PrefectServer

    server = PrefectServer(home=tmp_path_factory.mktemp("prefect-server-home"))
    yield server.start()
    server.stop()
