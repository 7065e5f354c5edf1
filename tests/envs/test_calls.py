"""The shared tool-call path (`envs.calls`): a call is looked up, validated and run, and every
failure comes back as an `Observation`, never raised."""

from __future__ import annotations

import json
import sqlite3
from types import SimpleNamespace
from typing import Any

from data.records import ToolCall
from envs.calls import Observation, ToolEnv, error_observation
from envs.tools import MESSAGE_CHARS, ToolSpec, build_spec, tool


@tool(write=True)
def add(db: sqlite3.Connection, a: int, b: int = 1) -> dict:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return {"sum": a + b}


class Echo(ToolEnv):
    """A ToolEnv that runs its tools on no database."""

    def __init__(self) -> None:
        self.world = SimpleNamespace(tools={"add": build_spec(add)})
        self.ran: list[dict[str, Any]] = []

    def _execute(self, spec: ToolSpec, args: dict[str, Any]) -> Observation:
        self.ran.append(args)
        return Observation(content=json.dumps(spec.fn(None, **args)), wrote=spec.write)


def test_a_valid_call_runs_with_checked_arguments() -> None:
    env = Echo()
    obs = env.call(ToolCall(name="add", arguments={"a": "2"}))
    assert obs.ok and json.loads(obs.content) == {"sum": 3} and obs.wrote
    assert env.ran == [{"a": 2}] and obs.latency_s >= 0


def test_failures_are_observations_and_never_run_the_tool() -> None:
    env = Echo()
    obs = env.call(ToolCall(name="subtract", arguments={}))
    assert (obs.error, obs.code) == ("unknown_tool", "unknown_tool") and "tools are: add" in obs.content
    obs = env.call(ToolCall(name="add", arguments={"a": 1, "c": 2}))
    assert (obs.error, obs.code) == ("bad_arguments", "unknown_argument") and not obs.ok
    obs = env.call(ToolCall(name="add", arguments={"a": "two"}))
    assert (obs.error, obs.code) == ("bad_arguments", "wrong_type")
    assert json.loads(obs.content) == {"error": "bad_arguments", "code": "wrong_type", "message": obs.detail}
    assert env.ran == []


def test_error_messages_are_clipped() -> None:
    obs = error_observation("tool_error", "X", "m" * (MESSAGE_CHARS + 500))
    assert obs.detail is not None and obs.detail.startswith("m" * MESSAGE_CHARS)
    assert obs.detail.endswith("[500 characters cut]") and json.loads(obs.content)["message"] == obs.detail
    long_name = "t" * 10_000  # a model's 10 KB tool name does not come back whole
    assert len(Echo().call(ToolCall(name=long_name, arguments={})).content) < 1000
