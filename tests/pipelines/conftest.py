"""Shared by the pipeline tests: a counter of the scripted model's calls, and for the
command-line tests a guard that no command reaches Prefect and a check of one-line errors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from pipelines import cli


@pytest.fixture
def count_calls(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts every call the scripted policy (the model here) answers."""
    from rollout.policies import ScriptedPolicy

    calls: Counter = Counter()
    original = ScriptedPolicy.chat

    async def chat(self, messages, tools, sampling):  # type: ignore[no-untyped-def]
        calls[self.name] += 1
        return await original(self, messages, tools, sampling)

    monkeypatch.setattr(ScriptedPolicy, "chat", chat)
    return calls


@pytest.fixture
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any command that reached a flow (and so Prefect) fails the test."""

    def flows() -> None:
        raise AssertionError("the command reached Prefect")

    monkeypatch.setattr(cli, "_flows", flows)


Fails = Callable[..., str]


@pytest.fixture
def fails(no_prefect: None) -> Fails:
    """`fails(args, *expected)`: the command exits 1 with one `error:` line holding each of
    `expected` and no traceback; returns that line."""

    def check(args: list[str], *expected: str) -> str:
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
        assert "Traceback" not in result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        for text in expected:
            assert text in lines[0], lines[0]
        return lines[0]

    return check
