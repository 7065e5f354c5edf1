"""Seeded data generator for the telecom world. `scale` is the number of customer accounts;
lines, add-ons, usage records, bills and payments grow with it (about 330 rows at the
default scale of 20, 10^5+ rows at scale 7000). Rows are written with `executemany`, and
through the schema's triggers where they have side effects (payments settle bills, usage
adds up on the line, suspensions count), so the generated state obeys the compiled rules."""

from __future__ import annotations

import random
import sqlite3
from datetime import date, datetime, timedelta

from envs import sql as kit

NOW = datetime(2026, 5, 10, 12, 0, 0)
# plan_id, name, monthly fee, data GB, roaming included, contract months, retired
PLANS = [
    ("plan_lite_2", "Lite 2", 12, 2, 0, 0, False),
    ("plan_basic_5", "Basic 5", 20, 5, 0, 0, False),
    ("plan_classic_10", "Classic 10", 28, 10, 0, 12, True),
    ("plan_plus_15", "Plus 15", 35, 15, 0, 12, False),
    ("plan_business_25", "Business 25", 45, 25, 0, 12, False),
    ("plan_world_30", "World 30", 60, 30, 1, 12, False),
    ("plan_max_50", "Max 50", 70, 50, 1, 24, False),
    ("plan_legacy_unlimited", "Legacy Unlimited", 80, 100, 1, 24, True),
]
ADDONS = [
    ("ad_data_5", "Data Boost 5 GB", "data", 10, 5),
    ("ad_data_10", "Data Boost 10 GB", "data", 15, 10),
    ("ad_roam_eu", "Roam Europe Pass", "roaming", 12, 0),
    ("ad_roam_world", "Roam World Pass", "roaming", 25, 0),
    ("ad_intl_calls", "International Calling", "calls", 8, 0),
    ("ad_protect", "Device Protection", "insurance", 9, 0),
]
PLAN_FEE = {p[0]: p[2] for p in PLANS}
ROAMING_PLANS = {p[0] for p in PLANS if p[4]}
CONTRACT = {p[0]: p[5] for p in PLANS}
ADDON_FEE = {a[0]: a[3] for a in ADDONS}
FIRST = ["mia", "noah", "ava", "liam", "emma", "omar", "yara", "ivan", "sofia", "lucas", "aisha", "chen",
         "raj", "ana", "ethan", "zoe", "kofi", "lena", "mateo", "nina"]
LAST = ["li", "garcia", "smith", "khan", "muller", "silva", "kim", "nguyen", "rossi", "ito", "ahmed", "lopez"]
EXPIRIES = ["2026-03", "2026-04", "2026-05", "2026-09", "2027-02", "2027-10", "2028-06", "2029-01"]
# period, due date: March and April are past cycles, May is the current one
PERIODS = [("2026-03", "2026-04-05"), ("2026-04", "2026-05-05"), ("2026-05", "2026-05-25")]


def phone_number(index: int, prefix: str = "555") -> str:
    return f"{prefix}-{index // 10000:03d}-{index % 10000:04d}"


def generate(conn: sqlite3.Connection, seed: int, scale: int = 20) -> None:
    """Fill an empty telecom database deterministically from `seed`."""
    if scale < 1:
        raise ValueError(f"scale must be at least 1, got {scale}")
    rng = random.Random(seed)
    now_s = kit.ts(NOW)
    today = NOW.date()
    month = NOW.strftime("%Y-%m")
    conn.execute("INSERT INTO meta VALUES ('now', ?)", (now_s,))
    conn.executemany("INSERT INTO plans VALUES (?, ?, ?, ?, ?, ?, 'available')", [p[:6] for p in PLANS])
    conn.executemany("INSERT INTO addons VALUES (?, ?, ?, ?, ?)", ADDONS)
    available = [p[0] for p in PLANS if not p[6]]
    plan_weights = [4 if p in ("plan_basic_5", "plan_plus_15") else 2 for p in available]

    customers, methods, lines, terminated, line_addons, usage = [], [], [], [], [], []
    suspend: list[tuple[str, str]] = []
    valid_method: dict[str, str] = {}
    line_fees: dict[str, int] = {}
    n_line = 0
    for u in range(scale):
        cid = f"AC{100000 + u}"
        first, last = rng.choice(FIRST), rng.choice(LAST)
        segment = "business" if rng.random() < 0.15 else "consumer"
        since = today - timedelta(days=rng.randrange(30, 2500))
        customers.append((cid, f"{first.title()} {last.title()}", f"{first}.{last}{u}@example.com", segment,
                          since.isoformat()))
        expires = rng.choice(EXPIRIES)
        card = f"pm_{3 * u + 1:06d}"
        methods.append((card, cid, "card", f"{rng.randrange(10000):04d}", expires))
        valid_method[cid] = card
        if expires < month or rng.random() < 0.4:  # an expired card always comes with a bank account
            bank = f"pm_{3 * u + 2:06d}"
            methods.append((bank, cid, "bank_account", f"{rng.randrange(10000):04d}", None))
            if expires < month:
                valid_method[cid] = bank
        k = rng.choice([2, 3, 4, 6] if segment == "business" else [1, 1, 2, 2, 3, 4])
        fees = 0
        for _ in range(k):
            n_line += 1
            lid = f"ln_{n_line:06d}"
            plan = rng.choices(available, plan_weights)[0]
            contract_end = None
            if CONTRACT[plan]:
                contract_end = (today + timedelta(days=rng.randrange(-90, 400))).isoformat()
            picks = rng.sample(ADDONS, k=rng.choice([0, 0, 1, 1, 2]))
            has_pass = any(a[2] == "roaming" for a in picks) or plan in ROAMING_PLANS
            roaming = int(has_pass and rng.random() < 0.5)
            activated = NOW - timedelta(days=rng.randrange(20, 1500))
            lines.append((lid, cid, phone_number(n_line), plan, "active", None, 0, roaming, 0, contract_end,
                          kit.ts(activated)))
            line_addons.extend((lid, a[0], kit.ts(activated + timedelta(days=rng.randrange(1, 15)))) for a in picks)
            for day in sorted(rng.sample(range(1, today.day), k=rng.choice([0, 1, 2, 3]))):
                usage.append((lid, date(2026, 5, day).isoformat(), rng.randrange(20, 700)))
            fees += PLAN_FEE[plan] + sum(ADDON_FEE[a[0]] for a in picks)
            r = rng.random()
            if r < 0.06:
                suspend.append((rng.choice(["travel", "lost_or_stolen"]), lid))
            elif r < 0.09 and rng.random() < 0.5:
                suspend.append(("travel", lid))
        if rng.random() < 0.1:  # an old line the customer already closed
            n_line += 1
            terminated.append((f"ln_{n_line:06d}", cid, phone_number(n_line), "plan_basic_5", "terminated", None, 0,
                               0, 0, None, kit.ts(NOW - timedelta(days=rng.randrange(200, 900)))))
        line_fees[cid] = max(fees, 10)

    line_sql = "INSERT INTO lines VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", customers)
    conn.executemany("INSERT INTO payment_methods VALUES (?, ?, ?, ?, ?)", methods)
    conn.executemany(line_sql, terminated)  # closed lines first: they never count towards R02
    conn.executemany(line_sql, lines)
    conn.executemany("INSERT INTO line_addons VALUES (?, ?, ?)", line_addons)
    conn.executemany("INSERT INTO usage_records VALUES (?, ?, ?)", usage)  # fx_usage adds up data_used_mb
    # Suspensions on request go through the triggers (R08, the yearly counter); some lines
    # already had one earlier this year.
    conn.executemany("UPDATE lines SET suspensions_ytd = 1 WHERE line_id = ?",
                     [(lid,) for _, lid in suspend if rng.random() < 0.4])
    conn.executemany("UPDATE lines SET status = 'suspended', suspend_reason = ? WHERE line_id = ?", suspend)
    # Retired plans stay on the lines that had them; nobody can move to them any more (R01).
    conn.executemany("UPDATE plans SET status = 'retired' WHERE plan_id = ?", [(p[0],) for p in PLANS if p[6]])

    bills, payments, overdue = [], [], []
    for cid, *_ in customers:
        fee = line_fees[cid]
        for period, due in PERIODS:
            amount = fee + rng.randrange(0, 8)
            bid = f"bill_{cid}_{period}"
            bills.append((bid, cid, period, "monthly", amount, 0, due, "open"))
            r = rng.random()
            if period == "2026-03" or (period == "2026-04" and r < 0.85) or (period == "2026-05" and r < 0.15):
                paid = amount
            elif period == "2026-05" and r < 0.4:
                paid = rng.randrange(1, amount)
            else:
                paid = 0
                if period == "2026-04":
                    overdue.append(cid)
            if paid:
                paid_at = kit.ts(datetime.fromisoformat(due) - timedelta(days=rng.randrange(0, 10)))
                payments.append((f"py_{bid}_1", bid, valid_method[cid], paid, paid_at))
    conn.executemany("INSERT INTO bills VALUES (?, ?, ?, ?, ?, ?, ?, ?)", bills)
    conn.executemany("INSERT INTO payments VALUES (?, ?, ?, ?, ?)", payments)  # fx_payment settles the bills
    # Accounts with an overdue bill get their active lines cut off, about half of them.
    cut = [(cid,) for cid in overdue if rng.random() < 0.5]
    conn.executemany("UPDATE lines SET status = 'suspended', suspend_reason = 'non_payment'"
                     " WHERE customer_id = ? AND status = 'active'", cut)
