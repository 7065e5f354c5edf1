"""Constraint sets of the telecom world (CoVe, methods.md §2); the hooks are described in
`envs/constraints.py`, the shared helpers in `envs/cove.py`.

A set is about one account (the customer gives their account id, P1): one request out of
moving a line to another plan (available, no downgrade under contract, allowance covering
the data used, no overdue bill), adding an add-on, switching roaming on, suspending a line
(lost or stolen, or travel; within the yearly limit), paying what is left of a bill
with a method that has not expired, opening a new line (room under the segment's limit),
removing an add-on, reactivating a line suspended by the customer, and closing a line for
good; with probability `p_extra` a second request on another line or bill. With `kind`
(constraint-guided synthesis passes the kinds in turn) the first request is of that kind. A set is kept only if its writes succeed in every order.
Two kinds depend on the line the set opens (`envs.cove.ON_NEW`), their writes in that
order: "new_line_addon" opens a line and adds an add-on to it; "new_line_roaming" opens a
line, adds a roaming pass to it when its plan does not include roaming, and switches its
roaming on (one to three requests, each on what the one before made).
Descriptions replace line, plan, add-on, bill and payment-method ids; each matches exactly
one record of its scope (lines, bills and methods: the account's; plans: the available
ones; add-ons: all).
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from collections.abc import Callable
from typing import Any

from data.records import ToolCall
from envs import cove
from envs import sql as kit
from envs.constraints import Constraint, Fuzzification, FuzzyRef, record_key
from envs.design import Goal

WORLD = "telecom"
IDENTITY_FIELDS = ("customer_id",)  # the account id the customer gives (P1)
BASE_KINDS = ["plan", "addon", "roaming", "suspend", "pay", "new_line", "drop_addon", "resume", "terminate"]
DEPENDENT = ["new_line_addon", "new_line_roaming"]  # requests on the line the set opens
KINDS = [*BASE_KINDS, *DEPENDENT]
# The customer's own reason for a request on the line they are opening.
NEW_LINE_REASONS = {  # add-on kind (or "roaming": switching it on) -> reasons
    "data": ["whoever uses it streams a lot of video", "the plan's data alone will not last the month",
             "it will be used as a hotspot for a laptop"],
    "calls": ["it will be used to call family overseas", "most of its calls will be to numbers abroad"],
    "roaming": ["whoever uses it will be travelling abroad soon", "it will mostly be used while travelling",
                "whoever carries it will be abroad within the week"],
    "insurance": ["the phone it goes into is brand new and expensive", "whoever carries it tends to drop things"]}
LINE_LIMIT = {"business": 8}  # lines an account may hold (not terminated); other segments 4 (R02)
REASON_WORDS = {"lost_or_stolen": "your phone was lost or stolen", "travel": "you are travelling"}
ADDON_WORDS = {"data": "data boost", "roaming": "roaming pass", "calls": "international calling add-on",
               "insurance": "device protection add-on"}
MB_PER_GB = 1024


# -- entities -----------------------------------------------------------------------------

# Each entity's records: its query, id column and attributes (a column, or (attribute, column or function)).
ENTITIES = {
    "line": cove.view("SELECT l.*, p.name AS plan_name FROM lines l JOIN plans p USING (plan_id)", "line_id",
                      "customer_id", ("plan", "plan_name"), "status", ("ending", lambda r: r["phone_number"][-4:])),
    "plan": cove.view("SELECT * FROM plans", "plan_id",
                      "status", "data_gb", "monthly_fee", ("roaming", "roaming_included")),
    "addon": cove.view("SELECT * FROM addons", "addon_id", "kind", "data_gb", "monthly_fee"),
    "bill": cove.view("SELECT * FROM bills", "bill_id", "customer_id", "period", "kind", "status"),
    "method": cove.view("SELECT * FROM payment_methods", "method_id", "customer_id", "kind", "last4"),
}


def matching_ids(conn: sqlite3.Connection, entity: str, where: dict[str, Any]) -> list[str]:
    """Ids of the `entity` records whose attributes equal every value in `where`."""
    return cove.matching_ids_in(ENTITIES, conn, entity, where)


def _one(conn: sqlite3.Connection, entity: str, record_id: str) -> dict[str, Any]:
    return cove.one(ENTITIES, conn, entity, record_id)


# -- sampling ----------------------------------------------------------------------------

def _today(conn: sqlite3.Connection) -> str:
    return kit.now(conn)[:10]


def _overdue(conn: sqlite3.Connection, cid: str) -> bool:
    return conn.execute("SELECT 1 FROM bills WHERE customer_id = ? AND status = 'open' AND due_date < ?",
                        (cid, _today(conn))).fetchone() is not None


def _allowance_mb(conn: sqlite3.Connection, line_id: str, plan_gb: int) -> int:
    (addon_gb,) = conn.execute("SELECT COALESCE(SUM(a.data_gb), 0) FROM line_addons la JOIN addons a"
                               " USING (addon_id) WHERE la.line_id = ?", (line_id,)).fetchone()
    return MB_PER_GB * (plan_gb + addon_gb)


def _plan_options(conn: sqlite3.Connection, line: dict[str, Any]) -> list[str]:
    """Available plans the line may move to (R01, R11, R12)."""
    cur = kit.rows(conn, "SELECT * FROM plans WHERE plan_id = ?", line["plan_id"])[0]
    under_contract = bool(line["contract_end"] and line["contract_end"] > _today(conn))
    out = []
    for p in kit.rows(conn, "SELECT * FROM plans WHERE status = 'available' ORDER BY plan_id"):
        if p["plan_id"] == line["plan_id"] or (under_contract and p["monthly_fee"] < cur["monthly_fee"]):
            continue
        if line["data_used_mb"] <= _allowance_mb(conn, line["line_id"], p["data_gb"]):
            out.append(p["plan_id"])
    return out


def _sample(kind: str, conn: sqlite3.Connection, rng: random.Random, cid: str,
            avoid: set[str]) -> Constraint | None:
    """One constraint of `kind` for account `cid` on records outside `avoid` (ids)."""
    base = {"customer_id": cid}
    if kind == "pay":
        bills = [b for b in kit.rows(conn, "SELECT * FROM bills WHERE customer_id = ? AND status = 'open'"
                                            " ORDER BY bill_id", cid) if b["bill_id"] not in avoid]
        month = _today(conn)[:7]
        methods = [m["method_id"] for m in kit.rows(conn, "SELECT * FROM payment_methods WHERE customer_id = ?"
                                                           " ORDER BY method_id", cid)
                   if m["expires"] is None or m["expires"] >= month]
        if not bills or not methods:
            return None
        b = rng.choice(bills)
        return Constraint(kind="pay", fields={**base, "bill_id": b["bill_id"], "method_id": rng.choice(methods),
                                              "amount": b["amount"] - b["amount_paid"]})
    if kind == "new_line":
        segment, held = conn.execute(
            "SELECT segment, (SELECT COUNT(*) FROM lines WHERE customer_id = ? AND status <> 'terminated')"
            " FROM customers WHERE customer_id = ?", (cid, cid)).fetchone()
        if held >= LINE_LIMIT.get(segment, 4) or _overdue(conn, cid) or "new_line" in avoid:
            return None
        plans = [p["plan_id"] for p in kit.rows(conn, "SELECT plan_id FROM plans WHERE status = 'available'"
                                                     " ORDER BY plan_id")]
        return Constraint(kind="new_line", fields={**base, "plan_id": rng.choice(plans)}) if plans else None
    status = "suspended" if kind == "resume" else "active"
    lines = [ln for ln in kit.rows(conn, "SELECT * FROM lines WHERE customer_id = ? AND status = ?"
                                          " ORDER BY line_id", cid, status) if ln["line_id"] not in avoid]
    if not lines or (kind not in ("suspend", "terminate", "drop_addon") and _overdue(conn, cid)):
        return None
    rng.shuffle(lines)
    for ln in lines:
        lid = ln["line_id"]
        if kind == "plan":
            options = _plan_options(conn, ln)
            if options:
                return Constraint(kind="plan", fields={**base, "line_id": lid, "plan_id": rng.choice(options)})
        elif kind == "addon":
            have = {r[0] for r in conn.execute("SELECT addon_id FROM line_addons WHERE line_id = ?", (lid,))}
            options = [a["addon_id"] for a in kit.rows(conn, "SELECT addon_id FROM addons ORDER BY addon_id")
                       if a["addon_id"] not in have]
            if len(have) < 3 and options:
                return Constraint(kind="addon", fields={**base, "line_id": lid, "addon_id": rng.choice(options)})
        elif kind == "roaming":
            allowed = conn.execute(
                "SELECT p.roaming_included OR EXISTS (SELECT 1 FROM line_addons la JOIN addons a USING (addon_id)"
                " WHERE la.line_id = l.line_id AND a.kind = 'roaming') FROM lines l JOIN plans p USING (plan_id)"
                " WHERE l.line_id = ?", (lid,)).fetchone()[0]
            if allowed and not ln["roaming_enabled"]:
                return Constraint(kind="roaming", fields={**base, "line_id": lid, "enabled": True})
        elif kind == "suspend" and ln["suspensions_ytd"] < 2:
            return Constraint(kind="suspend", fields={**base, "line_id": lid, "reason": rng.choice(list(REASON_WORDS))})
        elif kind == "drop_addon":
            have = [r[0] for r in conn.execute("SELECT addon_id FROM line_addons WHERE line_id = ? ORDER BY addon_id",
                                               (lid,))]
            if have:
                return Constraint(kind="drop_addon", fields={**base, "line_id": lid, "addon_id": rng.choice(have)})
        elif kind == "resume" and ln["suspend_reason"] != "non_payment":  # the customer's own suspension
            return Constraint(kind="resume", fields={**base, "line_id": lid})
        elif kind == "terminate":
            return Constraint(kind="terminate", fields={**base, "line_id": lid})
    return None


def _touched(c: Constraint) -> set[str]:
    """The records a constraint acts on (a new line: the account's line count, as "new_line")."""
    return {str(c.fields[k]) for k in ("line_id", "bill_id") if k in c.fields} | (
        {"new_line"} if c.kind == "new_line" else set())


def _on_new_line(conn: sqlite3.Connection, rng: random.Random, cid: str, kind: str) -> list[Constraint]:
    """A new line for account `cid` and the requests of `kind` on it (module docstring):
    the line id its write mints, and add-ons and roaming that succeed on it in order."""
    opening = _sample("new_line", conn, rng, cid, set())
    if opening is None:
        return []
    plans = {p["plan_id"]: p for p in kit.rows(conn, "SELECT * FROM plans WHERE status = 'available'")}
    if kind == "new_line_roaming" and rng.random() < 0.5:  # some plans include roaming: no pass needed
        with_roaming = sorted(p for p, row in plans.items() if row["roaming_included"])
        if with_roaming:
            opening = Constraint(kind="new_line", fields={"customer_id": cid, "plan_id": rng.choice(with_roaming)})
    lid = cove.created_id(conn, WORLD, [write_call(opening)], "lines", "line_id")
    if lid is None:
        return []
    on_it = {"customer_id": cid, "line_id": lid, cove.ON_NEW: 0}
    addons = kit.rows(conn, "SELECT addon_id, kind FROM addons ORDER BY addon_id")
    out = [opening]
    if kind == "new_line_addon":
        out.append(Constraint(kind="addon", fields={**on_it, "addon_id": rng.choice(addons)["addon_id"]}))
    else:
        if not plans[opening["plan_id"]]["roaming_included"]:
            passes = [a["addon_id"] for a in addons if a["kind"] == "roaming"]
            if not passes:
                return []
            out.append(Constraint(kind="addon", fields={**on_it, "addon_id": rng.choice(passes)}))
        out.append(Constraint(kind="roaming", fields={**on_it, "enabled": True}))
    return out  # kept if its writes succeed in this order (cove.constraint_sampler)


sample_constraints = cove.constraint_sampler(
    WORLD, lambda conn: [r["customer_id"] for r in kit.rows(conn, "SELECT customer_id FROM customers ORDER BY customer_id")],
    BASE_KINDS, DEPENDENT, _on_new_line, _sample, _touched, lambda c: write_call(c),  # write_call: below
    owner="account", other="another line or bill")


# -- fuzzification -------------------------------------------------------------------------

def line_text(where: dict[str, Any]) -> str:
    text = "your " + (f"{where['status']} " if "status" in where else "") + "line"
    return cove.worded(text, where, plan=" on the {} plan", ending=" whose number ends in {}")


def plan_text(where: dict[str, Any]) -> str:
    return cove.worded("the plan", where, data_gb=" with {} GB of data", monthly_fee=" for {} a month")


def addon_text(where: dict[str, Any]) -> str:
    text = f"the {ADDON_WORDS[where['kind']]}"
    if where.get("data_gb"):
        text += f" with {where['data_gb']} GB"
    if "monthly_fee" in where:
        text += f" that costs {where['monthly_fee']} a month"
    return text


def bill_text(where: dict[str, Any]) -> str:
    kind = {"monthly": "monthly ", "early_termination": "early termination "}.get(where.get("kind", ""), "")
    return f"your {kind}bill for {cove.month_words(where['period'])}"


def method_text(where: dict[str, Any]) -> str:
    name = "card" if where["kind"] == "card" else "bank account"
    return f"your {name}" + (f" ending in {where['last4']}" if "last4" in where else "")


# entity -> (the records its description tells it from: those sharing its column, or having
# the attributes; the attributes that tell it apart, in order; how a description is said)
LADDERS: dict[str, tuple[str | dict[str, Any], list[str], Callable[[dict[str, Any]], str]]] = {
    "line": ("customer_id", ["plan", "status", "ending"], line_text),  # the number's last four digits
    "plan": ({"status": "available"}, ["data_gb", "monthly_fee"], plan_text),
    "addon": ({}, ["kind", "data_gb", "monthly_fee"], addon_text),
    "bill": ("customer_id", ["period", "kind"], bill_text),  # the billing month
    "method": ("customer_id", ["kind", "last4"], method_text),
}


def _describe(conn: sqlite3.Connection, slot: str, entity: str, record_id: str) -> FuzzyRef:
    """The first description on the entity's ladder (`LADDERS`) that matches only the record."""
    among, order, text = LADDERS[entity]
    return cove.described(ENTITIES, conn, slot, entity, record_id, among, order, text)


def fuzzify(conn: sqlite3.Connection, constraints: list[Constraint], rng: random.Random) -> Fuzzification:
    """Unique descriptions for every id in the set, keyed "c<i>.<field>"; raises
    `FuzzifyError` when the most specific description still matches two or more records."""

    def of(entity: str) -> cove.Describe:
        return lambda s, v: _describe(conn, s, entity, v)

    def fields(c: Constraint) -> dict[str, cove.Describe] | None:
        if c.kind == "pay":
            return {"bill_id": of("bill"), "method_id": of("method")}
        if c.kind == "new_line":
            return {"plan_id": of("plan")}
        if cove.ON_NEW in c.fields:  # the line the customer is opening: "the new line"
            return {"addon_id": of("addon")} if c.kind == "addon" else {}
        if c.kind not in ("plan", "addon", "roaming", "suspend", "drop_addon", "resume", "terminate"):
            return None
        found = {"line_id": of("line")}
        if c.kind == "plan":
            found["plan_id"] = of("plan")
        if c.kind in ("addon", "drop_addon"):
            found["addon_id"] = of("addon")
        return found

    return cove.fuzzification(constraints, fields)


# The request sentence of a kind ({field}: the field's description) and what the customer then
# knows: (the known-info label, the field it is, the id they do not know).
_LINE_ASKS: dict[str, tuple[str, tuple[str, str, str] | None]] = {
    "plan": ("move {line_id} to {plan_id}", ("new plan", "plan_id", "the plan id")),
    "addon": ("add {addon_id} to {line_id}", ("add-on", "addon_id", "the add-on id")),
    "roaming": ("switch roaming on for {line_id}", None),
    "new_line": ("open a new line on {plan_id}", ("plan for the new line", "plan_id", "the plan id")),
    "drop_addon": ("remove {addon_id} from {line_id}", ("add-on to remove", "addon_id", "the add-on id")),
    "resume": ("reactivate {line_id}", None),
    "terminate": ("close {line_id} for good", None),
}


def goal(constraints: list[Constraint], fuzzy: dict[str, str]) -> Goal:
    """The user's goal from the descriptions (never the ids but the account's own)."""
    parts: list[str] = []
    known = cove.KnownInfo({"customer_id": constraints[0]["customer_id"]})
    unknown: set[str] = set()
    for i, c, f in known.requests(constraints, fuzzy):
        if cove.ON_NEW in c.fields:
            said = next((k for k, words in ADDON_WORDS.items() if c.kind == "addon" and words in f["addon_id"]),
                        "roaming")  # the add-on's kind, as its description names it
            bank = NEW_LINE_REASONS[said]
            why = bank[int(hashlib.sha256(f"{c['line_id']}|{c.kind}".encode()).hexdigest(), 16) % len(bank)]
            if c.kind == "addon":
                parts.append(f"add {f['addon_id']} to that new line, since {why}")
                known["add-on for the new line"] = f["addon_id"]
                unknown.add("the add-on id")
            elif any(p.kind == "addon" and cove.ON_NEW in p.fields for p in constraints[:i]):
                parts.append("have roaming switched on for it as well")  # the pass already says why
                known["roaming on the new line"] = "on"
            else:
                parts.append(f"have roaming switched on for it, since {why}")
                known["roaming on the new line"] = "on"
            continue
        if "line_id" in f:
            known["line"] = cove.mine(f["line_id"])
            unknown.add("the line id")
        if c.kind in _LINE_ASKS:
            words, knows = _LINE_ASKS[c.kind]
            parts.append(words.format(**f))
            if knows is not None:
                label, field, id_words = knows
                known[label] = f[field]
                unknown.add(id_words)
        elif c.kind == "suspend":
            parts.append(f"suspend {f['line_id']} because {REASON_WORDS[c['reason']]}")
            known["reason"] = c["reason"].replace("_", " ")
        elif c.kind == "pay":
            parts.append(f"pay the {c['amount']} still owed on {f['bill_id']} with {f['method_id']}")
            known.update({"bill": cove.mine(f["bill_id"]), "payment method": cove.mine(f["method_id"]),
                          "amount": str(c["amount"])})
            unknown |= {"the bill id", "the payment method id"}
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
    return cove.wants(parts, "your mobile account", known, unknown)


# -- reference and checks ------------------------------------------------------------------

# kind -> the write tool and its arguments (each the constraint's field of that name), or the call.
_WRITES: cove.Calls = {
    "plan": ("change_plan", "line_id", "plan_id"), "addon": ("add_addon", "line_id", "addon_id"),
    "suspend": ("suspend_line", "line_id", "reason"), "pay": ("pay_bill", "bill_id", "method_id", "amount"),
    "new_line": ("add_line", "customer_id", "plan_id"), "drop_addon": ("remove_addon", "line_id", "addon_id"),
    "resume": ("resume_line", "line_id"), "terminate": ("terminate_line", "line_id"),
    "roaming": lambda c: ToolCall(name="set_roaming", arguments={"line_id": c["line_id"], "enabled": bool(c["enabled"])}),
}
# kind -> the read of what it chooses from (plans, add-ons) or pays (the bill), after the line's details.
_READS: cove.Calls = {
    "plan": ("list_plans",), "new_line": ("list_plans",), "addon": ("list_addons",),
    "pay": ("get_bill_details", "bill_id"),
}


def write_call(c: Constraint) -> ToolCall:
    """The one write that satisfies `c`."""
    return cove.call_of(c, _WRITES)


def reference_calls(conn: sqlite3.Connection, constraints: list[Constraint]) -> list[ToolCall]:
    """Look the account and the records up (P1), then one write per constraint."""

    def reads(c: Constraint) -> list[ToolCall]:
        out = []
        if "line_id" in c.fields and cove.ON_NEW not in c.fields:  # a new line shows in its own write's result
            out.append(ToolCall(name="get_line_details", arguments={"line_id": c["line_id"]}))
        return out + ([cove.call_of(c, _READS)] if c.kind in _READS else [])

    account = ToolCall(name="get_customer_details", arguments={"customer_id": constraints[0]["customer_id"]})
    return cove.reference_calls(constraints, [account], reads, write_call)


_line = kit.lookup("lines", "line_id")


def check(conn_initial: sqlite3.Connection, conn_final: sqlite3.Connection,
          constraints: list[Constraint]) -> tuple[list[bool], list[dict[str, Any]]]:
    """Each constraint on the final state; a detail names the satisfying record.

    - plan: the line is on that plan now (and was not before);
    - addon: the line carries that add-on now (and did not before);
    - roaming: roaming is on now (it was off);
    - addon or roaming on the line the set opens (``on_new``): as above, on the line the
      new_line constraint was met by (a new line starts with neither);
    - suspend: the line was active and is suspended now, for that reason;
    - pay: one new payment of exactly that amount on the bill with that method;
    - new_line: a new line of the account on that plan (its id did not exist before);
    - drop_addon: the line carried that add-on and does not now;
    - resume: the line was suspended and is active now;
    - terminate: the line was not terminated and is now.
    """
    satisfied: list[bool] = []
    details: list[dict[str, Any]] = []
    lines_made: list[Any] = []  # per constraint: the line a new_line constraint was met by
    for c in constraints:
        f = dict(c.fields)
        key: list[Any] | None = None
        table = "lines"
        new_line = cove.ON_NEW in f  # about the line the set opens: it starts without add-ons or roaming
        if new_line:
            f["line_id"] = cove.target(c, "line_id", lines_made)
        if new_line and f["line_id"] is None:
            reason = "the new line it is about was not opened"
        elif new_line and c.kind == "roaming":
            after = _line(conn_final, f["line_id"])
            ok = bool(after and after["roaming_enabled"] == 1)
            key = [f["line_id"]] if ok else None
            reason = "roaming on" if ok else "roaming not switched on"
        elif c.kind in ("plan", "roaming", "suspend", "resume", "terminate"):
            before, after = _line(conn_initial, f["line_id"]), _line(conn_final, f["line_id"])
            if c.kind == "resume":
                ok = bool(before and after and before["status"] == "suspended" and after["status"] == "active")
                reason = "reactivated" if ok else f"status {after['status'] if after else 'missing'}"
            elif c.kind == "terminate":
                ok = bool(before and after and before["status"] != "terminated" and after["status"] == "terminated")
                reason = "terminated" if ok else f"status {after['status'] if after else 'missing'}"
            elif c.kind == "plan":
                ok = bool(before and after and after["plan_id"] == f["plan_id"] != before["plan_id"])
                reason = "plan changed" if ok else f"on {after['plan_id'] if after else 'no line'}"
            elif c.kind == "roaming":
                ok = bool(before and after and after["roaming_enabled"] == 1 and before["roaming_enabled"] == 0)
                reason = "roaming on" if ok else "roaming not switched on"
            else:
                ok = bool(before and after and before["status"] == "active" and after["status"] == "suspended"
                          and after["suspend_reason"] == f["reason"])
                reason = "suspended" if ok else (f"status {after['status']}, reason {after['suspend_reason']}"
                                                 if after else "missing")
            key = [f["line_id"]] if ok else None
        elif c.kind in ("addon", "drop_addon"):
            table = "line_addons"
            had, has = (kit.row(db, "SELECT 1 FROM line_addons WHERE line_id = ? AND addon_id = ?", f["line_id"],
                                f["addon_id"]) is not None for db in (conn_initial, conn_final))
            if c.kind == "addon":
                ok = has and not had
                reason = "add-on added" if ok else "the line does not carry a new add-on of that kind"
            else:
                ok = had and not has
                reason = "add-on removed" if ok else "the line still carries the add-on (or never did)"
            key = [f["line_id"], f["addon_id"]] if ok else None
        elif c.kind == "new_line":
            new = cove.new_ids(conn_initial, conn_final, "lines", "line_id",
                               {"customer_id": f["customer_id"], "plan_id": f["plan_id"], "status": "active"})
            key = [new[0]] if new else None
            reason = "line opened" if new else "no new line of the account on that plan"
        elif c.kind == "pay":
            table = "payments"
            new = cove.new_ids(conn_initial, conn_final, "payments", "payment_id",
                               {"bill_id": f["bill_id"], "method_id": f["method_id"], "amount": f["amount"]})
            key = [new[0]] if new else None
            reason = "paid" if new else "no new payment of that amount on the bill with that method"
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
        satisfied.append(key is not None)
        lines_made.append(key[0] if key and c.kind == "new_line" else None)
        details.append({"kind": c.kind, "satisfied": key is not None, "reason": reason,
                        "record": {"table": table, "key": record_key(key)} if key else None})
    return satisfied, details


# -- known-bad variants for the verifier audit --------------------------------------------------

def audit_mutations(conn: sqlite3.Connection, constraints: list[Constraint],
                    reference: list[ToolCall]) -> dict[str, list[ToolCall]]:
    """Variants of `reference` that must fail and whose writes all succeed: a wrong target
    line or bill, a wrong plan or add-on, a wrong payment method or amount, a wrong
    suspension reason, one extra (unrelated, successful) write. A case is left out when
    the state offers no such call."""
    audit = cove.Audit(conn, WORLD, reference)
    offer = audit.offer
    touched = set().union(*(_touched(c) for c in constraints))
    cid = constraints[0]["customer_id"]

    lines = [r["line_id"] for r in kit.rows(conn, "SELECT line_id FROM lines WHERE customer_id = ? AND status ="
                                                   " 'active' ORDER BY line_id", cid) if r["line_id"] not in touched]
    for c, swap in audit.writes(constraints, write_call):
        f = c.fields
        if "line_id" in f:
            for lid in lines:
                offer("wrong_target", swap(line_id=lid))
        if c.kind in ("plan", "new_line"):
            for p in ENTITIES["plan"](conn):
                if p["id"] != f["plan_id"]:
                    offer("wrong_item", swap(plan_id=p["id"]))
        elif c.kind == "addon":
            for a in ENTITIES["addon"](conn):
                if a["id"] != f["addon_id"]:
                    offer("wrong_item", swap(addon_id=a["id"]))
        elif c.kind == "suspend":
            offer("wrong_reason", swap(reason=next(r for r in REASON_WORDS if r != f["reason"])))
        elif c.kind == "pay":
            for m in ENTITIES["method"](conn):
                if m["customer_id"] == cid and m["id"] != f["method_id"]:
                    offer("wrong_payment", swap(method_id=m["id"]))
            if f["amount"] > 1:
                offer("wrong_amount", swap(amount=f["amount"] - 1))
            for b in kit.rows(conn, "SELECT bill_id, amount - amount_paid AS left FROM bills WHERE customer_id = ?"
                                     " AND status = 'open' ORDER BY bill_id", cid):
                if b["bill_id"] not in touched:
                    offer("wrong_target", swap(bill_id=b["bill_id"], amount=min(b["left"], f["amount"])))
    # An extra write: an add-on, roaming or a suspension on a line no constraint is about.
    for lid in lines:
        for a in ENTITIES["addon"](conn):
            offer("extra_write", [*reference, ToolCall(name="add_addon", arguments={"line_id": lid,
                                                                                     "addon_id": a["id"]})])
        offer("extra_write", [*reference, ToolCall(name="suspend_line", arguments={"line_id": lid,
                                                                                    "reason": "travel"})])
    return audit.out
