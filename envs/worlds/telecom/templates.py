"""Self-play question templates of the telecom world (see `envs/templating.py`); the
world's `design.py` hook `self_play_templates()` returns `TEMPLATES`. Each draws a call
whose writes pass the compiled rules on the base state (no overdue bill where R03 applies,
an active line for plan, add-on and roaming changes, a card that has not expired, ...), from
one customer's records and the shared plans and add-ons; reads state the answer the customer
must hear."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from envs.sql import TODAY_SQL as TODAY
from envs.sql import rows
from envs.templating import (
    Out,
    Question,
    Template,
    ask,
    each,
    enum_words,
    month_words,
    pick,
    request,
    told,
)

_NO_OVERDUE = (f"NOT EXISTS (SELECT 1 FROM bills b WHERE b.customer_id = l.customer_id AND b.status = 'open'"
               f" AND b.due_date < {TODAY})")
_ACTIVE = f"SELECT l.* FROM lines l WHERE l.status = 'active' AND {_NO_OVERDUE}"


_LINES = "SELECT l.*, p.name AS plan_name FROM lines l JOIN plans p USING (plan_id)"


def customer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    def questions(c: dict[str, Any], cid: str) -> list[Question]:
        phones = [r["phone_number"] for r in rows(conn, "SELECT phone_number FROM lines WHERE customer_id = ?"
                                                        " ORDER BY line_id", cid)]
        latest = rows(conn, "SELECT amount FROM bills WHERE customer_id = ? ORDER BY due_date DESC, bill_id"
                            " LIMIT 1", cid)
        options = []
        if 1 <= len(phones) <= 3:
            options.append((f"Which phone numbers are on my account {cid}?", each("phone number", phones, "id")))
        if latest:
            options.append((f"Please pull up my account {cid} and tell me the amount of my latest bill.",
                            [told("latest bill", latest[0]["amount"], "amount")]))
        return options
    return ask(conn, rng, "SELECT * FROM customers", "customer_id", questions)


def by_number(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return ask(conn, rng, _LINES, "phone_number", lambda ln, n: [
        (f"Which account is my number {n} on?", [told("account id", ln["customer_id"], "id")]),
        (f"Is my line with the number {n} active?", [told("line status", ln["status"])])])


def line(conn: sqlite3.Connection, rng: random.Random) -> Out:
    def questions(ln: dict[str, Any], lid: str) -> list[Question]:
        addons = [r["name"] for r in rows(conn, "SELECT a.name FROM line_addons la JOIN addons a USING (addon_id)"
                                                " WHERE la.line_id = ? ORDER BY a.addon_id", lid)]
        options = [(f"Which plan is my line {lid} on?", [told("plan", ln["plan_name"])])]
        if ln["contract_end"]:
            options.append((f"When does the contract of my line {lid} end?",
                            [told("contract end", ln["contract_end"], "date")]))
        if addons:
            options.append((f"Which add-ons are on my line {lid}?", each("add-on", addons)))
        return options
    return ask(conn, rng, _LINES, "line_id", questions)


def usage(conn: sqlite3.Connection, rng: random.Random) -> Out:
    ln = pick(conn, rng, "SELECT * FROM lines")
    if ln is None:
        return None
    lid = ln["line_id"]
    return {"line_id": lid}, rng.choice([f"How much data has my line {lid} used this month, in MB?",
                                         f"How many MB of data have I used on my line {lid} so far?"]), [
        told("data used (MB)", ln["data_used_mb"], "count")]


def plans(conn: sqlite3.Connection, rng: random.Random) -> Out:
    retired = rng.random() < 0.3
    cheapest = rows(conn, "SELECT name, monthly_fee FROM plans" + ("" if retired else " WHERE status = 'available'")
                    + " ORDER BY monthly_fee, plan_id LIMIT 1")
    if not cheapest:
        return None
    c = cheapest[0]
    facts = [told("cheapest plan", c["name"]), told("monthly fee", c["monthly_fee"], "amount")]
    return {"include_retired": retired}, ("Of every plan you have had, the retired ones too, which is the cheapest?"
                                          if retired else "Which is the cheapest plan I can choose, and what"
                                          " does it cost a month?"), facts


def addons(conn: sqlite3.Connection, rng: random.Random) -> Out:
    kind = rng.choice(["roaming", "data", "calls", "insurance"])
    found = rows(conn, "SELECT name, monthly_fee FROM addons WHERE kind = ? ORDER BY addon_id", kind)
    if not found or len(found) > 3:
        return None
    return {}, rng.choice([f"Which {kind} add-ons do you offer?", f"What {kind} extras can I add to a line?"]), \
        each(f"{kind} add-on", [a["name"] for a in found])


def bill(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return ask(conn, rng, "SELECT * FROM bills", "bill_id", lambda b, bid: [
        (f"How much is still owed on {bid}?", [told("amount owed", b["amount"] - b["amount_paid"], "amount")]),
        (f"What was the amount of {bid}?", [told("bill amount", b["amount"], "amount")]),
        (f"When is {bid} due?", [told("due date", b["due_date"], "date")])])


def change_plan(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return request(conn, rng, _ACTIVE + " AND (l.contract_end IS NULL OR l.contract_end <= " + TODAY + ")",
                   lambda ln, p: ({"line_id": ln["line_id"], "plan_id": p["plan_id"]}, [
                       f"Please move my line {ln['line_id']} to {p['plan_id']}.",
                       f"Switch my line {ln['line_id']} over to {p['plan_id']}.",
                   ]), then=[lambda ln: ("SELECT * FROM plans WHERE status = 'available' AND plan_id <> ?"
                                         " AND data_gb * 1024 >= ?", (ln["plan_id"], ln["data_used_mb"]))])


def add_addon(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return request(conn, rng, _ACTIVE + " AND (SELECT COUNT(*) FROM line_addons la WHERE la.line_id = l.line_id) < 3",
                   lambda ln, a: ({"line_id": ln["line_id"], "addon_id": a["addon_id"]}, [
                       f"Add {a['addon_id']} to my line {ln['line_id']}, please.",
                       f"I'd like {a['addon_id']} on my line {ln['line_id']}.",
                   ]), then=[lambda ln: ("SELECT * FROM addons WHERE addon_id NOT IN (SELECT addon_id FROM"
                                         " line_addons WHERE line_id = ?)", (ln["line_id"],))])


def remove_addon(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return request(conn, rng, "SELECT la.* FROM line_addons la JOIN lines l USING (line_id)"
                              " WHERE l.status <> 'terminated'", lambda la: (
        {"line_id": la["line_id"], "addon_id": la["addon_id"]},
        [f"Please remove {la['addon_id']} from my line {la['line_id']}.",
         f"I no longer want {la['addon_id']} on my line {la['line_id']}."]))


def roaming(conn: sqlite3.Connection, rng: random.Random) -> Out:
    ln = pick(conn, rng, _ACTIVE + " AND l.roaming_enabled = 0 AND ((SELECT roaming_included FROM plans p"
                                   " WHERE p.plan_id = l.plan_id) = 1 OR EXISTS (SELECT 1 FROM line_addons la"
                                   " JOIN addons a USING (addon_id) WHERE la.line_id = l.line_id"
                                   " AND a.kind = 'roaming'))")
    on = ln is not None
    if ln is None:
        ln = pick(conn, rng, "SELECT * FROM lines WHERE roaming_enabled = 1 AND status <> 'terminated'")
    if ln is None:
        return None
    return {"line_id": ln["line_id"], "enabled": on}, (f"Please switch roaming {'on' if on else 'off'} for my line"
                                                       f" {ln['line_id']}.")


def suspend(conn: sqlite3.Connection, rng: random.Random) -> Out:
    ln = pick(conn, rng, "SELECT * FROM lines WHERE status = 'active' AND suspensions_ytd < 2")
    if ln is None:
        return None
    reason = rng.choice(["lost_or_stolen", "travel"])
    why = "my phone was stolen" if reason == "lost_or_stolen" else "I'm travelling for a few months"
    return {"line_id": ln["line_id"], "reason": reason}, (f"Please suspend my line {ln['line_id']}, {why}"
                                                         f" (reason: {enum_words(reason)}).")


def resume(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return request(conn, rng, "SELECT l.* FROM lines l WHERE l.status = 'suspended' AND " + _NO_OVERDUE, lambda ln: (
        {"line_id": ln["line_id"]}, [f"I'm back, please resume my line {ln['line_id']}.",
                                     f"Reactivate my suspended line {ln['line_id']}."]))


def terminate(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return request(conn, rng, "SELECT * FROM lines WHERE status <> 'terminated'", lambda ln: (
        {"line_id": ln["line_id"]}, [f"Please close line {ln['line_id']} for good.",
                                     f"I want to terminate my line {ln['line_id']}."]))


def add_line(conn: sqlite3.Connection, rng: random.Random) -> Out:
    c = pick(conn, rng, "SELECT c.* FROM customers c WHERE (SELECT COUNT(*) FROM lines l WHERE l.customer_id ="
                        " c.customer_id AND l.status <> 'terminated') < CASE c.segment WHEN 'business' THEN 8"
                        f" ELSE 4 END AND NOT EXISTS (SELECT 1 FROM bills b WHERE b.customer_id = c.customer_id"
                        f" AND b.status = 'open' AND b.due_date < {TODAY})")
    p = pick(conn, rng, "SELECT * FROM plans WHERE status = 'available'")
    if c is None or p is None:
        return None
    return {"customer_id": c["customer_id"], "plan_id": p["plan_id"]}, rng.choice([
        f"Open a new line on {p['plan_id']} for my account {c['customer_id']}.",
        f"I need another phone line on my account {c['customer_id']}, on {p['plan_id']}.",
    ])


def pay(conn: sqlite3.Connection, rng: random.Random) -> Out:
    b = pick(conn, rng, "SELECT b.*, m.method_id FROM bills b JOIN payment_methods m USING (customer_id)"
                        " WHERE b.status = 'open' AND (m.expires IS NULL OR m.expires >= strftime('%Y-%m',"
                        " (SELECT value FROM meta WHERE key = 'now')))")
    if b is None:
        return None
    left = b["amount"] - b["amount_paid"]
    amount = left if rng.random() < 0.7 else max(1, left // 2)
    return {"bill_id": b["bill_id"], "method_id": b["method_id"], "amount": amount}, rng.choice([
        f"Pay {amount} towards {b['bill_id']} with {b['method_id']}.",
        f"Please charge {amount} to {b['method_id']} for {b['bill_id']}.",
    ])


def transfer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    """A billing dispute, which the policy sends to a human agent (R15)."""
    b = pick(conn, rng, "SELECT * FROM bills")
    if b is None:
        return None
    summary = f"Account {b['customer_id']} disputes the amount of the {month_words(b['period'])} bill"
    return {"summary": summary}, rng.choice([
        f'The amount of {b["bill_id"]} is wrong and I dispute it. Please pass this on to a person: "{summary}".',
        f'I want to dispute {b["bill_id"]}; put me through to someone who can. The note is: "{summary}".',
    ])


TEMPLATES: dict[str, Template] = {
    "get_customer_details": customer,
    "find_line_by_number": by_number,
    "get_line_details": line,
    "get_data_usage": usage,
    "list_plans": plans,
    "list_addons": addons,
    "get_bill_details": bill,
    "change_plan": change_plan,
    "add_addon": add_addon,
    "remove_addon": remove_addon,
    "set_roaming": roaming,
    "suspend_line": suspend,
    "resume_line": resume,
    "terminate_line": terminate,
    "add_line": add_line,
    "pay_bill": pay,
    "transfer_to_human_agents": transfer,
}
