"""The telecom world's explorer and projection hooks (see `envs/design.py`; re-exported by
`design.py`): the write calls the explorer tries around a variant's focus, and what a reached
state means to the customer (`actions_of`, `describe`, `goal_score`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from data.records import ToolCall
from envs import cove
from envs import sql as kit
from envs.design import Goal, Variant
from envs.state import CellChange

ROAMING_PASSES = ["ad_roam_eu", "ad_roam_world"]
PK = {"lines": ["line_id"], "line_addons": ["line_id", "addon_id"], "payments": ["payment_id"],
      "bills": ["bill_id"]}
ORDER = ["pay", "resume", "add_line", "change_plan", "remove_addon", "add_addon", "roaming_on", "roaming_off",
         "suspend", "terminate"]  # the order a customer would ask in
Want = tuple[str, dict[str, Any], float]  # (action kind, fields that must match, weight)
UNMATCHED_PENALTY = 0.25  # (ours) per action a goal has beyond what the variant's user wants


def addon_name(conn: sqlite3.Connection, addon_id: str) -> str:
    return str(kit.one(conn, "SELECT name FROM addons WHERE addon_id = ?", addon_id)["name"])


def plan_name(conn: sqlite3.Connection, plan_id: str) -> str:
    return str(kit.one(conn, "SELECT name FROM plans WHERE plan_id = ?", plan_id)["name"])


# -- candidate and lookup calls ---------------------------------------------------------------

def candidate_calls(conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
    """Write calls of the variant's action kinds, arguments drawn from the database around
    the focus records (including the one-past-the-limit ones a naive agent would try)."""
    cid = focus["user_id"]
    actions = set(focus.get("actions", []))
    calls: list[ToolCall] = []

    def add(name: str, **arguments: Any) -> None:
        calls.append(ToolCall(name=name, arguments=arguments))

    if "add_line" in actions:
        for pid in focus.get("plan_ids", []):
            add("add_line", customer_id=cid, plan_id=pid)
    if "pay_bill" in actions:
        for bid in focus.get("bill_ids", []):
            bill = kit.one(conn, "SELECT amount - amount_paid AS remaining FROM bills WHERE bill_id = ?", bid)
            rem = bill["remaining"]
            if rem <= 0:
                continue
            for mid in focus.get("method_ids", []):
                for amount in sorted({rem - 1, rem, rem + 1} - {0}):
                    add("pay_bill", bill_id=bid, method_id=mid, amount=amount)
    for lid in focus.get("line_ids", []):
        line = kit.one(conn, "SELECT * FROM lines WHERE line_id = ?", lid)
        present = [r["addon_id"] for r in kit.rows(conn, "SELECT addon_id FROM line_addons WHERE line_id = ?"
                                                      " ORDER BY addon_id", lid)]
        if "add_addon" in actions:
            for aid in focus.get("addon_ids", []):
                if aid not in present:
                    add("add_addon", line_id=lid, addon_id=aid)
        if "remove_addon" in actions:
            for aid in present:
                add("remove_addon", line_id=lid, addon_id=aid)
        if "set_roaming" in actions:
            add("set_roaming", line_id=lid, enabled=not line["roaming_enabled"])
        if "suspend_line" in actions and line["status"] == "active":
            for reason in focus.get("reasons", ["travel"]):
                add("suspend_line", line_id=lid, reason=reason)
        if "resume_line" in actions and line["status"] != "active":  # terminated: R13 rejects it
            add("resume_line", line_id=lid)
        if "change_plan" in actions:
            for pid in focus.get("plan_ids", []):
                if pid != line["plan_id"]:
                    add("change_plan", line_id=lid, plan_id=pid)
        if "terminate_line" in actions and line["status"] != "terminated":
            add("terminate_line", line_id=lid)
    return calls


def lookup_calls(focus: dict[str, Any]) -> list[ToolCall]:
    """The account first, then the line the customer named (if any)."""
    calls = [ToolCall(name="get_customer_details", arguments={"customer_id": focus["user_id"]})]
    calls += [ToolCall(name="get_line_details", arguments={"line_id": lid}) for lid in focus.get("line_ids", [])]
    return calls


# -- projection: from cell changes to what the customer asked for ---------------------------------

def _grouped(changes: list[CellChange]) -> dict[tuple[str, str], dict[str, CellChange]]:
    rows: dict[tuple[str, str], dict[str, CellChange]] = {}
    for c in changes:
        rows.setdefault((c.table, c.key), {})[c.column] = c
    return rows


def actions_of(changes: list[CellChange]) -> list[tuple[str, dict[str, Any]]] | None:
    """The customer-visible actions behind a state change, side effects (bill balances,
    reconnection, suspension counters, contract dates, fees, roaming switched off with its
    pass) left out; None when a change has no action a customer could ask for."""
    actions: list[tuple[str, dict[str, Any]]] = []
    side_roaming_off: set[str] = set()
    paid = any(t == "payments" for t, _ in _grouped(changes))
    rows = _grouped(changes)
    for (table, key), cols in rows.items():
        if table == "ledger":  # the world's record of what happened follows from the actions
            continue
        op = next(iter(cols.values())).op
        ids = dict(zip(PK.get(table, []), json.loads(key), strict=False))
        after = {c: ch.after for c, ch in cols.items()}
        before = {c: ch.before for c, ch in cols.items()}
        if table == "payments" and op == "insert":
            actions.append(("pay", {k: after[k] for k in ("bill_id", "method_id", "amount")}))
        elif table == "line_addons" and op in ("insert", "delete"):
            kind = "add_addon" if op == "insert" else "remove_addon"
            actions.append((kind, ids))
            if op == "delete" and ids.get("addon_id") in ROAMING_PASSES:
                side_roaming_off.add(ids["line_id"])
        elif table == "lines" and op == "insert":
            actions.append(("add_line", {"customer_id": after["customer_id"], "plan_id": after["plan_id"],
                                         "line_id": after["line_id"]}))
        elif table == "lines" and op == "update":
            lid = ids["line_id"]
            if "plan_id" in cols:
                actions.append(("change_plan", {"line_id": lid, "plan_id": after["plan_id"]}))
                side_roaming_off.add(lid)
            if "status" in cols:
                new, old = after["status"], before["status"]
                if new == "suspended":
                    actions.append(("suspend", {"line_id": lid, "reason": after.get("suspend_reason")}))
                elif new == "terminated":
                    actions.append(("terminate", {"line_id": lid}))
                    side_roaming_off.add(lid)
                elif old == "suspended" and before.get("suspend_reason") == "non_payment" and paid:
                    pass  # reconnected by the payment that cleared the overdue balance
                else:
                    actions.append(("resume", {"line_id": lid}))
            if "roaming_enabled" in cols:
                if after["roaming_enabled"]:
                    actions.append(("roaming_on", {"line_id": lid}))
                elif lid not in side_roaming_off:
                    actions.append(("roaming_off", {"line_id": lid}))
        elif table == "bills" and (op == "update" and paid or op == "insert"
                                   and after.get("kind") == "early_termination"):
            continue
        else:
            return None
    # roaming switched off by a removed pass or a plan change is a side effect, whatever the order
    return [a for a in actions if not (a[0] == "roaming_off" and a[1]["line_id"] in side_roaming_off)]


def _number(conn: sqlite3.Connection, lid: str) -> str:
    return str(kit.one(conn, "SELECT phone_number FROM lines WHERE line_id = ?", lid)["phone_number"])


def _method_phrase(conn: sqlite3.Connection, mid: str) -> str:
    m = kit.one(conn, "SELECT * FROM payment_methods WHERE method_id = ?", mid)
    what = "card" if m["kind"] == "card" else "bank account"
    return f"your {what} ending in {m['last4']}"


def _bill_phrase(conn: sqlite3.Connection, bid: str) -> str:
    b = kit.one(conn, "SELECT * FROM bills WHERE bill_id = ?", bid)
    if b["kind"] == "early_termination":
        return "your early termination fee bill"
    return f"your {cove.month_words(b['period'])} bill"


def _phrase(kind: str, f: dict[str, Any], before: sqlite3.Connection, after: sqlite3.Connection,
            variant: Variant) -> str:
    pref = variant.preference
    if kind == "pay":
        bill = kit.one(before, "SELECT amount - amount_paid AS remaining FROM bills WHERE bill_id = ?", f["bill_id"])
        how = ("pay off the remaining balance of" if f["amount"] == bill["remaining"]
               else f"pay {f['amount']} towards")
        text = f"{how} {_bill_phrase(before, f['bill_id'])} with {_method_phrase(before, f['method_id'])}"
        if "believed_amount" in pref:
            text += f" (you think you still owe {pref['believed_amount']})"
        if pref.get("preferred_method") and pref["preferred_method"] != f["method_id"]:
            text += f" (you would rather use {_method_phrase(before, pref['preferred_method'])} if it is accepted)"
        return text
    if kind in ("add_addon", "remove_addon"):
        name = addon_name(after, f["addon_id"])
        if kind == "add_addon":
            return f"add the {name} add-on to your line {_number(after, f['line_id'])}"
        return f"remove the {name} add-on from your line {_number(after, f['line_id'])}"
    if kind == "add_line":
        text = f"open a new line on the {plan_name(after, f['plan_id'])} plan"
        if pref.get("old_number"):
            text = f"get your old line {pref['old_number']} working again; if that is not possible, {text} instead"
        return text
    number = _number(after, f["line_id"])
    if kind == "change_plan":
        text = f"switch your line {number} to the {plan_name(after, f['plan_id'])} plan"
        if pref.get("preferred_plan") and pref["preferred_plan"] != f["plan_id"]:
            text += f" (you would prefer the {plan_name(after, pref['preferred_plan'])} plan if you can still get it)"
        return text
    if kind == "suspend":
        why = "while you are travelling" if f["reason"] == "travel" else "because your phone was lost or stolen"
        return f"suspend your line {number} {why}"
    return {"resume": f"reactivate your suspended line {number}", "terminate": f"close your line {number} for good",
            "roaming_on": f"switch on roaming on your line {number}",
            "roaming_off": f"switch off roaming on your line {number}"}[kind]


def describe(changes: list[CellChange], before: sqlite3.Connection, after: sqlite3.Connection,
             variant: Variant) -> Goal | None:
    """User-perspective projection of a change (side effects implied, ids never named)."""
    actions = actions_of(changes)
    if actions is None:
        return None
    known = {"user_id": variant.focus["user_id"]}
    if variant.focus.get("phone"):
        known["phone number"] = variant.focus["phone"]
    if not actions:
        if not variant.allow_no_change or "wish" not in variant.preference:
            return None
        return Goal(instruction=f"You want to {variant.preference['wish']}.", reason="account change",
                    known_info=known, unknown_info=["whether the policy allows it"])
    pref = variant.preference
    actions.sort(key=lambda a: ORDER.index(a[0]))
    main: list[str] = []
    conditions: list[str] = []
    for kind, f in actions:
        text = _phrase(kind, f, before, after, variant)
        if kind == "pay" and pref.get("conditional_payment") and len(actions) > 1 and text.startswith("pay off"):
            conditions.append(f"if anything on your account is overdue, you are willing to pay it off in full "
                              f"first with {_method_phrase(before, f['method_id'])}")
        elif kind == "add_addon" and pref.get("conditional_addon") == f["addon_id"] and len(actions) > 1:
            conditions.append(f"if that needs an add-on, you want the {addon_name(after, f['addon_id'])}")
        else:
            main.append(text)
    if not main:
        return None
    instruction = "You want to " + "; and ".join(main)
    if conditions:
        instruction += " (" + "; ".join(conditions) + ")"
    return Goal(instruction=instruction + ".", reason="account change", known_info=known)


def goal_score(changes: list[CellChange], variant: Variant) -> float:
    """Weights of the variant's wanted actions that the change achieves, minus a small
    penalty per action nobody asked for; refusing scores 3 where it is right."""
    actions = actions_of(changes) or []
    if not actions:
        return 3.0 if variant.allow_no_change else 0.0
    score = 0.0
    open_wants = list(variant.focus.get("wants", []))
    for kind, fields in actions:
        matched = [w for w in open_wants if w[0] == kind and all(fields.get(k) == v for k, v in w[1].items())]
        if matched:  # each want counts once: doing the same thing twice earns nothing
            best = max(matched, key=lambda w: float(w[2]))
            open_wants.remove(best)
            score += float(best[2])
        else:
            score -= UNMATCHED_PENALTY
    return score
