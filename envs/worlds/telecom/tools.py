"""Tools of the telecom world. Reads return records; writes change the database and the
schema's triggers enforce the policy (a broken rule raises `<RULE_ID>: message`)."""

from __future__ import annotations

import re
import sqlite3
from typing import Literal

from envs import sql as kit
from envs.stock_tools import transfer_tool
from envs.tools import ToolError, tool

SuspendReason = Literal["lost_or_stolen", "travel"]
MB_PER_GB = 1024


def _line(db: sqlite3.Connection, line_id: str) -> dict:
    return kit.fetch(db, "lines", "line_id", line_id, "line")


def data_allowance_mb(db: sqlite3.Connection, line_id: str, plan_id: str | None = None) -> int:
    """The line's data allowance in MB on `plan_id` (default: its plan) with its data add-ons (R12)."""
    (plan_gb,) = db.execute(
        "SELECT data_gb FROM plans WHERE plan_id = COALESCE(?, (SELECT plan_id FROM lines WHERE line_id = ?))",
        (plan_id, line_id),
    ).fetchone()
    (addon_gb,) = db.execute(
        "SELECT COALESCE(SUM(a.data_gb), 0) FROM line_addons la JOIN addons a USING (addon_id) WHERE la.line_id = ?",
        (line_id,),
    ).fetchone()
    return MB_PER_GB * (plan_gb + addon_gb)


@tool()
def get_customer_details(db: sqlite3.Connection, customer_id: str) -> dict:
    """Get an account: profile, payment methods, lines (id, phone number, plan, status) and
    bills (id, period, amount, amount paid, due date, status).

    Args:
        customer_id: The account id, e.g. "AC100042".
    """
    customer = kit.fetch(db, "customers", "customer_id", customer_id, "customer")
    customer["payment_methods"] = kit.rows(
        db, "SELECT method_id, kind, last4, expires FROM payment_methods WHERE customer_id = ? ORDER BY method_id",
        customer_id,
    )
    customer["lines"] = kit.rows(
        db, "SELECT l.line_id, l.phone_number, l.plan_id, p.name AS plan_name, l.status FROM lines l"
        " JOIN plans p USING (plan_id) WHERE l.customer_id = ? ORDER BY l.line_id", customer_id,
    )
    customer["bills"] = kit.rows(
        db, "SELECT bill_id, period, kind, amount, amount_paid, due_date, status FROM bills"
        " WHERE customer_id = ? ORDER BY due_date, bill_id", customer_id,
    )
    return customer


@tool()
def find_line_by_number(db: sqlite3.Connection, phone_number: str) -> dict:
    """Find a line by its phone number (digits are compared, so "555-010-0042" and
    "5550100042" match the same line). Returns the line id, account id, plan and status.

    Args:
        phone_number: The line's phone number.
    """
    digits = re.sub(r"\D", "", phone_number)
    if not digits:
        raise ToolError("BAD_VALUE", "phone_number must contain digits")
    row = kit.row(
        db, "SELECT line_id, customer_id, phone_number, plan_id, status FROM lines"
        " WHERE REPLACE(REPLACE(REPLACE(phone_number, '-', ''), ' ', ''), '+', '') = ?", digits,
    )
    return kit.need(row, "line with number", phone_number)


@tool()
def get_line_details(db: sqlite3.Connection, line_id: str) -> dict:
    """Get a line: plan, add-ons, roaming, suspension, contract end date, data used this
    billing cycle and data allowance (in MB; the plan's data plus data add-ons).

    Args:
        line_id: The line id, e.g. "ln_000042".
    """
    line = _line(db, line_id)
    line["plan"] = kit.row(db, "SELECT * FROM plans WHERE plan_id = ?", line["plan_id"])
    line["addons"] = kit.rows(
        db, "SELECT a.*, la.added_at FROM line_addons la JOIN addons a USING (addon_id) WHERE la.line_id = ?"
        " ORDER BY a.addon_id", line_id,
    )
    line["data_allowance_mb"] = data_allowance_mb(db, line_id)
    line["under_contract"] = bool(line["contract_end"] and line["contract_end"] > kit.now(db)[:10])
    return line


@tool()
def get_data_usage(db: sqlite3.Connection, line_id: str) -> dict:
    """Get a line's data usage this billing cycle, day by day, with the total and the allowance (MB).

    Args:
        line_id: The line id.
    """
    line = _line(db, line_id)
    days = kit.rows(db, "SELECT day, mb FROM usage_records WHERE line_id = ? ORDER BY day", line_id)
    return {"line_id": line_id, "days": days, "data_used_mb": line["data_used_mb"],
            "data_allowance_mb": data_allowance_mb(db, line_id)}


@tool()
def list_plans(db: sqlite3.Connection, include_retired: bool = False) -> list:
    """List the plans with monthly fee, data (GB), whether roaming is included and contract
    term in months. Only `available` plans can be chosen (R01).

    Args:
        include_retired: Also list retired plans (which nobody can move to).
    """
    sql = "SELECT * FROM plans" + ("" if include_retired else " WHERE status = 'available'")
    return kit.rows(db, sql + " ORDER BY monthly_fee, plan_id")


@tool()
def list_addons(db: sqlite3.Connection) -> list:
    """List the add-ons with kind (data, roaming, calls, insurance), monthly fee and extra data (GB)."""
    return kit.rows(db, "SELECT * FROM addons ORDER BY addon_id")


@tool()
def get_bill_details(db: sqlite3.Connection, bill_id: str) -> dict:
    """Get a bill with what is still owed and its payments.

    Args:
        bill_id: The bill id, e.g. "bill_AC100042_2026-05".
    """
    bill = kit.fetch(db, "bills", "bill_id", bill_id, "bill")
    bill["remaining"] = bill["amount"] - bill["amount_paid"]
    bill["overdue"] = bill["status"] == "open" and bill["due_date"] < kit.now(db)[:10]
    bill["payments"] = kit.rows(db, "SELECT * FROM payments WHERE bill_id = ? ORDER BY payment_id", bill_id)
    return bill


@tool(write=True)
def change_plan(db: sqlite3.Connection, line_id: str, plan_id: str) -> dict:
    """Move a line to another plan. The plan must be available (R01); not on a suspended
    line (R07); no cheaper plan while under contract (R11); the new allowance must cover the
    data already used this cycle (R12); not while a bill is overdue (R03). A plan with a
    contract term starts a contract of that length from today.

    Args:
        line_id: The line to change.
        plan_id: The plan to move to, e.g. "plan_plus_15".
    """
    line = _line(db, line_id)
    kit.fetch(db, "plans", "plan_id", plan_id, "plan")
    kit.set_new(db, "lines", "line_id", line_id, "plan_id", plan_id, line["plan_id"], "the line is already on this plan")
    return get_line_details(db, line_id)


@tool(write=True)
def add_addon(db: sqlite3.Connection, line_id: str, addon_id: str) -> dict:
    """Add an add-on to a line: at most 3 per line (R10), not on a suspended (R07) or
    terminated (R13) line, not while a bill is overdue (R03).

    Args:
        line_id: The line.
        addon_id: The add-on, e.g. "ad_data_5".
    """
    _line(db, line_id)
    kit.fetch(db, "addons", "addon_id", addon_id, "add-on")
    if kit.row(db, "SELECT 1 FROM line_addons WHERE line_id = ? AND addon_id = ?", line_id, addon_id):
        raise ToolError("NO_CHANGE", "the line already has this add-on")
    db.execute("INSERT INTO line_addons (line_id, addon_id, added_at) VALUES (?, ?, ?)", (line_id, addon_id, kit.now(db)))
    return get_line_details(db, line_id)


@tool(write=True)
def remove_addon(db: sqlite3.Connection, line_id: str, addon_id: str) -> dict:
    """Remove an add-on from a line. Removing the last roaming pass switches roaming off
    unless the plan includes roaming.

    Args:
        line_id: The line.
        addon_id: The add-on to remove.
    """
    _line(db, line_id)
    cur = db.execute("DELETE FROM line_addons WHERE line_id = ? AND addon_id = ?", (line_id, addon_id))
    if cur.rowcount == 0:
        raise ToolError("NOT_FOUND", f"the line has no add-on {addon_id!r}")
    return get_line_details(db, line_id)


@tool(write=True)
def set_roaming(db: sqlite3.Connection, line_id: str, enabled: bool) -> dict:
    """Switch roaming on or off. On needs a plan that includes roaming or a roaming pass
    (R09), an active line (R07) and no overdue bill (R03).

    Args:
        line_id: The line.
        enabled: True to switch roaming on, False to switch it off.
    """
    line = _line(db, line_id)
    if bool(line["roaming_enabled"]) == enabled:
        raise ToolError("NO_CHANGE", f"roaming is already {'on' if enabled else 'off'}")
    db.execute("UPDATE lines SET roaming_enabled = ? WHERE line_id = ?", (int(enabled), line_id))
    return get_line_details(db, line_id)


@tool(write=True)
def suspend_line(db: sqlite3.Connection, line_id: str, reason: SuspendReason) -> dict:
    """Suspend an active line at the customer's request: at most twice per calendar year
    (R08); each suspension counts. Not for terminated lines (R13).

    Args:
        line_id: The line to suspend.
        reason: lost_or_stolen or travel.
    """
    line = _line(db, line_id)
    if line["status"] == "suspended":
        raise ToolError("NO_CHANGE", "the line is already suspended")
    db.execute("UPDATE lines SET status = 'suspended', suspend_reason = ? WHERE line_id = ?", (reason, line_id))
    return get_line_details(db, line_id)


@tool(write=True)
def resume_line(db: sqlite3.Connection, line_id: str) -> dict:
    """Resume a suspended line. Not while a bill is overdue (R03); a terminated line cannot
    be reactivated (R13).

    Args:
        line_id: The line to resume.
    """
    line = _line(db, line_id)
    if line["status"] == "active":
        raise ToolError("NO_CHANGE", "the line is already active")
    db.execute("UPDATE lines SET status = 'active', suspend_reason = NULL WHERE line_id = ?", (line_id,))
    return get_line_details(db, line_id)


@tool(write=True)
def terminate_line(db: sqlite3.Connection, line_id: str) -> dict:
    """Terminate a line for good (R13): its add-ons and roaming end; under contract, an early
    termination fee of 20 per remaining month (or part) is billed, due in 14 days.

    Args:
        line_id: The line to terminate.
    """
    _line(db, line_id)
    db.execute(
        "UPDATE lines SET status = 'terminated', suspend_reason = NULL, roaming_enabled = 0 WHERE line_id = ?",
        (line_id,),
    )
    return get_line_details(db, line_id)


@tool(write=True)
def add_line(db: sqlite3.Connection, customer_id: str, plan_id: str) -> dict:
    """Open a new line with a new phone number on an available plan (R01): at most 4 lines
    per consumer account and 8 per business account (R02), not while a bill is overdue (R03).
    A plan with a contract term starts a contract from today.

    Args:
        customer_id: The account to add the line to.
        plan_id: The plan for the new line.
    """
    kit.fetch(db, "customers", "customer_id", customer_id, "customer")
    plan = kit.fetch(db, "plans", "plan_id", plan_id, "plan")
    # Minted from the content (customer and plan), so lines added in any order get the same ids.
    content = {"customer_id": customer_id, "plan_id": plan_id}
    n = kit.count(db, "lines", **content)
    line_id = "ln_" + kit.mint_id("n", content, n, length=8).lower()
    while kit.row(db, "SELECT 1 FROM lines WHERE line_id = ?", line_id):  # a line that changed plan since
        n += 1
        line_id = "ln_" + kit.mint_id("n", content, n, length=8).lower()
    digits = kit.mint_id("", {"line_id": line_id}, digits=True)
    number = f"556-{digits[:3]}-{digits[3:]}"
    while kit.row(db, "SELECT 1 FROM lines WHERE phone_number = ?", number):
        digits = kit.mint_id("", {"after": number}, digits=True)
        number = f"556-{digits[:3]}-{digits[3:]}"
    now = kit.now(db)
    contract_end = None
    if plan["contract_months"]:
        (contract_end,) = db.execute("SELECT date(?, ?)", (now, f"+{plan['contract_months']} months")).fetchone()
    db.execute(
        "INSERT INTO lines (line_id, customer_id, phone_number, plan_id, status, suspend_reason, suspensions_ytd,"
        " roaming_enabled, data_used_mb, contract_end, activated_at) VALUES (?, ?, ?, ?, 'active', NULL, 0, 0, 0, ?, ?)",
        (line_id, customer_id, number, plan_id, contract_end, now),
    )
    return get_line_details(db, line_id)


@tool(write=True)
def pay_bill(db: sqlite3.Connection, bill_id: str, method_id: str, amount: int) -> dict:
    """Pay towards a bill: a positive amount up to what is still owed (R04), with a payment
    method of the same account (R05) that has not expired (R06). Paying every overdue bill
    reconnects lines suspended for non-payment.

    Args:
        bill_id: The bill to pay.
        method_id: The account's payment method, e.g. "pm_000042".
        amount: The amount to pay (whole currency units).
    """
    kit.fetch(db, "bills", "bill_id", bill_id, "bill")
    kit.fetch(db, "payment_methods", "method_id", method_id, "payment method")
    content = {"bill_id": bill_id, "method_id": method_id, "amount": amount}
    payment_id = f"py_{bill_id}_" + kit.mint_id("", content, kit.count(db, "payments", **content)).lower()
    db.execute("INSERT INTO payments (payment_id, bill_id, method_id, amount, paid_at) VALUES (?, ?, ?, ?, ?)",
               (payment_id, bill_id, method_id, amount, kit.now(db)))
    return get_bill_details(db, bill_id)


transfer_to_human_agents = transfer_tool("customer")
