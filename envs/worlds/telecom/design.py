"""Synthesis hooks of the telecom world (see `envs/design.py` for the contract).

Each boundary kind puts one record one step from a compiled rule's limit, on the allowed
side (at the limit) or on the rejected side (one past it): a line count of limit-1 or limit,
a payment of exactly the amount owed or one more, a card expiring this month or last month,
a bill due today or yesterday, 2 or 3 add-ons, 1 or 2 suspensions this year, a contract
ending today or tomorrow, data used equal to a plan's allowance or 1 MB over it. Where the
rejected side leaves nothing the user asked for, `allow_no_change` makes refusing right.
Instructions name what a customer knows (phone numbers, plan and add-on names, bill months,
the last digits of a card), never line, plan, add-on, bill or payment-method ids.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import date, timedelta
from typing import Any

from envs import sql as kit
from envs.design import Variant
from envs.worlds.telecom.outcomes import (  # noqa: F401  (the explorer and projection hooks)
    ROAMING_PASSES,
    Want,
    actions_of,
    addon_name,
    candidate_calls,
    describe,
    goal_score,
    lookup_calls,
    plan_name,
)

KINDS = [
    "line_limit_room", "line_limit_full", "pay_exact", "pay_over", "card_valid", "card_expired",
    "bill_due_today", "bill_overdue", "addons_room", "addons_full", "suspend_one_used", "suspend_two_used",
    "contract_ends_today", "contract_ends_tomorrow", "usage_at_allowance", "usage_over_allowance",
    "roaming_with_pass", "roaming_no_pass", "suspended_line_addon", "retired_plan", "terminated_line",
    "swap_addon", "close_line",
]
# The write tools each kind's goal calls (none: the right outcome is a refusal); logic-
# driven synthesis schedules kinds by it so every write tool is some task's target.
KIND_WRITES: dict[str, list[str]] = {
    "line_limit_room": ["add_line"], "line_limit_full": [], "pay_exact": ["pay_bill"], "pay_over": ["pay_bill"],
    "card_valid": ["pay_bill"], "card_expired": ["pay_bill"], "bill_due_today": ["add_addon"],
    "bill_overdue": ["pay_bill", "add_addon"], "addons_room": ["add_addon"], "addons_full": [],
    "suspend_one_used": ["suspend_line"], "suspend_two_used": [], "contract_ends_today": ["change_plan"],
    "contract_ends_tomorrow": [], "usage_at_allowance": ["change_plan"], "usage_over_allowance": [],
    "roaming_with_pass": ["set_roaming"], "roaming_no_pass": ["set_roaming", "add_addon"],
    "suspended_line_addon": ["resume_line", "add_addon"], "retired_plan": ["change_plan"],
    "terminated_line": ["add_line"], "swap_addon": ["remove_addon", "add_addon"], "close_line": ["terminate_line"],
}
PERSONAS = {
    "line_limit_room": "boundary", "line_limit_full": "boundary", "pay_exact": "novice", "pay_over": "mismatch",
    "card_valid": "boundary", "card_expired": "mismatch", "bill_due_today": "boundary", "bill_overdue": "entangled",
    "addons_room": "boundary", "addons_full": "boundary", "suspend_one_used": "novice",
    "suspend_two_used": "boundary", "contract_ends_today": "boundary", "contract_ends_tomorrow": "boundary",
    "usage_at_allowance": "boundary", "usage_over_allowance": "boundary", "roaming_with_pass": "novice",
    "roaming_no_pass": "entangled", "suspended_line_addon": "entangled", "retired_plan": "mismatch",
    "terminated_line": "mismatch", "swap_addon": "entangled", "close_line": "novice",
}
RULES = {
    "line_limit": "R02_LINE_LIMIT", "pay": "R04_PAYMENT_AMOUNT", "card": "R06_CARD_EXPIRED",
    "bill": "R03_OVERDUE_BALANCE", "addons": "R10_ADDON_LIMIT", "suspend": "R08_SUSPENSION_LIMIT",
    "contract": "R11_CONTRACT_DOWNGRADE", "usage": "R12_DATA_USAGE", "roaming": "R09_ROAMING_PASS",
    "suspended": "R07_LINE_SUSPENDED", "retired": "R01_PLAN_AVAILABLE", "terminated": "R13_TERMINATED_FINAL",
}


OVERDUE_SQL = ("EXISTS (SELECT 1 FROM bills ob WHERE ob.customer_id = {c} AND ob.status = 'open'"
               " AND ob.due_date < date((SELECT value FROM meta WHERE key = 'now')))")


def _clean_lines(conn: sqlite3.Connection, where: str = "1") -> list[dict[str, Any]]:
    """Active lines of accounts with nothing overdue, with their plan and add-on count."""
    return kit.rows(
        conn,
        "SELECT l.*, p.name AS plan_name, p.monthly_fee, p.data_gb, p.roaming_included,"
        " (SELECT COUNT(*) FROM line_addons la WHERE la.line_id = l.line_id) AS n_addons,"
        " (SELECT COALESCE(SUM(a.data_gb), 0) FROM line_addons la JOIN addons a USING (addon_id)"
        "  WHERE la.line_id = l.line_id) AS addon_gb"
        " FROM lines l JOIN plans p USING (plan_id)"
        f" WHERE l.status = 'active' AND NOT {OVERDUE_SQL.format(c='l.customer_id')} AND ({where})"
        " ORDER BY l.line_id",
    )


def _valid_method(conn: sqlite3.Connection, cid: str, month: str) -> dict[str, Any] | None:
    rows = kit.rows(conn, "SELECT * FROM payment_methods WHERE customer_id = ? AND (expires IS NULL OR expires >= ?)"
                       " ORDER BY kind DESC, method_id", cid, month)
    return rows[0] if rows else None


def _open_bills(conn: sqlite3.Connection, today: str) -> list[dict[str, Any]]:
    """Open monthly bills, not overdue, of accounts with nothing overdue."""
    return kit.rows(
        conn,
        "SELECT b.* FROM bills b WHERE b.status = 'open' AND b.kind = 'monthly' AND b.due_date >= ?"
        f" AND b.amount - b.amount_paid >= 2 AND NOT {OVERDUE_SQL.format(c='b.customer_id')} ORDER BY b.bill_id",
        today,
    )


def variants(conn: sqlite3.Connection, rng: random.Random, n: int, kinds: list[str] | None = None) -> list[Variant]:
    """`n` boundary-adjacent variants, cycling through the kinds from a seeded start (pairs
    of allowed/rejected sides stay together), or through `kinds` in that order when given."""
    start = 2 * rng.randrange(len(KINDS) // 2)
    cycle = KINDS
    if kinds is not None:
        if set(kinds) - set(KINDS) or not kinds:
            raise ValueError(f"unknown kind(s) {sorted(set(kinds) - set(KINDS))}; kinds are {KINDS}")
        cycle, start = kinds, 0
    out: list[Variant] = []
    attempts = 0
    while len(out) < n and attempts < 20 * max(n, 1):
        kind = cycle[(start + attempts) % len(cycle)]
        attempts += 1
        v = _make(kind, conn, rng)
        if v is not None:
            out.append(v)
    return out


def _variant(kind: str, rule: str, patches: list[str], focus: dict[str, Any], wants: list[Want], note: str,
             preference: dict[str, Any] | None = None, allow_no_change: bool = False) -> Variant:
    focus = {**focus, "wants": [list(w) for w in wants]}
    return Variant(kind, patches, focus, [RULES[rule]], PERSONAS[kind], note, preference or {},
                   allow_no_change=allow_no_change)


def _make(kind: str, conn: sqlite3.Connection, rng: random.Random) -> Variant | None:
    today = kit.today(conn)
    t = today.isoformat()
    month = t[:7]
    if kind.startswith("line_limit"):
        return _line_limit(kind, conn, rng)
    if kind in ("pay_exact", "pay_over", "card_valid", "card_expired"):
        return _payment(kind, conn, rng, t, month)
    if kind.startswith("bill_"):
        return _bill_due(kind, conn, rng, today, month)
    if kind == "terminated_line":
        return _terminated(conn, rng)
    lines = _clean_lines(conn)
    if not lines:
        return None
    line = rng.choice(lines)
    lid, cid = line["line_id"], line["customer_id"]
    base = {"user_id": cid, "phone": line["phone_number"], "line_ids": [lid]}
    present = [r["addon_id"] for r in kit.rows(conn, "SELECT addon_id FROM line_addons WHERE line_id = ?", lid)]
    addons = [r["addon_id"] for r in kit.rows(conn, "SELECT addon_id FROM addons ORDER BY addon_id")]
    if kind.startswith("addons_"):
        k = 2 if kind == "addons_room" else 3
        wish, other, *rest = rng.sample(addons, len(addons))
        keep = rest[:k]
        patches = [f"DELETE FROM line_addons WHERE line_id = {kit.q(lid)}"] + [
            f"INSERT INTO line_addons VALUES ({kit.q(lid)}, {kit.q(a)}, '2026-04-01 09:00:00')" for a in keep]
        full = kind == "addons_full"
        return _variant(kind, "addons", patches, {**base, "actions": ["add_addon"], "addon_ids": [wish, other]},
                        [("add_addon", {"line_id": lid, "addon_id": wish}, 2)], f"{lid} carries {k} add-ons",
                        {"wish": f"add the {addon_name(conn, wish)} add-on to your line {line['phone_number']}"},
                        allow_no_change=full)
    if kind.startswith("suspend_"):
        used = 1 if kind == "suspend_one_used" else 2
        patches = [f"UPDATE lines SET suspensions_ytd = {used} WHERE line_id = {kit.q(lid)}"]
        return _variant(kind, "suspend", patches,
                        {**base, "actions": ["suspend_line"], "reasons": ["travel", "lost_or_stolen"]},
                        [("suspend", {"line_id": lid, "reason": "travel"}, 2)],
                        f"{lid} was suspended {used} time(s) this year",
                        {"wish": f"suspend your line {line['phone_number']} while you are travelling"},
                        allow_no_change=used == 2)
    if kind.startswith("contract_") or kind.startswith("usage_"):
        return _downgrade(kind, conn, rng, line, base, today)
    if kind.startswith("roaming_"):
        if line["roaming_included"]:
            return None
        patches = [f"UPDATE lines SET roaming_enabled = 0 WHERE line_id = {kit.q(lid)}",
                   f"DELETE FROM line_addons WHERE line_id = {kit.q(lid)}"]
        wanted = rng.choice(ROAMING_PASSES)
        if kind == "roaming_with_pass":
            patches.append(f"INSERT INTO line_addons VALUES ({kit.q(lid)}, {kit.q(wanted)}, '2026-05-02 08:00:00')")
            return _variant(kind, "roaming", patches, {**base, "actions": ["set_roaming"]},
                            [("roaming_on", {"line_id": lid}, 2)], f"{lid} has a roaming pass, roaming off")
        return _variant(kind, "roaming", patches,
                        {**base, "actions": ["set_roaming", "add_addon"], "addon_ids": [*ROAMING_PASSES, "ad_data_5"]},
                        [("roaming_on", {"line_id": lid}, 2), ("add_addon", {"line_id": lid, "addon_id": wanted}, 1)],
                        f"{lid} has no roaming pass and its plan has no roaming", {"conditional_addon": wanted})
    if kind == "suspended_line_addon":
        if line["n_addons"] > 2:
            return None
        wish, other = rng.sample([a for a in addons if a not in present], 2)
        patches = [f"UPDATE lines SET suspensions_ytd = 0 WHERE line_id = {kit.q(lid)}",
                   f"UPDATE lines SET status = 'suspended', suspend_reason = 'travel' WHERE line_id = {kit.q(lid)}"]
        return _variant(kind, "suspended", patches,
                        {**base, "actions": ["resume_line", "add_addon"], "addon_ids": [wish, other]},
                        [("add_addon", {"line_id": lid, "addon_id": wish}, 2), ("resume", {"line_id": lid}, 1)],
                        f"{lid} is suspended for travel")
    if kind == "retired_plan":
        return _retired(conn, rng, line, base)
    if kind == "swap_addon":  # at the add-on limit: the wanted add-on fits once the customer drops one
        if not present:
            return None
        drop = rng.choice(present)
        wish, other = rng.sample([a for a in addons if a not in present], 2)
        keep = [drop, *rng.sample([a for a in addons if a not in (drop, wish, other)], 2)]
        patches = [f"DELETE FROM line_addons WHERE line_id = {kit.q(lid)}"] + [
            f"INSERT INTO line_addons VALUES ({kit.q(lid)}, {kit.q(a)}, '2026-04-01 09:00:00')" for a in keep]
        return _variant(kind, "addons", patches,
                        {**base, "actions": ["remove_addon", "add_addon"], "addon_ids": [wish, other]},
                        [("add_addon", {"line_id": lid, "addon_id": wish}, 2),
                         ("remove_addon", {"line_id": lid, "addon_id": drop}, 1)],
                        f"{lid} carries 3 add-ons; {drop} may go for {wish}",
                        {"wish": f"add the {addon_name(conn, wish)} add-on to your line {line['phone_number']}"})
    if kind == "close_line":  # a line out of contract (no early termination fee) closed for good
        patches = [f"UPDATE lines SET contract_end = NULL WHERE line_id = {kit.q(lid)}"]
        return _variant(kind, "terminated", patches, {**base, "actions": ["terminate_line", "suspend_line"],
                                                      "reasons": ["travel"]},
                        [("terminate", {"line_id": lid}, 2)], f"{lid} is out of contract",
                        {"wish": f"close your line {line['phone_number']} for good"})
    raise ValueError(f"unknown boundary kind {kind!r}")


def _line_limit(kind: str, conn: sqlite3.Connection, rng: random.Random) -> Variant | None:
    customers = kit.rows(conn, "SELECT c.*, (SELECT COUNT(*) FROM lines l WHERE l.customer_id = c.customer_id"
                            " AND l.status <> 'terminated') AS n_lines FROM customers c"
                            f" WHERE NOT {OVERDUE_SQL.format(c='c.customer_id')} ORDER BY customer_id")
    if not customers:
        return None
    c = rng.choice(customers)
    limit = 8 if c["segment"] == "business" else 4
    target = limit - 1 if kind == "line_limit_room" else limit
    if c["n_lines"] > target:
        return None
    cid = c["customer_id"]
    patches = [
        f"INSERT INTO lines VALUES ({kit.q(f'lx_{cid}_{i}')}, {kit.q(cid)}, '557-{int(cid[2:]) % 1000:03d}-{i:04d}',"
        " 'plan_basic_5', 'active', NULL, 0, 0, 0, NULL, '2026-02-01 10:00:00')"
        for i in range(target - c["n_lines"])
    ]
    wish, other = rng.sample(["plan_lite_2", "plan_basic_5", "plan_plus_15"], 2)
    full = kind == "line_limit_full"
    return _variant(kind, "line_limit", patches, {"user_id": cid, "actions": ["add_line"], "plan_ids": [wish, other]},
                    [("add_line", {"plan_id": wish}, 2)], f"{cid} ({c['segment']}) holds {target} of {limit} lines",
                    {"wish": f"open a new line on the {plan_name(conn, wish)} plan"}, allow_no_change=full)


def _payment(kind: str, conn: sqlite3.Connection, rng: random.Random, today: str, month: str) -> Variant | None:
    bills = _open_bills(conn, today)
    if not bills:
        return None
    bill = rng.choice(bills)
    cid, bid = bill["customer_id"], bill["bill_id"]
    remaining = bill["amount"] - bill["amount_paid"]
    focus: dict[str, Any] = {"user_id": cid, "actions": ["pay_bill"], "bill_ids": [bid]}
    if kind in ("pay_exact", "pay_over"):
        method = _valid_method(conn, cid, month)
        if method is None:
            return None
        focus["method_ids"] = [method["method_id"]]
        pref = {"believed_amount": remaining + 1} if kind == "pay_over" else {}
        return _variant(kind, "pay", [], focus, [("pay", {"bill_id": bid, "amount": remaining}, 2)],
                        f"{bid} has {remaining} left to pay", pref)
    card = kit.one(conn, "SELECT * FROM payment_methods WHERE customer_id = ? AND kind = 'card'", cid)
    first = date.fromisoformat(month + "-01")
    expires = month if kind == "card_valid" else (first - timedelta(days=1)).isoformat()[:7]
    patches = [f"UPDATE payment_methods SET expires = {kit.q(expires)} WHERE method_id = {kit.q(card['method_id'])}"]
    banks = kit.rows(conn, "SELECT * FROM payment_methods WHERE customer_id = ? AND kind = 'bank_account'", cid)
    if banks:
        bank_id = banks[0]["method_id"]
    else:
        bank_id = f"pm_x_{cid}"
        patches.append(f"INSERT INTO payment_methods VALUES ({kit.q(bank_id)}, {kit.q(cid)}, 'bank_account',"
                       f" '{rng.randrange(10000):04d}', NULL)")
    focus["method_ids"] = [card["method_id"], bank_id]
    use = card["method_id"] if kind == "card_valid" else bank_id
    pref = {"preferred_method": card["method_id"]} if kind == "card_expired" else {}
    return _variant(kind, "card", patches, focus, [("pay", {"bill_id": bid, "method_id": use, "amount": remaining}, 2)],
                    f"card {card['method_id']} expires {expires}", pref)


def _bill_due(kind: str, conn: sqlite3.Connection, rng: random.Random, today: date, month: str) -> Variant | None:
    bills = {b["customer_id"]: b for b in _open_bills(conn, today.isoformat())}
    lines = [ln for ln in _clean_lines(conn, "n_addons <= 2") if ln["customer_id"] in bills]
    if not lines:
        return None
    line = rng.choice(lines)
    lid, cid = line["line_id"], line["customer_id"]
    bill = bills[cid]
    method = _valid_method(conn, cid, month)
    if method is None:
        return None
    present = {r["addon_id"] for r in kit.rows(conn, "SELECT addon_id FROM line_addons WHERE line_id = ?", lid)}
    free = [r["addon_id"] for r in kit.rows(conn, "SELECT addon_id FROM addons ORDER BY addon_id")
            if r["addon_id"] not in present]
    wish, other = rng.sample(free, 2)
    due = today if kind == "bill_due_today" else today - timedelta(days=1)
    patches = [f"UPDATE bills SET due_date = {kit.q(due.isoformat())} WHERE bill_id = {kit.q(bill['bill_id'])}"]
    wants: list[Want] = [("add_addon", {"line_id": lid, "addon_id": wish}, 2)]
    overdue = kind == "bill_overdue"
    if overdue:
        wants.append(("pay", {"bill_id": bill["bill_id"], "amount": bill["amount"] - bill["amount_paid"]}, 0.5))
    focus = {"user_id": cid, "phone": line["phone_number"], "line_ids": [lid], "actions": ["add_addon", "pay_bill"],
             "addon_ids": [wish, other], "bill_ids": [bill["bill_id"]], "method_ids": [method["method_id"]]}
    return _variant(kind, "bill", patches, focus, wants, f"{bill['bill_id']} due {due.isoformat()}",
                    {"conditional_payment": True} if overdue else {})


def _terminated(conn: sqlite3.Connection, rng: random.Random) -> Variant | None:
    """A customer asks to reactivate a line they closed long ago (R13); a new line is the way."""
    customers = kit.rows(conn, "SELECT c.*, (SELECT COUNT(*) FROM lines l WHERE l.customer_id = c.customer_id"
                            " AND l.status <> 'terminated') AS n_lines FROM customers c"
                            f" WHERE NOT {OVERDUE_SQL.format(c='c.customer_id')} ORDER BY customer_id")
    customers = [c for c in customers if c["n_lines"] < (8 if c["segment"] == "business" else 4)]
    if not customers:
        return None
    c = rng.choice(customers)
    cid = c["customer_id"]
    old = kit.rows(conn, "SELECT * FROM lines WHERE customer_id = ? AND status = 'terminated' ORDER BY line_id", cid)
    patches: list[str] = []
    if old:
        lid, number = old[0]["line_id"], old[0]["phone_number"]
    else:
        lid, number = f"lx_old_{cid}", f"557-{int(cid[2:]) % 1000:03d}-9999"
        patches.append(f"INSERT INTO lines VALUES ({kit.q(lid)}, {kit.q(cid)}, {kit.q(number)}, 'plan_basic_5', 'terminated',"
                       " NULL, 0, 0, 0, NULL, '2025-06-01 10:00:00')")
    wish = rng.choice(["plan_lite_2", "plan_basic_5"])
    focus = {"user_id": cid, "phone": number, "line_ids": [lid], "actions": ["resume_line", "add_line"],
             "plan_ids": [wish]}
    return _variant("terminated_line", "terminated", patches, focus, [("add_line", {"plan_id": wish}, 2)],
                    f"{lid} was terminated", {"old_number": number})


def _allowance_mb(line: dict[str, Any], plan: dict[str, Any]) -> int:
    return 1024 * (int(plan["data_gb"]) + int(line["addon_gb"]))


def _downgrade(kind: str, conn: sqlite3.Connection, rng: random.Random, line: dict[str, Any], base: dict[str, Any],
               today: date) -> Variant | None:
    lid = line["line_id"]
    plans = kit.rows(conn, "SELECT * FROM plans WHERE status = 'available' ORDER BY plan_id")
    cheaper = [p for p in plans if p["monthly_fee"] < line["monthly_fee"]
               and _allowance_mb(line, p) >= line["data_used_mb"]]
    others = [p for p in plans if p["monthly_fee"] > line["monthly_fee"]]
    if not cheaper or not others:
        return None
    target, other = rng.choice(cheaper), rng.choice(others)
    focus = {**base, "actions": ["change_plan"], "plan_ids": [target["plan_id"], other["plan_id"]]}
    wants: list[Want] = [("change_plan", {"line_id": lid, "plan_id": target["plan_id"]}, 2)]
    wish = {"wish": f"switch your line {line['phone_number']} to the {target['name']} plan"}
    if kind.startswith("contract_"):
        end = today if kind == "contract_ends_today" else today + timedelta(days=1)
        patches = [f"UPDATE lines SET contract_end = {kit.q(end.isoformat())} WHERE line_id = {kit.q(lid)}"]
        return _variant(kind, "contract", patches, focus, wants, f"{lid} contract ends {end.isoformat()}", wish,
                        allow_no_change=kind == "contract_ends_tomorrow")
    used = _allowance_mb(line, target) + (1 if kind == "usage_over_allowance" else 0)
    patches = [f"UPDATE lines SET contract_end = NULL WHERE line_id = {kit.q(lid)}"]
    if used > line["data_used_mb"]:
        patches.append(f"INSERT INTO usage_records VALUES ({kit.q(lid)}, {kit.q(today.isoformat())},"
                       f" {used - line['data_used_mb']})")
    return _variant(kind, "usage", patches, focus, wants,
                    f"{lid} used {used} MB, {target['name']} allows {_allowance_mb(line, target)} MB", wish,
                    allow_no_change=kind == "usage_over_allowance")


def _retired(conn: sqlite3.Connection, rng: random.Random, line: dict[str, Any], base: dict[str, Any]) -> Variant | None:
    lid = line["line_id"]
    retired = [p for p in kit.rows(conn, "SELECT * FROM plans WHERE status = 'retired' ORDER BY plan_id")
               if p["plan_id"] != line["plan_id"]]
    if not retired:
        return None
    preferred = rng.choice(retired)
    options = [p for p in kit.rows(conn, "SELECT * FROM plans WHERE status = 'available' ORDER BY plan_id")
               if p["plan_id"] != line["plan_id"] and _allowance_mb(line, p) >= line["data_used_mb"]]
    if len(options) < 2:
        return None
    options.sort(key=lambda p: (abs(p["monthly_fee"] - preferred["monthly_fee"]), p["plan_id"]))
    fallback, other = options[0], options[1]
    patches = [f"UPDATE lines SET contract_end = NULL WHERE line_id = {kit.q(lid)}"]
    focus = {**base, "actions": ["change_plan"],
             "plan_ids": [preferred["plan_id"], fallback["plan_id"], other["plan_id"]]}
    return _variant("retired_plan", "retired", patches, focus,
                    [("change_plan", {"line_id": lid, "plan_id": fallback["plan_id"]}, 2)],
                    f"{preferred['plan_id']} is retired", {"preferred_plan": preferred["plan_id"]})


def self_play_templates() -> dict[str, Any]:
    """Self-play (Tool-R0) question templates per tool (see `envs/templating.py`); they
    live in `templates.py` beside this file."""
    from envs.worlds.telecom.templates import TEMPLATES

    return dict(TEMPLATES)
