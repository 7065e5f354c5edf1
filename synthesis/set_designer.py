"""Set Designer: boundary-adjacent initial states (LOGIGEN §1).

The world's `variants` hook proposes patches to a seeded base state that put a value one
step from a compiled rule's limit (one seat left, a balance one unit short, a booking 23
or 25 hours old). The designer applies them, checks they hold, and returns each variant
with a `StateRef` that rebuilds it exactly.
"""

from __future__ import annotations

import json
import random
import sqlite3
from typing import Any

from data.records import StateRef
from envs import state as st
from envs.design import Variant
from envs.world import World


def design_states(world: World, seed: int, scale: int, n: int) -> list[tuple[Variant, StateRef]]:
    """`n` boundary-adjacent variants of the world's base state for `seed`."""
    rng = random.Random(seed)
    base = world.build_state(seed, scale)
    out: list[tuple[Variant, StateRef]] = []
    for variant in world.design.variants(base, rng, n):
        try:
            ref = world.state_ref(seed, scale, variant.patches)
        except sqlite3.DatabaseError:
            continue  # a patch that breaks a constraint is not a valid initial state
        out.append((variant, ref))
    base.close()
    return out


def _focus_values(focus: dict[str, Any]) -> set[str]:
    values: set[str] = set()
    for v in focus.values():
        for item in v if isinstance(v, list) else [v]:
            if isinstance(item, str) and item:
                values.add(item)
    return values


def distractors(conn: sqlite3.Connection, variant: Variant, changes: list[st.CellChange],
                limit: int = 8) -> list[str]:
    """Records similar to the task's (same table as a changed row, sharing a focus value such as
    the user id) that the target leaves untouched, as "table:key". Exact-state verification
    already fails any trajectory that touches them; the list says which ones a careless agent
    might pick."""
    wanted = _focus_values(variant.focus)
    changed = {(c.table, c.key) for c in changes}
    out: list[str] = []
    for table in sorted({c.table for c in changes}):
        pk = st.primary_key(conn, table)
        cur = conn.execute(f'SELECT * FROM "{table}"')
        cols = [d[0] for d in cur.description]
        for row in cur.fetchall():
            record = dict(zip(cols, row, strict=True))
            key = json.dumps([record[c] for c in pk], separators=(",", ":"))  # as canonical_dump keys
            if (table, key) in changed or not wanted & {str(v) for v in row if v is not None}:
                continue
            out.append(f"{table}:{key}")
            if len(out) >= limit:
                return out
    return out
