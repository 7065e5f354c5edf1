"""Worlds (a folder: policy, schema, tools, generator, design hooks) and live environments.

A `World` is loaded once from its folder; an `Env` is one live copy of its database that
tools run against. Every tool call runs inside a savepoint: a call that fails leaves the
state exactly as it was, and its error comes back as a structured observation naming the
rule it broke, never as an exception.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from data.records import StateRef
from envs import state as st
from envs.calls import Observation, ToolEnv
from envs.calls import error_observation as _error
from envs.contract import hook as contract_hook
from envs.loader import load_module
from envs.sql import schema_script
from envs.tools import ToolError, ToolSpec, collect_tools

RULE_RE = re.compile(r"\b(R\d+_[A-Z0-9_]+)\b:?\s*(.*)")


# Generated databases (and their texts, patched copies and table hashes) a world keeps, the
# most recently used: a run's tasks each have their own seed, so an unbounded cache grows with
# the run (about 0.7 MB a task). A shard holds a few dozen tasks at a time (shard_size), so
# this many keeps its states warm.
STATE_CACHE_SIZE = 32


class Recent:
    """The values of the most recently used `size` keys (thread-safe)."""

    def __init__(self, size: int = STATE_CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> Any:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class World:
    """A world folder: `policy.md`, `schema.sql`, `tools.py`, `generator.py`, `design.py`."""

    name: str
    folder: Path
    # generated databases by (seed, scale), their texts, patched copies and table hashes
    _base_cache: Recent = field(default_factory=Recent, repr=False)
    _text_cache: Recent = field(default_factory=Recent, repr=False)
    _patched_cache: Recent = field(default_factory=Recent, repr=False)
    _hash_cache: Recent = field(default_factory=Recent, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @cached_property
    def policy(self) -> str:
        return (self.folder / "policy.md").read_text()

    @cached_property
    def schema_sql(self) -> str:
        return schema_script(self.folder / "schema.sql")  # kit includes expanded

    @cached_property
    def tools(self) -> dict[str, ToolSpec]:
        return collect_tools(load_module(self.folder / "tools.py", self.name))

    @cached_property
    def generator(self) -> ModuleType:
        return load_module(self.folder / "generator.py", self.name)

    @cached_property
    def design(self) -> ModuleType:
        """World-specific hooks for synthesis: boundary variants, candidate calls, goals."""
        return load_module(self.folder / "design.py", self.name)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def compiled_rules(self) -> list[str]:
        """Rule ids that the schema enforces (trigger RAISEs and named CHECKs)."""
        return sorted(set(re.findall(r"\b(R\d+_[A-Z0-9_]+)\b", self.schema_sql)))

    def empty_state(self) -> sqlite3.Connection:
        conn = st.connect_memory()
        conn.executescript(self.schema_sql)
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def base_state(self, seed: int, scale: int) -> bytes:
        """Snapshot of the seeded generator's database (cached per seed and scale)."""
        key = (seed, scale)
        with self._lock:  # one generation per key at a time
            found = self._base_cache.get(key)
            if found is None:
                conn = self.empty_state()
                conn.execute("BEGIN")
                self.generator.generate(conn, seed=seed, scale=scale)
                conn.execute("COMMIT")
                found = self._base_cache.put(key, st.snapshot(conn))
                conn.close()
            return found

    def patched_state(self, seed: int, scale: int, patches: list[str] | None = None) -> bytes:
        """Snapshot of the seeded database with `patches` applied (cached like `base_state`:
        a task's trials all start from it, and a patch script costs more than a copy)."""
        if not patches:
            return self.base_state(seed, scale)
        key = (seed, scale, tuple(patches))
        found = self._patched_cache.get(key)
        if found is not None:
            return found
        conn = st.restore(self.base_state(seed, scale))
        try:
            for sql in patches:
                conn.execute(sql)
            return self._patched_cache.put(key, st.snapshot(conn))
        finally:
            conn.close()

    def build_state(self, seed: int, scale: int, patches: list[str] | None = None) -> sqlite3.Connection:
        """A fresh, writable copy of the seeded database with `patches` applied."""
        return st.restore(self.patched_state(seed, scale, patches))

    def synthetic_values(self, ref: StateRef) -> frozenset[str]:
        """The text this world generated for a task whose initial state is `ref`: every text
        cell of the seeded generator's tables, the Set Designer's patches, the policy and the
        tool schemas. Release hygiene leaves e-mail addresses, phone numbers (and anything
        else) found in them alone: they are the world's synthetic data, not anyone's PII.

        A world declares its own by defining ``synthetic_values(conn) -> Iterable[str]`` in
        its `generator.py` (given the generated database); by default every text cell is read.
        """
        key = (ref.seed, ref.scale)
        base = self._text_cache.get(key)
        if base is None:
            conn = st.restore(self.base_state(ref.seed, ref.scale))
            try:
                declared = contract_hook(self.generator, "synthetic_values")
                base = self._text_cache.put(key, frozenset(declared(conn) if callable(declared) else state_texts(conn)))
            finally:
                conn.close()
        return base | {*ref.patches, self.policy, json.dumps(self.tool_schemas(), ensure_ascii=False)}

    def state_ref(self, seed: int, scale: int, patches: list[str] | None = None) -> StateRef:
        conn = self.build_state(seed, scale, patches)
        try:
            return StateRef(world=self.name, seed=seed, scale=scale, patches=list(patches or []),
                            state_hash=st.state_hash(conn))
        finally:
            conn.close()

    def state_hashes(self, ref: StateRef) -> st.StateHashes:
        """The table JSONs and hash of `ref`'s state, computed from the built state once
        (cached, the most recently used `STATE_CACHE_SIZE`): every env copied from `ref`
        hashes by re-reading only the tables it wrote (`Env.state_hash`)."""
        key = (ref.seed, ref.scale, tuple(ref.patches))
        found = self._hash_cache.get(key)
        if found is not None:
            return found
        conn = self.build_state(ref.seed, ref.scale, ref.patches)
        try:
            return self._hash_cache.put(key, st.StateHashes.of(conn))
        finally:
            conn.close()

    def env(self, ref: StateRef | None = None, conn: sqlite3.Connection | None = None) -> Env:
        """A live environment on a fresh copy of `ref`'s state (or on `conn` itself).

        A copy of `ref` watches which tables its statements write (`st.WriteWatch`), so its
        `state_hash` re-reads only those."""
        if conn is not None:
            return Env(self, conn)
        if ref is None:
            raise ValueError("env() needs a state reference or a connection")
        conn = self.build_state(ref.seed, ref.scale, ref.patches)
        watch = st.WriteWatch()
        conn.set_authorizer(watch)
        return Env(self, conn, ref, watch)

    def copy_env(self, snapshot: bytes, hashes: st.StateHashes | Callable[[], st.StateHashes]) -> Env:
        """A live environment on a fresh copy of `snapshot`, whose `StateHashes` are known
        (or made by `hashes()` when first needed): it hashes by re-reading only the tables it
        writes, like a copy of a reference."""
        conn = st.restore(snapshot)
        watch = st.WriteWatch()
        conn.set_authorizer(watch)
        return Env(self, conn, hashes, watch)


def state_texts(conn: sqlite3.Connection) -> set[str]:
    """Every distinct text cell of every table of `conn`."""
    out: set[str] = set()
    for table in st.tables(conn):
        for row in conn.execute(f'SELECT * FROM "{table.replace(chr(34), chr(34) * 2)}"'):
            out.update(v for v in row if isinstance(v, str))
    return out


class Env(ToolEnv):
    """One live copy of a world's database, with tools to act on it (each call in a
    savepoint: a failed call leaves the state as it was)."""

    def __init__(self, world: World, conn: sqlite3.Connection,
                 origin: StateRef | st.StateHashes | Callable[[], st.StateHashes] | None = None,
                 watch: st.WriteWatch | None = None) -> None:
        self.world = world
        self.conn = conn
        self._origin = origin  # the state `conn` was copied from, and the watch of its writes since
        self._watch = watch

    @property
    def written(self) -> frozenset[str] | None:
        """The tables this copy's statements may have written since it was made (a superset of
        those that changed); None when not watched or no longer known."""
        if self._origin is None or self._watch is None or self._watch.lost:
            return None
        return frozenset(self._watch.tables)

    def state_hash(self) -> str:
        """`st.state_hash(conn)`; on a watched copy, from the origin's table JSONs (a
        reference's are cached by its world) and a re-read of the tables written since."""
        origin, watch = self._origin, self._watch
        if origin is None or watch is None or watch.lost:
            return st.state_hash(self.conn)
        if isinstance(origin, StateRef):
            hashes = self.world.state_hashes(origin)
        else:
            hashes = origin if isinstance(origin, st.StateHashes) else origin()
        return hashes.rehash(self.conn, watch.tables)

    def snapshot(self) -> bytes:
        return st.snapshot(self.conn)

    def fork(self) -> Env:
        return Env(self.world, st.restore(self.snapshot()))

    def close(self) -> None:
        self.conn.close()

    def _execute(self, spec: ToolSpec, args: dict[str, Any]) -> Observation:
        self.conn.execute("SAVEPOINT tool_call")
        try:
            result = spec.fn(self.conn, **args)
        except ToolError as exc:
            self.conn.execute("ROLLBACK TO tool_call")
            self.conn.execute("RELEASE tool_call")
            kind = "rule_violation" if RULE_RE.match(exc.code) else "tool_error"
            return _error(kind, exc.code, exc.message)
        except sqlite3.IntegrityError as exc:
            self.conn.execute("ROLLBACK TO tool_call")
            self.conn.execute("RELEASE tool_call")
            return _integrity_error(str(exc))
        except Exception as exc:  # a bug in the tool: the env's fault, not the agent's
            self.conn.execute("ROLLBACK TO tool_call")
            self.conn.execute("RELEASE tool_call")
            return _error("env_error", type(exc).__name__, str(exc))
        self.conn.execute("RELEASE tool_call")
        return Observation(content=json.dumps(result, default=str), wrote=spec.write)


def _integrity_error(message: str) -> Observation:
    """Map SQLite's trigger/constraint messages to a rule violation when a rule id is named."""
    m = RULE_RE.search(message)
    if m:
        rule = m.group(1)
        text = m.group(2) or f"the request breaks policy rule {rule}"
        return _error("rule_violation", rule, text)
    return _error("constraint_violation", "constraint", message)
