"""`trajforge new-world NAME`: a working skeleton world folder to start from.

`new_world(name, dest)` writes ``dest/NAME/`` with every file a world needs, small but
real: a lending desk where members borrow and return items (three tools: `get_member`,
`borrow_item`, `return_item`), three compiled rules with probes, a ledger, a seeded
generator, logic-driven design hooks and a conversation contract whose users identify
with a member id. It registers, meets the world contract (`envs/contract.py`), passes
`tests/contracts/test_world_contract.py` and synthesizes tasks; rename the tables and tools from
there (`docs/authoring-a-world.md`). ``{name}`` and ``{title}`` in the files become the
world's name.
"""

from __future__ import annotations

import re
from pathlib import Path

NAME = re.compile(r"^[a-z][a-z0-9_]*$")

FILES: dict[str, str] = {
    'policy.md': r'''# {title} desk policy

You help members of {title} borrow and return items. Be precise and polite.

## Identity

- **R10_IDENTIFY** *(policy only)*: before any change, ask for the member id and look the
  member up (`get_member`).
- **R11_CONFIRM** *(policy only)*: before a change, state what you will do (the item and the
  loan) and wait for the member's explicit yes.

## Loans

- **R01_ITEM_AVAILABLE** *(enforced)*: only an available item can be lent.
- **R02_LOAN_LIMIT** *(enforced)*: a member holds at most their loan limit of active loans.
- **R03_LOAN_OPEN** *(enforced)*: only an active loan can be returned.
''',
    'schema.sql': r'''-- {title}: members borrow items. Rules are compiled as triggers that raise the rule id;
-- every change appends to the ledger (what happened), which no tool reads or writes.
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE members (
    member_id TEXT PRIMARY KEY, name TEXT NOT NULL, max_loans INTEGER NOT NULL DEFAULT 3);
CREATE TABLE items (
    item_id TEXT PRIMARY KEY, title TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'available' CHECK (status IN ('available', 'on_loan')));
CREATE TABLE loans (
    loan_id TEXT PRIMARY KEY, member_id TEXT NOT NULL REFERENCES members (member_id),
    item_id TEXT NOT NULL REFERENCES items (item_id),
    status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'returned')));

-- the kit's ledger (envs/ledger.sql); this world's AFTER triggers append to ledger_append
-- include: ledger

CREATE TRIGGER r01_item_available BEFORE INSERT ON loans
WHEN (SELECT status FROM items WHERE item_id = NEW.item_id) IS NOT 'available'
BEGIN SELECT RAISE(ABORT, 'R01_ITEM_AVAILABLE: the item is not available'); END;

CREATE TRIGGER r02_loan_limit BEFORE INSERT ON loans
WHEN (SELECT COUNT(*) FROM loans WHERE member_id = NEW.member_id AND status = 'active')
     >= (SELECT max_loans FROM members WHERE member_id = NEW.member_id)
BEGIN SELECT RAISE(ABORT, 'R02_LOAN_LIMIT: the member holds their loan limit'); END;

CREATE TRIGGER r03_loan_open BEFORE UPDATE OF status ON loans
WHEN OLD.status IS NOT 'active'
BEGIN SELECT RAISE(ABORT, 'R03_LOAN_OPEN: the loan was already returned'); END;

CREATE TRIGGER loan_out AFTER INSERT ON loans
BEGIN
    UPDATE items SET status = 'on_loan' WHERE item_id = NEW.item_id;
    INSERT INTO ledger_append VALUES (NEW.loan_id, 'borrowed', 0, NEW.item_id);
END;

CREATE TRIGGER loan_back AFTER UPDATE OF status ON loans
WHEN NEW.status = 'returned' AND OLD.status = 'active'
BEGIN
    UPDATE items SET status = 'available' WHERE item_id = NEW.item_id;
    INSERT INTO ledger_append VALUES (NEW.loan_id, 'returned', 0, NEW.item_id);
END;
''',
    'tools.py': r'''"""Tools of the {name} world: one read and two writes. The schema's triggers enforce the
policy (a broken rule raises `<RULE_ID>: message`)."""

from __future__ import annotations

import sqlite3

from envs import sql as kit
from envs.tools import tool


@tool()
def get_member(db: sqlite3.Connection, member_id: str) -> dict:
    """Get a member: name, loan limit and their loans (with each item's title).

    Args:
        member_id: The member's id, e.g. "m_007".
    """
    m = kit.need(
        kit.row(db, "SELECT * FROM members WHERE member_id = ?", member_id), "member", member_id
    )
    m["loans"] = kit.rows(
        db,
        "SELECT l.*, i.title FROM loans l JOIN items i USING (item_id)"
        " WHERE l.member_id = ? ORDER BY l.loan_id",
        member_id,
    )
    return m


@tool(write=True)
def borrow_item(db: sqlite3.Connection, member_id: str, item_id: str) -> dict:
    """Lend an item to a member: the item must be available (R01) and the member below their
    loan limit (R02).

    Args:
        member_id: The member's id.
        item_id: The item's number, printed on its label.
    """
    kit.need(
        kit.row(db, "SELECT 1 FROM members WHERE member_id = ?", member_id), "member", member_id
    )
    kit.fetch(db, "items", "item_id", item_id, "item")
    content = {
        "member_id": member_id,
        "item_id": item_id,
    }  # the id is minted from what the loan is
    loan_id = kit.mint_id("LN", content, kit.count(db, "loans", **content))
    db.execute("INSERT INTO loans VALUES (?, ?, ?, 'active')", (loan_id, member_id, item_id))
    return kit.one(db, "SELECT * FROM loans WHERE loan_id = ?", loan_id)


@tool(write=True)
def return_item(db: sqlite3.Connection, loan_id: str) -> dict:
    """Return a borrowed item: the loan must still be active (R03).

    Args:
        loan_id: The loan to close (from get_member).
    """
    kit.fetch(db, "loans", "loan_id", loan_id, "loan")
    db.execute("UPDATE loans SET status = 'returned' WHERE loan_id = ?", (loan_id,))
    return kit.one(db, "SELECT * FROM loans WHERE loan_id = ?", loan_id)
''',
    'generator.py': r'''"""Seeded data of the {name} world: `scale` members, twice as many items, and a third of
the members with an item out (inserted through the schema's triggers)."""

from __future__ import annotations

import random
import sqlite3

NOW = "2026-05-10 09:00:00"
NAMES = ["Ada", "Ben", "Cai", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jon", "Kim", "Lou"]
WORDS = ["Blue", "Quiet", "Long", "Hidden", "Paper", "Northern", "Small", "Bright"]
THINGS = ["Harbor", "Garden", "River", "Atlas", "Letters", "Winter", "Machine", "Island"]


def generate(conn: sqlite3.Connection, seed: int, scale: int) -> None:
    rng = random.Random(seed)
    conn.execute("INSERT INTO meta VALUES ('now', ?)", (NOW,))
    for i in range(scale):
        conn.execute(
            "INSERT INTO members VALUES (?, ?, ?)",
            (f"m_{i:03d}", rng.choice(NAMES), rng.choice([2, 3, 4])),
        )
    for i in range(2 * scale):
        title = f"{rng.choice(WORDS)} {rng.choice(THINGS)}, volume {i + 1}"
        conn.execute("INSERT INTO items (item_id, title) VALUES (?, ?)", (f"it_{i:03d}", title))
    for i in range(scale // 3):
        conn.execute(
            "INSERT INTO loans VALUES (?, ?, ?, 'active')",
            (f"LG{i:04d}", f"m_{3 * i:03d}", f"it_{2 * i:03d}"),
        )
''',
    'design.py': r'''"""Synthesis hooks of the {name} world (contract: `envs/contract.py`, `envs/design.py`).

Three boundary kinds, each one step from a compiled rule's limit:

- `limit_room` (R02): the member has room for one more loan; a second is rejected;
- `item_taken` (R01): the item the member prefers is out; another one is available;
- `return_open` (R03): the member has an active loan to return.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence
from typing import Any

from data.records import ToolCall
from envs import sql as kit
from envs.design import Goal, Variant
from envs.state import CellChange

KINDS = ["limit_room", "item_taken", "return_open"]
KIND_WRITES = {
    "limit_room": ["borrow_item"],
    "item_taken": ["borrow_item"],
    "return_open": ["return_item"],
}


def variants(
    conn: sqlite3.Connection, rng: random.Random, n: int, kinds: Sequence[str] | None = None
) -> list[Variant]:
    """`n` boundary-adjacent variants, cycling through `kinds` (default: every kind)."""
    order = list(kinds or KINDS)
    members = kit.rows(conn, "SELECT * FROM members ORDER BY member_id")
    free = kit.rows(conn, "SELECT * FROM items WHERE status = 'available' ORDER BY item_id")
    out: list[Variant] = []
    for i in range(n):
        if not members or len(free) < 2:
            break
        kind = order[i % len(order)]
        m, (a, b) = rng.choice(members), rng.sample(free, 2)
        who, first = kit.q(m["member_id"]), kit.q(a["item_id"])
        active = kit.count(conn, "loans", member_id=m["member_id"], status="active")
        focus: dict[str, Any] = {
            "member_id": m["member_id"],
            "item_ids": [a["item_id"], b["item_id"]],
            "loan_ids": [],
        }
        if kind == "limit_room":
            out.append(
                Variant(
                    kind,
                    [f"UPDATE members SET max_loans = {active + 1} WHERE member_id = {who}"],
                    focus,
                    ["R02_LOAN_LIMIT"],
                    "novice",
                    "room for one more loan",
                )
            )
        elif kind == "item_taken":
            out.append(
                Variant(
                    kind,
                    [
                        f"UPDATE members SET max_loans = {active + 2} WHERE member_id = {who}",
                        f"UPDATE items SET status = 'on_loan' WHERE item_id = {first}",
                    ],
                    focus,
                    ["R01_ITEM_AVAILABLE"],
                    "mismatch",
                    f"{a['item_id']} is out",
                    preference={"preferred_item": a["item_id"]},
                )
            )
        else:
            loan = f"LV{rng.randrange(16**4):04X}"
            out.append(
                Variant(
                    kind,
                    [
                        f"UPDATE members SET max_loans = {active + 2} WHERE member_id = {who}",
                        f"INSERT INTO loans VALUES ({kit.q(loan)}, {who}, {first}, 'active')",
                    ],
                    {**focus, "item_ids": [], "loan_ids": [loan]},
                    ["R03_LOAN_OPEN"],
                    "novice",
                    f"loan {loan} is active",
                )
            )
    return out


def candidate_calls(conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
    """Loans of the focus items to the focus member; returns of the focus loans."""
    calls = [
        ToolCall(name="borrow_item", arguments={"member_id": focus["member_id"], "item_id": i})
        for i in focus["item_ids"]
    ]
    return calls + [
        ToolCall(name="return_item", arguments={"loan_id": loan}) for loan in focus["loan_ids"]
    ]


def lookup_calls(focus: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(name="get_member", arguments={"member_id": focus["member_id"]})]


def describe(
    changes: list[CellChange],
    before: sqlite3.Connection,
    after: sqlite3.Connection,
    variant: Variant,
) -> Goal | None:
    """The member's side of a change to the loans (the item's status follows by trigger)."""
    rows: dict[str, dict[str, CellChange]] = {}
    for c in changes:
        if c.table == "loans":
            rows.setdefault(c.key, {})[c.column] = c
    parts = []
    for key, cols in rows.items():
        op = next(iter(cols.values())).op
        loan = kit.row(
            after,
            "SELECT l.*, i.title FROM loans l JOIN items i USING (item_id) WHERE loan_id = ?",
            key.strip('[]"'),
        )
        if loan is None:
            return None
        item = f"\"{loan['title']}\" (item {loan['item_id']})"
        if op == "insert":
            pref = variant.preference.get("preferred_item")
            parts.append(
                f"borrow {item}"
                + (
                    f"; you would rather have item {pref} if it is available"
                    if pref and pref != loan["item_id"]
                    else ""
                )
            )
        elif op == "update" and "status" in cols:
            parts.append(f"return {item}")
        else:
            return None
    if not parts:
        return None
    return Goal(
        instruction="You want to " + "; and ".join(parts) + ".",
        reason="something to read this week",
        known_info={"member_id": variant.focus["member_id"]},
    )


def goal_score(changes: list[CellChange], variant: Variant) -> float:
    """Prefer the change that sits on the boundary the variant planted."""
    loans = {c.key for c in changes if c.table == "loans"}
    items = {c.after for c in changes if c.table == "loans" and c.column == "item_id"}
    if variant.kind == "item_taken":
        return 2.0 if variant.focus["item_ids"][1] in items else 0.0
    return 2.0 if len(loans) == 1 else 0.0
''',
    'probes.py': r'''"""Rule probes of the {name} world (see envs/probes.py): for every compiled rule a call that
must be rejected with exactly its rule id and a call one step away that passes."""

from data.records import ToolCall

FIXTURE = """
INSERT INTO meta VALUES ('now', '2026-05-10 09:00:00');
INSERT INTO members VALUES ('m_a', 'Ada', 1), ('m_b', 'Ben', 3);
INSERT INTO items (item_id, title) VALUES ('it_1', 'Blue Harbor'), ('it_2', 'Quiet Garden'),
                                       ('it_3', 'Long River');
INSERT INTO loans VALUES ('LN_A', 'm_a', 'it_2', 'active');
INSERT INTO loans VALUES ('LN_B', 'm_b', 'it_3', 'active');
UPDATE loans SET status = 'returned' WHERE loan_id = 'LN_B';
"""


def borrow(member: str, item: str) -> ToolCall:
    return ToolCall(name="borrow_item", arguments={"member_id": member, "item_id": item})


def give_back(loan: str) -> ToolCall:
    return ToolCall(name="return_item", arguments={"loan_id": loan})


PROBES = {
    "R01_ITEM_AVAILABLE": (borrow("m_b", "it_2"), borrow("m_b", "it_1")),  # it_2 is out
    "R02_LOAN_LIMIT": (borrow("m_a", "it_1"), borrow("m_b", "it_1")),  # m_a holds 1 of 1
    "R03_LOAN_OPEN": (give_back("LN_B"), give_back("LN_A")),  # LN_B was returned
}
''',
    'conversation.py': r'''"""How conversations go in the {name} world (contract: `envs/contract.py`).

A member identifies with their member id (`IDENTITY`: the agent asks for it, the scripted
user answers it, and the policy verifier does not ask an announcement to repeat it). They
know their member id, an item's number on its label and a loan's number on their receipt;
any other `*_id` key a world adds is internal and never appears in a task's text.
"""

from __future__ import annotations

import sqlite3

from data.records import ToolCall
from envs import sql as kit
from envs.contract import Identity

IDENTITY = Identity(
    keys=[["member_id"]], lookups={"get_member": ["member_id"]}, account=["member_id"]
)
USER_FACING_IDS = ["member_id", "item_id", "loan_id"]


def action(conn: sqlite3.Connection, call: ToolCall) -> list[str]:
    """What the agent is about to do, naming the item (and the loan), not the member."""
    if call.name == "borrow_item":
        item = kit.row(
            conn, "SELECT * FROM items WHERE item_id = ?", call.arguments.get("item_id")
        )
        title = f"\"{item['title']}\" " if item else ""
        return [f"lend you {title}(item {call.arguments.get('item_id')})"]
    loan = kit.row(
        conn,
        "SELECT l.*, i.title FROM loans l JOIN items i USING (item_id) WHERE loan_id = ?",
        call.arguments.get("loan_id"),
    )
    what = f"\"{loan['title']}\" (item {loan['item_id']})" if loan else "the item"
    return [f"check in {what} and close your loan {call.arguments.get('loan_id')}"]
''',
}


def new_world(name: str, dest: Path) -> list[Path]:
    """Write the skeleton world `name` into ``dest/name`` (a new or empty folder); returns
    the files written. `name` is a lower-case identifier (``my_world``)."""
    if not NAME.match(name):
        raise ValueError(f"world name {name!r}: use lower-case letters, digits and _, starting with a letter")
    folder = Path(dest) / name
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} exists and is not empty")
    folder.mkdir(parents=True, exist_ok=True)
    title = name.replace("_", " ").title()
    out = []
    for file, text in FILES.items():
        path = folder / file
        path.write_text(text.replace("{name}", name).replace("{title}", title))
        out.append(path)
    return out
