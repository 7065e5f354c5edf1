"""The unsafe backend: it opens only with explicit consent and still keeps its limits."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from envs.sandbox import SandboxError, open_sandbox
from tests.envs.sandbox.conftest import FAST, unsafe


def test_unsafe_needs_explicit_consent(tmp_path: Path, caplog) -> None:
    for consent in ({}, {"allow_unsafe": False}, {"allow_unsafe": "yes"}):
        with pytest.raises(SandboxError, match="allow_unsafe=True"):
            open_sandbox("unsafe", None, FAST, **consent)
    with caplog.at_level(logging.WARNING), unsafe() as sb:
        assert sb.backend == "unsafe"
        r = sb.run("pwd; echo hi > f")
        assert r.ok and r.stdout.strip() == str(sb.workdir) and sb.read_file("f") == b"hi\n"
        r = sb.run("sleep 5", timeout=0.5)
        assert r.timed_out and r.killed_reason == "timeout" and r.duration_s < 3
    assert "UNSAFE" in caplog.text
