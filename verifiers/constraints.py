"""Constraint satisfaction V(τ, C) (CoVe, methods.md §2): outcomes, not a call sequence.

The trajectory's write calls are replayed, in order, on a fresh copy of the task's initial
state (reads are skipped: they never count); each constraint of `task.verification.constraints`
is checked on the final state by the world's ``constraints.py``. Score (ours)::

    score = satisfied / |C| * 1 / (1 + 0.5 * redundant_writes)

Redundant writes, precisely: a write is *effective* when the call succeeded and changed
the canonical state (failed or no-op writes are not counted). Each satisfied constraint
names the record that satisfies it and claims the last effective write whose cell diff
touches that record; a write is claimed at most once. ``redundant_writes`` = effective
writes − claimed writes: repeated changes, writes on records no constraint is about, and
writes that left a constraint unmet all count. `passed` = score == 1.0 and a clean
termination (as for the state verifier).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from data.records import Task, ToolCall, Trajectory, Verdict
from envs import state as st
from envs.constraints import load_constraints, world_constraints
from envs.registry import get_world
from verifiers.base import WRITE_KINDS, OutcomeVerifier, VerifierOptions, episode_checks, register
from verifiers.state import _forget, replayer_for, write_calls

REDUNDANCY_WEIGHT = 0.5


def constraint_score(satisfied: int, total: int, redundant: int, weight: float = REDUNDANCY_WEIGHT) -> float:
    """satisfied/|C| · 1/(1 + weight·redundant) (ours); 0 for an empty set."""
    if total <= 0:
        return 0.0
    return satisfied / total / (1 + weight * redundant)


@dataclass
class ConstraintScore:
    satisfied: list[bool]
    details: list[dict[str, Any]]
    replayed_writes: int
    failed_writes: int
    effective_writes: int
    redundant_writes: int
    final_hash: str
    score: float
    claimed: list[int] = field(default_factory=list)  # indices into the calls of the claimed writes


def score_constraints(task: Task, calls: list[ToolCall], weight: float = REDUNDANCY_WEIGHT) -> ConstraintScore:
    """Replay `calls`' writes on a fresh initial state and score them against the task's set.

    Runs on the cached copy of the task's initial state (`verifiers.state.replayer_for`): the
    writes run in a transaction that is rolled back afterwards and only the rows they touched
    are re-read. Same results as `score_constraints_full`, which rebuilds and dumps the state."""
    if task.verification.constraints is None:
        raise ValueError(f"task {task.id} carries no constraint set (verification.constraints)")
    r = replayer_for(task.world, task.initial_state)
    if r is None:
        return score_constraints_full(task, calls, weight)
    constraints = load_constraints(task.verification.constraints)
    world = r.world
    module = r.memo.get("constraints.py") or r.memo.setdefault("constraints.py", world_constraints(world))
    replayed = failed = 0
    effective: list[tuple[int, set[tuple[str, str]]]] = []  # (call index, rows it changed)
    made: list[ToolCall] = []
    amounts: list[list[float]] = []  # what each write moved in the ledger (`Replayer.remember_amounts`)
    top = r.ledger_top
    tools = world.tools
    last = max((i for i, c in enumerate(calls) if c.name in tools and tools[c.name].write), default=-1)
    r.tracked.begin()
    try:
        prev: st.TrackedView | None = None  # None: the initial state
        for i, call in write_calls(world.tools, calls):
            replayed += 1
            ok = r.env.call(call).ok
            if r.track_amounts:
                got, top = r.ledger_added(top) if ok else ([], top)
                made.append(call)
                amounts.append(got)
            if not ok:
                failed += 1
                continue
            if not r.env.conn.in_transaction:  # a tool ended the transaction: the direct way
                r.tracked.valid = False
                break
            now = r.tracked.current(hashed=i == last)  # the state's hash only once, at the end
            rows = _changed_rows(prev, now)
            if rows:
                effective.append((i, rows))
            prev = now
        else:
            satisfied, details = module.check(r.initial(), r.env.conn, constraints)
            final_hash = (r.tracked.base_hash if prev is None else prev.hash if prev.hash
                          else r.tracked.current().hash)
    finally:
        r.tracked.rollback()
    if not r.tracked.valid:
        _forget(task.world, task.initial_state)
        return score_constraints_full(task, calls, weight)
    if r.track_amounts:
        r.remember_amounts(made, amounts)
    return _claim(satisfied, details, constraints, effective, replayed, failed, final_hash, weight)


def _changed_rows(prev: st.TrackedView | None, now: st.TrackedView) -> set[tuple[str, str]]:
    """The (table, key) rows that differ between two views of one tracked replay (`prev`
    None: the base), as `diff_dumps` of their dumps would name them."""
    views = [now] if prev is None else [prev, now]
    out: set[tuple[str, str]] = set()
    for table in {t for v in views for t in (*v.before, *v.after)}:
        keys = {k for v in views for k in (*v.before.get(table, {}), *v.after.get(table, {}))}
        a = prev.dump.get(table, {}) if prev is not None else None
        b = now.dump.get(table, {})
        for key in keys:
            before = a.get(key) if a is not None else now.before.get(table, {}).get(key)
            if before != b.get(key):
                out.add((table, key))
    return out


def score_constraints_full(task: Task, calls: list[ToolCall], weight: float = REDUNDANCY_WEIGHT) -> ConstraintScore:
    """`score_constraints` the direct way: a freshly built state, full dumps after each write."""
    if task.verification.constraints is None:
        raise ValueError(f"task {task.id} carries no constraint set (verification.constraints)")
    constraints = load_constraints(task.verification.constraints)
    world = get_world(task.world)
    module = world_constraints(world)
    ref = task.initial_state
    initial = world.build_state(ref.seed, ref.scale, ref.patches)
    env = world.env(ref)
    try:
        prev = st.canonical_dump(env.conn)
        replayed = failed = 0
        effective: list[tuple[int, set[tuple[str, str]]]] = []  # (call index, rows it changed)
        for i, call in write_calls(world.tools, calls):
            replayed += 1
            if not env.call(call).ok:
                failed += 1
                continue
            now = st.canonical_dump(env.conn)
            rows = {(c.table, c.key) for c in st.diff_dumps(prev, now)}
            if rows:
                effective.append((i, rows))
            prev = now
        satisfied, details = module.check(initial, env.conn, constraints)
        final_hash = st.hash_dump(prev)
    finally:
        env.close()
        initial.close()
    return _claim(satisfied, details, constraints, effective, replayed, failed, final_hash, weight)


def _claim(satisfied: list[bool], details: list[dict[str, Any]], constraints: list[Any],
           effective: list[tuple[int, set[tuple[str, str]]]], replayed: int, failed: int, final_hash: str,
           weight: float) -> ConstraintScore:
    """The score of a replay: each satisfied constraint claims the last effective write on
    its record (module docstring)."""
    claimed: set[int] = set()
    for ok, detail in zip(satisfied, details, strict=True):
        record = detail.get("record")
        if not ok or not record:
            continue
        target = (record["table"], record["key"])
        for j in range(len(effective) - 1, -1, -1):
            if j not in claimed and target in effective[j][1]:
                claimed.add(j)
                break
    redundant = len(effective) - len(claimed)
    score = constraint_score(sum(satisfied), len(constraints), redundant, weight)
    return ConstraintScore(list(satisfied), list(details), replayed, failed, len(effective), redundant, final_hash,
                           score, sorted(effective[j][0] for j in claimed))


class ConstraintOptions(VerifierOptions):
    redundancy_weight: float = REDUNDANCY_WEIGHT  # (ours) penalty per redundant write


class ConstraintVerifier(OutcomeVerifier):
    """V(τ, C): every constraint satisfied on the final state and no redundant writes."""

    name = "constraint_satisfaction"
    version = "1.0.0"
    basis_name = "CONSTRAINTS"
    audit_kinds = WRITE_KINDS | {"world_mutation", "detour"}

    options_model = ConstraintOptions
    options: ConstraintOptions  # built from one options object (`BaseVerifier.__init__`)

    def applies_to(self, task: Task) -> bool:
        """Only tasks that carry a constraint set (constraint-guided synthesis) can be judged."""
        return task.verification.constraints is not None

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        if task.verification.constraints is None:
            return self.verdict(task, trajectory, False, 0.0, ["task carries no constraint set"])
        s = score_constraints(task, trajectory.actions(), self.options.redundancy_weight)
        reasons = [f"constraint {i} ({d['kind']}) unmet: {d['reason']}"
                   for i, d in enumerate(s.details) if not d["satisfied"]]
        if s.redundant_writes:
            reasons.append(f"{s.redundant_writes} redundant write(s)")
        score, clean, episode = episode_checks(trajectory, s.final_hash, s.score, self.options.require_clean_termination, task)
        reasons += episode
        details: dict[str, Any] = {
            "satisfied": s.satisfied, "constraints": s.details, "replayed_writes": s.replayed_writes,
            "failed_writes": s.failed_writes, "effective_writes": s.effective_writes,
            "redundant_writes": s.redundant_writes, "final_hash": s.final_hash,
        }
        passed = s.score == 1.0 and (clean or not self.options.require_clean_termination)
        return self.verdict(task, trajectory, passed, score, reasons, details)


register(ConstraintVerifier.name)(ConstraintVerifier)
