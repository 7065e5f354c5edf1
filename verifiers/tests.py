"""Test-based verification of workspace tasks (Terminal-Task-Gen, SWE-rebench V2; methods.md §5).

The agent's final workspace is rebuilt without a model: the trajectory's tool calls are
replayed in order in a fresh sandbox on the task's initial workspace (commands run with a
fixed clock, so replay reproduces rollout). The task's own test files, checked against the
sha256 recorded at synthesis, are then run on a copy of that workspace in another fresh
sandbox, collected only from their own folder (see `WorkspaceWorld.run_tests_batch`:
explicit ini and rootdir, `--noconftest`, no plugins, isolated interpreter, workspace code
only in subprocesses). Nothing the agent writes (tests, conftest.py, pytest.ini, setup.cfg,
sitecustomize.py, an exiting module) can change what is collected or how it is judged.

A trajectory passes when every FAIL_TO_PASS and every PASS_TO_PASS test passes, the episode
ended cleanly, and the task passes its self-audit (once per task: the untouched workspace
fails every FAIL_TO_PASS test and the reference solution passes them all). Score:
fraction of FAIL_TO_PASS tests passed, halved when a PASS_TO_PASS test broke.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

from data.records import Task, ToolCall, Trajectory, Verdict
from envs.registry import get_world
from envs.workspace import TestReport, WorkspaceEnv, WorkspaceWorld
from verifiers.base import BaseVerifier, VerifierOptions, episode_checks, register

_AUDITS: dict[tuple[str, str, str], tuple[bool, list[str]]] = {}
_AUDIT_LOCK = threading.Lock()


def tests_of(task: Task) -> tuple[dict[str, str], list[str], list[str]]:
    """(test files, FAIL_TO_PASS ids, PASS_TO_PASS ids) of a task; ValueError if the files
    are missing or do not match the hashes recorded at synthesis."""
    record = task.verification.tests
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict) or not record["files"]:
        raise ValueError("task has no test files")
    files: dict[str, str] = record["files"]
    recorded = record.get("sha256") or {}
    if set(recorded) != set(files):
        raise ValueError("test files do not match the recorded file list")
    for name, body in files.items():
        if hashlib.sha256(body.encode()).hexdigest() != recorded[name]:
            raise ValueError(f"test file {name} does not match its recorded sha256")
    f2p = list(task.verification.fail_to_pass)
    if not f2p:
        raise ValueError("task has no FAIL_TO_PASS tests")
    return files, f2p, list(task.verification.pass_to_pass)


def replay(world: WorkspaceWorld, task: Task, calls: list[ToolCall]) -> WorkspaceEnv:
    """A fresh workspace of the task with `calls` replayed in order (the caller closes it)."""
    env = world.env(task.initial_state)
    try:
        for call in calls:
            env.call(call)  # failures are part of the record; the workspace is what counts
    except BaseException:
        env.close()
        raise
    return env


def audit_reasons(before: TestReport, after: TestReport, f2p: list[str], p2p: list[str]) -> list[str]:
    """Why a task's checks are unsound: the untouched workspace must fail every FAIL_TO_PASS
    test and the reference must pass every test."""
    reasons = []
    if not (before.ok and after.ok):
        reasons.append(f"audit tests did not run: {(before.detail if not before.ok else after.detail)[-300:]}")
        return reasons
    early = [t for t in f2p if before.passed(t)]
    if early:
        reasons.append(f"untouched workspace already passes {early}")
    missed = [t for t in f2p + p2p if not after.passed(t)]
    if missed:
        reasons.append(f"reference solution fails {missed}")
    return reasons


class TestsVerifier(BaseVerifier):
    """Runs a workspace task's hidden tests on the trajectory's final workspace."""

    __test__ = False  # not a pytest test class, whatever its name
    name = "tests_pass"
    version = "1.0.0"
    basis_name = "TESTS"
    audit_kinds = frozenset()  # audits itself per task (untouched workspace fails, reference passes)

    options: VerifierOptions  # built from one options object (`BaseVerifier.__init__`)

    def applies_to(self, task: Task) -> bool:
        if task.verification.tests is None:
            return False
        try:
            return isinstance(get_world(task.world), WorkspaceWorld)
        except KeyError:
            return False

    def _verdict(self, task: Task, trajectory: Trajectory, passed: bool, score: float, reasons: list[str],
                 details: dict[str, Any]) -> Verdict:
        return Verdict(trajectory_id=trajectory.id, task_id=task.id, verifier=self.name,
                       verifier_version=self.version, passed=passed, score=round(score, 6), reasons=reasons,
                       details=details)

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        world = get_world(task.world)
        if not isinstance(world, WorkspaceWorld):
            return self._verdict(task, trajectory, False, 0.0, [f"world {task.world!r} has no workspace"], {})
        try:
            files, f2p, p2p = tests_of(task)
        except ValueError as exc:
            return self._verdict(task, trajectory, False, 0.0, [str(exc)], {})
        key = (task.id, task.verification.tests.get("digest", ""), task.initial_state.state_hash)
        with _AUDIT_LOCK:
            audit = _AUDITS.get(key)
        envs = [replay(world, task, trajectory.actions())]
        try:
            replay_hash = envs[0].state_hash()
            jobs = [(envs[0].root, files)]
            if audit is None:
                envs.append(replay(world, task, task.reference_solution))
                jobs += [(world.build(task.initial_state), files), (envs[1].root, files)]
            reports = world.run_tests_batch(jobs)
        finally:
            for env in envs:
                env.close()
        if audit is None:
            problems = audit_reasons(reports[1], reports[2], f2p, p2p)
            audit = (not problems, problems)
            with _AUDIT_LOCK:
                _AUDITS[key] = audit
        report = reports[0]
        got_f2p = [t for t in f2p if report.passed(t)]
        got_p2p = [t for t in p2p if report.passed(t)]
        score = len(got_f2p) / len(f2p) * (1.0 if len(got_p2p) == len(p2p) else 0.5) if report.ok else 0.0
        reasons: list[str] = []
        if not report.ok:
            reasons.append(f"tests did not run: {report.detail[-300:]}")
        if len(got_f2p) < len(f2p):
            reasons.append(f"FAIL_TO_PASS tests still failing: {sorted(set(f2p) - set(got_f2p))}")
        if len(got_p2p) < len(p2p):
            reasons.append(f"PASS_TO_PASS tests broken: {sorted(set(p2p) - set(got_p2p))}")
        if not audit[0]:
            reasons += [f"task audit failed: {r}" for r in audit[1]]
            score = 0.0
        score, clean, episode = episode_checks(trajectory, replay_hash, score, self.options.require_clean_termination, task)
        reasons += episode
        passed = (report.ok and len(got_f2p) == len(f2p) and len(got_p2p) == len(p2p) and audit[0]
                  and (clean or not self.options.require_clean_termination))
        details = {"final_hash": replay_hash, "fail_to_pass": {t: report.outcomes.get(t, "missing") for t in f2p},
                   "pass_to_pass": {t: report.outcomes.get(t, "missing") for t in p2p}, "audit_ok": audit[0],
                   "tests_digest": (task.verification.tests or {}).get("digest"), "test_seconds": round(report.duration_s, 3)}
        return self._verdict(task, trajectory, passed, score, reasons, details)


register(TestsVerifier.name)(TestsVerifier)
