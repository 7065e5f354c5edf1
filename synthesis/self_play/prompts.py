"""What a self-play generator is asked: a sampled spec (world, 1–2 calls, a menu of 2–8
tools) and its prompt with a few records of the world for grounding."""

from __future__ import annotations

import json
import random
import sqlite3
from typing import Any

from data.self_play import Spec
from envs import state as st
from envs.stock_tools import TRANSFER_TOOL
from envs.world import World


def sample_spec(world: World, rng: random.Random, n_calls: int | None = None, first: str | None = None) -> Spec:
    """A spec: 1–2 distinct gold tools (`first` among them when given) and a menu of 2–8
    world tools that contains them.
    The gold tools go in the order a conversation takes them: questions first, then
    changes, and a transfer to a human agent last (it ends the conversation); a transfer
    goes with a question, never with a change."""
    names = list(world.tools)
    if not names:
        raise ValueError(f"world {world.name!r} has no tools")
    n = n_calls if n_calls is not None else rng.choice([1, 2])
    n = max(1, min(n, 2, len(names)))
    needed = ([first, *rng.sample([t for t in names if t != first], n - 1)] if first in names
              else rng.sample(names, n))
    if TRANSFER_TOOL in needed and any(world.tools[t].write for t in needed):  # a handover follows no change
        reads = [t for t in names if not world.tools[t].write and t != TRANSFER_TOOL]
        needed = [t for t in needed if t == TRANSFER_TOOL] + ([rng.choice(reads)] if reads else [])
    needed.sort(key=lambda t: (t == TRANSFER_TOOL, world.tools[t].write))
    lo, hi = max(2, n), min(8, len(names))
    size = rng.randint(lo, hi) if hi >= lo else len(names)
    others = rng.sample([x for x in names if x not in needed], max(0, size - n))
    menu_names = needed + others
    rng.shuffle(menu_names)
    return Spec(world=world.name, n_calls=n, tools=needed, menu=[world.tools[m].schema() for m in menu_names])


def world_context(conn: sqlite3.Connection, rng: random.Random, per_table: int = 2) -> dict[str, list[dict[str, Any]]]:
    """A few real rows per table (all of a table with ≤ 3 rows, e.g. `meta`), for grounding."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table in st.tables(conn):
        (count,) = conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
        offsets = range(count) if count <= 3 else sorted(rng.sample(range(count), min(per_table, count)))
        rows = []
        for off in offsets:
            cur = conn.execute(f'SELECT * FROM "{table}" LIMIT 1 OFFSET ?', (off,))
            cols = [d[0] for d in cur.description]
            rows.append(dict(zip(cols, cur.fetchone(), strict=True)))
        out[table] = rows
    return out


GENERATOR_SYSTEM = (
    "You write training tasks for a tool-calling assistant. Each task is a realistic user "
    "request, the tools the assistant may use, and the exact tool calls that answer it."
)


def generator_prompt(spec: Spec, context: dict[str, list[dict[str, Any]]]) -> list[dict[str, str]]:
    """Chat messages asking the generator for one task of `spec`, grounded in `context` rows."""
    plural = "call" if spec.n_calls == 1 else "calls"
    user = "\n".join([
        f"Domain: {spec.world}.",
        f"Write one user request that is answered by exactly {spec.n_calls} tool {plural}, "
        f"using: {', '.join(spec.tools)}.",
        "",
        "Tools (copy them into <available_tools>):",
        json.dumps(spec.menu, ensure_ascii=False),
        "",
        "Real records from the database (take ids, codes, dates and amounts from here; never invent them):",
        json.dumps(context, ensure_ascii=False, default=str),
        "",
        "Rules:",
        "- The request states every argument value of the calls, written exactly as in the calls.",
        "- Use only tools from the list and give every required argument.",
        "- No placeholders or template slots; write a concrete request as a user would.",
        "",
        "Answer in exactly this format:",
        "<question>the user's request</question>",
        "<available_tools>JSON list of the tool schemas above</available_tools>",
        '<tool_call_answer>[{"name": "tool_name", "arguments": {"arg": "value"}}]</tool_call_answer>',
    ])
    return [{"role": "system", "content": GENERATOR_SYSTEM}, {"role": "user", "content": user}]
