"""Shared by the envs tests: the airline world on its probes' fixture rows."""

from __future__ import annotations

import pytest

from envs.world import Env, World
from envs.worlds.airline.probes import FIXTURE


@pytest.fixture()
def env(airline: World) -> Env:
    """An airline environment on the probes' fixture rows (a module may define its own `env`)."""
    conn = airline.empty_state()
    conn.executescript(FIXTURE)
    return Env(airline, conn)
