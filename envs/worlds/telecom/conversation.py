"""How conversations go in the telecom world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, id_fact

IDENTITY = Identity(keys=[["user_id"], ["customer_id"]], lookups={"get_customer_details": ["customer_id"]})
USER_FACING_IDS = ["customer_id", "user_id", "bill_id"]  # the account and its bills; lines go by phone number
CLAUSES = DEFAULT_CLAUSES
ASK_IDENTITY = [
    "I can help with that. Could you give me your user id (your account id)?",
    "Happy to help. First, what is your user id?",
    "Sure. May I have your user id so I can open your account?",
]
RULE_TERMS = {
    "R01_PLAN_AVAILABLE": ["currently offered", "status `available`"],
    "R02_LINE_LIMIT": ["at most 4 lines", "8 (business accounts)"],
    "R03_OVERDUE_BALANCE": ["overdue bill"],
    "R04_PAYMENT_AMOUNT": ["does not exceed", "still owed"],
    "R05_METHOD_OWNER": ["payment method of the", "same account"],
    "R06_CARD_EXPIRED": ["expired card is declined", "end of its expiry"],
    "R07_LINE_SUSPENDED": ["while a line is suspended", "resume the line first"],
    "R08_SUSPENSION_LIMIT": ["at most twice per calendar year"],
    "R09_ROAMING_PASS": ["roaming pass"],
    "R10_ADDON_LIMIT": ["at most 3 add-ons"],
    "R11_CONTRACT_DOWNGRADE": ["under contract", "lower monthly fee"],
    "R12_DATA_USAGE": ["already used"],
    "R13_TERMINATED_FINAL": ["terminated line cannot be changed"],
}
ALTERNATIVES = {
    "R03_OVERDUE_BALANCE": "Once the overdue bill is paid, I can set that up.",
    "R07_LINE_SUSPENDED": "I can resume the line first, if you like.",
    "R09_ROAMING_PASS": "I can add a roaming pass to the line first.",
    "R11_CONTRACT_DOWNGRADE": "You can move to a cheaper plan once the contract ends.",
    "R13_TERMINATED_FINAL": "I can open a new line for you instead.",
}


def mentions(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> list[str]:
    if table == "lines":
        return [row["phone_number"], row["phone_number"][-4:]]
    if table == "plans":
        return [row["name"]]
    if table == "addons":
        return [row["name"]]
    if table == "payment_methods":
        return [row["last4"]] if row.get("last4") else [row["kind"].replace("_", " ")]
    if table == "bills":
        return [row["period"], row["bill_id"]]
    return []


def phrase(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
    """How a customer names a record in a request: a line by its phone number, a plan or an
    add-on by its name, a payment method by its kind and last digits."""
    if table == "lines":
        return str(row["phone_number"])
    if table == "plans":
        return f"the {row['name']} plan"
    if table == "addons":
        return f"the {row['name']} add-on"
    if table == "payment_methods":
        return f"my {row['kind'].replace('_', ' ')} ending in {row['last4']}"
    return None


def _line(conn: sqlite3.Connection, line_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT l.*, p.name AS plan_name FROM lines l JOIN plans p USING (plan_id) WHERE line_id = ?",
                   line_id)


def _plan(conn: sqlite3.Connection, plan_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT * FROM plans WHERE plan_id = ?", plan_id)


def _addon(conn: sqlite3.Connection, addon_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT * FROM addons WHERE addon_id = ?", addon_id)


def _method(conn: sqlite3.Connection, method_id: str) -> str:
    m = kit.one(conn, "SELECT * FROM payment_methods WHERE method_id = ?", method_id)
    return f"the {m['kind'].replace('_', ' ')} ending in {m['last4']}" if m["last4"] else f"the {m['kind']}"


def action(conn: sqlite3.Connection, call: ToolCall) -> list[str]:
    a = call.arguments
    if call.name == "add_line":
        p = _plan(conn, a["plan_id"])
        return [f"open a new line on the {p['name']} plan ({p['monthly_fee']} a month)",
                f"add a new line to your account on {p['name']}, at {p['monthly_fee']} a month"]
    if call.name == "pay_bill":
        b = kit.one(conn, "SELECT * FROM bills WHERE bill_id = ?", a["bill_id"])
        return [f"pay {a['amount']} towards your {b['period']} bill with {_method(conn, a['method_id'])}",
                f"charge {a['amount']} to {_method(conn, a['method_id'])} for the {b['period']} bill"]
    line = _line(conn, a["line_id"])
    phone = line["phone_number"]
    if call.name == "change_plan":
        p = _plan(conn, a["plan_id"])
        return [f"move the line {phone} from {line['plan_name']} to the {p['name']} plan ({p['monthly_fee']} a month)",
                f"switch {phone} to {p['name']}, which costs {p['monthly_fee']} a month"]
    if call.name in ("add_addon", "remove_addon"):
        ad = _addon(conn, a["addon_id"])
        verb = "add" if call.name == "add_addon" else "remove"
        return [f"{verb} the {ad['name']} add-on ({ad['monthly_fee']} a month) {'to' if verb == 'add' else 'from'} "
                f"the line {phone}"]
    if call.name == "set_roaming":
        return [f"switch roaming {'on' if a['enabled'] else 'off'} for the line {phone}"]
    if call.name == "suspend_line":
        return [f"suspend the line {phone} ({str(a['reason']).replace('_', ' ')})"]
    if call.name == "resume_line":
        return [f"resume the line {phone}"]
    if call.name == "terminate_line":
        return [f"terminate the line {phone} for good"]
    return [call.name.replace("_", " ")]


def facts(before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall, result: Any) -> list[Fact]:
    a = call.arguments
    if call.name == "add_line":
        return [id_fact("new phone number", result["phone_number"])]
    if call.name == "pay_bill":
        return [amount_fact("amount paid", a["amount"])]
    if call.name == "change_plan":
        return [id_fact("new plan", result["plan"]["name"]), amount_fact("monthly fee", result["plan"]["monthly_fee"])]
    if call.name == "add_addon":
        added = next(x for x in result["addons"] if x["addon_id"] == a["addon_id"])
        return [id_fact("add-on", added["name"]), amount_fact("monthly fee", added["monthly_fee"])]
    if call.name == "remove_addon":
        ad = kit.one(before, "SELECT name FROM addons WHERE addon_id = ?", a["addon_id"])
        return [id_fact("add-on removed", ad["name"])]
    if call.name in ("suspend_line", "resume_line"):
        return [Fact(label="line status", any_of=[result["status"]], kind="text")]
    if call.name == "set_roaming":
        return [Fact(label="roaming", any_of=["on" if result["roaming_enabled"] else "off"], kind="text")]
    if call.name == "terminate_line":
        sql = "SELECT bill_id, amount FROM bills WHERE kind = 'early_termination' ORDER BY bill_id"
        new = [b for b in kit.rows(after, sql) if b["bill_id"] not in {x["bill_id"] for x in kit.rows(before, sql)}]
        return [amount_fact("early termination fee", new[0]["amount"])] if new else []
    return []


def report(conn: sqlite3.Connection, call: ToolCall, result: Any, facts: list[Fact]) -> list[str]:
    a = call.arguments
    if call.name == "add_line":
        return [f"Your new line {result['phone_number']} is active on {result['plan']['name']}."]
    if call.name == "pay_bill":
        return [f"The payment of {a['amount']} went through; {result.get('amount_owed', 0)} is left on that bill."
                if "amount_owed" in result else f"The payment of {a['amount']} went through."]
    if call.name == "change_plan":
        return [f"The line {result['phone_number']} is now on {result['plan']['name']}, at "
                f"{result['plan']['monthly_fee']} a month."]
    if call.name == "add_addon":
        ad = next(x for x in result["addons"] if x["addon_id"] == a["addon_id"])
        return [f"{ad['name']} is now on the line {result['phone_number']}, at {ad['monthly_fee']} a month."]
    if call.name == "remove_addon":
        return [f"The add-on {facts[0].any_of[0]} is removed from the line {result['phone_number']}."] if facts else []
    if call.name in ("suspend_line", "resume_line"):
        return [f"The line {result['phone_number']} is now {result['status']}."]
    if call.name == "set_roaming":
        return [f"Roaming is now {'on' if result['roaming_enabled'] else 'off'} for {result['phone_number']}."]
    if call.name == "terminate_line":
        fee = f" An early termination fee of {facts[0].any_of[0]} is billed." if facts else ""
        return [f"The line {result['phone_number']} is terminated.{fee}"]
    return []


def grounding(conn: sqlite3.Connection, call: ToolCall, known: dict[str, str]) -> list[ToolCall]:
    a = call.arguments
    out: list[ToolCall] = []
    if "line_id" in a:
        out.append(ToolCall(name="get_line_details", arguments={"line_id": a["line_id"]}))
    if "plan_id" in a:
        out.append(ToolCall(name="list_plans", arguments={}))
    if "addon_id" in a and call.name == "add_addon":
        out.append(ToolCall(name="list_addons", arguments={}))
    if "bill_id" in a:
        out.append(ToolCall(name="get_bill_details", arguments={"bill_id": a["bill_id"]}))
    return out
