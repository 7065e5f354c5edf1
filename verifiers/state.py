"""Final-state equivalence with the dense state reward (LOGIGEN, methods.md §1).

The trajectory's state-changing calls are replayed, in order, on a fresh copy of the
task's initial state; the trajectory passes when the result hashes exactly to the
target. Any path that ends in the target passes. The dense reward (ours)::

    r = exact + (1 - exact) * 0.5 * (cells_matched / cells_in_target_diff) * 1 / (1 + extra_writes)

where target cells are the (table, key, column) cells the target changed and extra writes
are changed cells outside that set.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from data.records import StateRef, Task, ToolCall, Trajectory, Verdict
from envs import state as st
from envs.registry import get_world
from envs.tools import ToolSpec
from envs.world import Env, World
from verifiers.base import WRITE_KINDS, OutcomeVerifier, episode_checks, register

_MISSING = object()


@dataclass
class StateScore:
    exact: bool
    reward: float
    final_hash: str
    cells_matched: int
    cells_in_target: int
    extra_writes: int
    replayed_writes: int
    failed_writes: int


def write_calls(tools: Mapping[str, ToolSpec], calls: Iterable[ToolCall]) -> Iterator[tuple[int, ToolCall]]:
    """(index, call) for each call of `calls` to a write tool of `tools`: what a replay runs
    (reads and unknown tools never count)."""
    return ((i, c) for i, c in enumerate(calls) if (spec := tools.get(c.name)) is not None and spec.write)


def dense_reward(exact: bool, matched: int, target_cells: int, extra: int) -> float:
    if exact:
        return 1.0
    ratio = matched / target_cells if target_cells else 0.0
    return 0.5 * ratio / (1 + extra)


def score_calls(task: Task, calls: list[ToolCall]) -> StateScore:
    """Replay `calls` (reads are skipped) on a fresh initial state and score the result.

    Runs on a cached copy of the task's initial state (`Replayer`): the writes run in a
    transaction that is rolled back afterwards, and only the rows they touched are re-read.
    Same results as `score_calls_full`, which rebuilds and dumps the whole state."""
    replayer = replayer_for(task.world, task.initial_state)
    if replayer is None:
        return score_calls_full(task, calls)
    outcome = replayer.replay(calls)
    if outcome is None:  # a tool ended the transaction: fall back, and forget this copy
        _forget(task.world, task.initial_state)
        return score_calls_full(task, calls)
    view, writes, failed = outcome
    return _score(task, view.dump, view.hash, view.changed_cells(), writes, failed)


def _score(task: Task, final: st.Dump, final_hash: str, changed: set[tuple[str, str, str]],
           writes: int, failed: int) -> StateScore:
    exact = final_hash == task.target_state_hash
    target = {(c["table"], c["key"], c["column"]): c for c in task.target_diff}
    matched = 0
    for (table, key, column), c in target.items():
        row = final.get(table, {}).get(key)
        value = _MISSING if row is None else row.get(column, _MISSING)
        want = _MISSING if c["op"] == "delete" else c["after"]
        matched += value == want
    extra = len(changed - set(target))
    return StateScore(exact, dense_reward(exact, matched, len(target), extra), final_hash,
                      matched, len(target), extra, writes, failed)


def score_calls_full(task: Task, calls: list[ToolCall]) -> StateScore:
    """`score_calls` the direct way: a freshly built state, full dumps before and after."""
    world = get_world(task.world)
    env = world.env(task.initial_state)
    if getattr(env, "conn", None) is None:
        return _score_document(task, world, env, calls)
    try:
        initial = st.canonical_dump(env.conn)
        writes = failed = 0
        for _, call in write_calls(world.tools, calls):
            writes += 1
            if not env.call(call).ok:
                failed += 1
        final = st.canonical_dump(env.conn)
    finally:
        env.close()
    changed = {ch.cell() for ch in st.diff_dumps(initial, final)}
    return _score(task, final, st.hash_dump(final), changed, writes, failed)


def _leaves(value: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """A JSON document's leaf values by path (a document state's cells)."""
    if isinstance(value, dict):
        return {p: v for k, x in value.items() for p, v in _leaves(x, (*path, str(k))).items()}
    if isinstance(value, list):
        return {p: v for i, x in enumerate(value) for p, v in _leaves(x, (*path, str(i))).items()}
    return {path: value}


def _score_document(task: Task, world: Any, env: Any, calls: list[ToolCall]) -> StateScore:
    """`score_calls` in a world whose state is a document, not SQLite (τ²'s database): the
    writes replayed on a fresh copy, the world's own hash compared with the target, and the
    leaves the replay changed counted as extra writes (a document task names no target cells)."""
    try:
        before = _leaves(env.db_dump())
        writes = failed = 0
        for _, call in write_calls(world.tools, calls):
            writes += 1
            if not env.call(call).ok:
                failed += 1
        after = _leaves(env.db_dump())
        final_hash = env.state_hash()
    finally:
        env.close()
    exact = final_hash == task.target_state_hash
    changed = {p for p in before.keys() | after.keys() if before.get(p, _MISSING) != after.get(p, _MISSING)}
    return StateScore(exact, 1.0 if exact else 0.0, final_hash, 0, len(task.target_diff),
                      0 if exact else len(changed), writes, failed)


class Replayer:
    """One live copy of an initial state that replays write calls and rolls them back."""

    def __init__(self, world: World, ref: StateRef) -> None:
        self.world = world
        self.ref = ref
        self.env: Env = world.env(ref)
        self.tracked = st.TrackedState(self.env.conn)
        self._initial: sqlite3.Connection | None = None
        # results of pure functions of the initial state (how a value is named to a user, ...)
        self.memo: dict[Any, Any] = {}
        self.has_ledger = "ledger" in self.tracked.rows
        self._ledger_top = (self.env.conn.execute("SELECT ifnull(max(rowid), 0) FROM ledger").fetchone()[0]
                            if self.has_ledger else 0)
        self.track_amounts = False  # set by the first check that asks for them (`remembered_amounts`)
        self._last_amounts: tuple[list[tuple[str, Any]], list[list[float]]] | None = None

    def initial(self) -> sqlite3.Connection:
        """A second, never written connection holding the initial state (built on first use),
        for checks that compare the initial state with the replayed one."""
        if self._initial is None:
            self._initial = self.world.build_state(self.ref.seed, self.ref.scale, self.ref.patches)
        return self._initial

    def replay(self, calls: list[ToolCall]) -> tuple[st.TrackedView, int, int] | None:
        """(the final state's view, writes replayed, writes failed), or None when a tool
        ended the transaction (the copy is then unusable)."""
        tools = self.world.tools
        writes = failed = 0
        made: list[ToolCall] = []
        amounts: list[list[float]] = []
        top = self._ledger_top
        self.tracked.begin()
        try:
            for _, call in write_calls(tools, calls):
                writes += 1
                ok = self.env.call(call).ok
                failed += not ok
                if self.track_amounts:
                    got, top = self.ledger_added(top) if ok else ([], top)
                    made.append(call)
                    amounts.append(got)
            if not self.env.conn.in_transaction:
                self.tracked.valid = False
                return None
            view = self.tracked.current()
        finally:
            self.tracked.rollback()
        if self.track_amounts:
            self.remember_amounts(made, amounts)
        return view, writes, failed

    # The money each write moved, from the world's ledger (an append-only table its triggers
    # fill). Once a check has asked for it (the policy's), replays record it and keep it for
    # the last replay, so that the policy check of a trajectory after its outcome's replay (in
    # a composite verdict) does not replay the writes again.

    def ledger_added(self, top: int) -> tuple[list[float], int]:
        """Inside a replay: the amounts of the ledger rows past rowid `top`, and the new top."""
        rows = self.env.conn.execute("SELECT rowid, amount FROM ledger WHERE rowid > ? ORDER BY rowid",
                                     (top,)).fetchall()
        return [abs(float(a)) for _, a in rows if a], (rows[-1][0] if rows else top)

    @property
    def ledger_top(self) -> int:
        """The last rowid of the initial state's ledger (0 without one)."""
        return self._ledger_top

    def remember_amounts(self, writes: list[ToolCall], amounts: list[list[float]]) -> None:
        self._last_amounts = ([(c.name, dict(c.arguments)) for c in writes], amounts)

    def remembered_amounts(self, writes: list[ToolCall]) -> list[list[float]] | None:
        """Per write of `writes`, the amounts it moved, when the last replay made exactly these
        writes (None otherwise); from now on replays of this state record them."""
        self.track_amounts = self.has_ledger
        last = self._last_amounts
        if last is None or last[0] != [(c.name, c.arguments) for c in writes]:
            return None
        return [list(a) for a in last[1]]

    def close(self) -> None:
        self.env.close()
        if self._initial is not None:
            self._initial.close()


REPLAY_CACHE_SIZE = 32  # initial states kept per thread (a shard's tasks; each holds its SQLite states, ~1.5 MB)
_local = threading.local()


def _cache() -> OrderedDict[tuple, Replayer]:
    cache = getattr(_local, "replayers", None)
    if cache is None:
        cache = _local.replayers = OrderedDict()
    return cache


def _ref_key(world: str, ref: StateRef) -> tuple:
    return (world, ref.world, ref.seed, ref.scale, tuple(ref.patches), ref.state_hash)


def replayer_for(world: str, ref: StateRef) -> Replayer | None:
    """This thread's cached `Replayer` of `ref` (built on first use; least recently used
    ones are closed beyond `REPLAY_CACHE_SIZE`); None when the cache is turned off (size 0)
    or the world is not a SQLite `World`."""
    if REPLAY_CACHE_SIZE <= 0:
        return None
    cache = _cache()
    key = _ref_key(world, ref)
    r = cache.get(key)
    if r is not None and r.tracked.valid:
        cache.move_to_end(key)
        return r
    if r is not None:
        cache.pop(key).close()
    w = get_world(world)
    if not isinstance(w, World):  # not a SQLite world (e.g. a workspace): no cached replay
        return None
    r = cache[key] = Replayer(w, ref)
    while len(cache) > REPLAY_CACHE_SIZE:
        cache.popitem(last=False)[1].close()
    return r


def _forget(world: str, ref: StateRef) -> None:
    r = _cache().pop(_ref_key(world, ref), None)
    if r is not None:
        r.close()


class StateVerifier(OutcomeVerifier):
    """Final-state equivalence against the task's target hash, with the dense reward."""

    name = "state_equivalence"
    version = "1.0.0"
    basis_name = "DB"
    audit_kinds = WRITE_KINDS | {"detour"}

    def applies_to(self, task: Task) -> bool:
        """Database worlds only: workspace tasks are judged by their tests (`tests_pass`)."""
        return task.verification.tests is None

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        s = score_calls(task, trajectory.actions())
        reasons: list[str] = []
        if not s.exact:
            reasons.append(f"final state differs from target ({s.cells_matched}/{s.cells_in_target} target cells, "
                           f"{s.extra_writes} extra cell writes)")
        score, clean, episode = episode_checks(trajectory, s.final_hash, s.reward, self.options.require_clean_termination, task)
        reasons += episode
        details: dict[str, Any] = {
            "final_hash": s.final_hash, "cells_matched": s.cells_matched, "cells_in_target": s.cells_in_target,
            "extra_writes": s.extra_writes, "replayed_writes": s.replayed_writes, "failed_writes": s.failed_writes,
        }
        passed = s.exact and (clean or not self.options.require_clean_termination)
        return self.verdict(task, trajectory, passed, score, reasons, details)


register(StateVerifier.name)(StateVerifier)
