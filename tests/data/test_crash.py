"""Named crash points: a no-op unless `TRAJFORGE_CRASH_AT` names the point (and its hit), then
SIGKILL with no cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from data import crash
from tests.paths import ROOT

SCRIPT = """
import atexit, sys
from data.crash import crashpoint
atexit.register(lambda: print("cleanup", flush=True))
for i in range(3):
    crashpoint("other.point")
    print("hit", i, flush=True)
    crashpoint("store.commit")
print("done", flush=True)
"""


def _run(spec: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != crash.ENV}
    if spec is not None:
        env[crash.ENV] = spec
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize(("spec", "hits"), [(None, 3), ("store.commit:9", 3), ("store.commit", 1),
                                            ("store.commit:2", 2), ("nowhere", 3)])
def test_the_named_point_kills_at_its_nth_hit(spec: str | None, hits: int) -> None:
    out = _run(spec)
    assert out.stdout.splitlines()[:hits] == [f"hit {i}" for i in range(hits)]
    if hits == 3:  # never killed: runs to the end, cleanup included
        assert out.returncode == 0 and out.stdout.splitlines()[3:] == ["done", "cleanup"]
    else:
        assert out.returncode == -signal.SIGKILL and len(out.stdout.splitlines()) == hits  # no cleanup ran


def test_a_point_not_named_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(crash.ENV, raising=False)
    crash.crashpoint("store.commit")
    monkeypatch.setenv(crash.ENV, "some.other.point:1")
    crash.crashpoint("store.commit")  # still alive
    assert crash._hits["store.commit"] == 0
