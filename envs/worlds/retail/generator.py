"""Seeded data generator for the retail world. `scale` is the number of customers; the
catalog grows with it (about 400 rows at the default scale of 30, 10^5+ rows at scale 10000).

The history is written through the schema's triggers (orders charge their payment method,
items take stock, cancellations and returns refund and restock), so the generated state
obeys every compiled rule; starting stock and gift-card balances are planned up front so
that no trigger can refuse the history.
"""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
from collections import Counter
from datetime import datetime, timedelta
from functools import lru_cache

from envs import sql as kit

NOW = datetime(2026, 6, 15, 10, 0, 0)
FIRST = ["mia", "noah", "ava", "liam", "emma", "omar", "yara", "ivan", "sofia", "lucas", "aisha", "chen",
         "raj", "ana", "ethan", "zoe", "kofi", "lena", "mateo", "nina"]
LAST = ["li", "garcia", "smith", "khan", "muller", "silva", "kim", "nguyen", "rossi", "ito", "ahmed", "lopez"]
STREETS = ["Elm Street", "Oak Avenue", "Maple Road", "Cedar Lane", "Pine Court", "Lake Drive", "Hill Road"]
CITIES = ["Springfield", "Riverton", "Fairview", "Greenville", "Madison", "Clinton", "Georgetown"]
# name, category, option dimensions, (low, high) base price
CATALOG: list[tuple[str, str, dict[str, list[str]], tuple[int, int]]] = [
    ("T-Shirt", "apparel", {"color": ["blue", "red", "black", "white"], "size": ["S", "M", "L", "XL"]}, (15, 30)),
    ("Running Shoes", "footwear", {"color": ["black", "white", "grey"], "size": ["8", "9", "10", "11"]}, (70, 140)),
    ("Water Bottle", "outdoor", {"capacity": ["500ml", "750ml", "1000ml"], "color": ["green", "blue"]}, (12, 30)),
    ("Desk Lamp", "home", {"color": ["black", "white", "brass"], "bulb": ["LED", "halogen"]}, (25, 70)),
    ("Backpack", "outdoor", {"color": ["navy", "olive", "black"], "capacity": ["20L", "30L"]}, (40, 90)),
    ("Coffee Maker", "kitchen", {"capacity": ["4 cups", "8 cups", "12 cups"]}, (35, 120)),
    ("Wireless Headphones", "electronics", {"color": ["black", "silver"], "style": ["over-ear", "in-ear"]},
     (60, 220)),
    ("Yoga Mat", "outdoor", {"thickness": ["4mm", "6mm"], "color": ["purple", "teal", "grey"]}, (20, 50)),
    ("Office Chair", "office", {"color": ["black", "grey"], "material": ["mesh", "leather"]}, (120, 300)),
    ("Mechanical Keyboard", "electronics", {"switch": ["red", "brown", "blue"], "layout": ["full", "compact"]},
     (60, 160)),
    ("Tea Kettle", "kitchen", {"material": ["steel", "glass"], "color": ["silver", "black", "red"]}, (25, 80)),
    ("Hiking Boots", "footwear", {"size": ["8", "9", "10", "11", "12"], "waterproof": ["yes", "no"]}, (90, 180)),
    ("Notebook", "office", {"ruling": ["lined", "dotted", "blank"], "size": ["A5", "A4"]}, (5, 15)),
    ("Bluetooth Speaker", "electronics", {"color": ["black", "blue", "red"], "battery": ["10h", "20h"]},
     (30, 150)),
]
LINES = [1, 1, 2, 2, 3]  # distinct variants per order (before dropping repeats)
UNITS = [1, 1, 1, 2, 2, 3]  # units per order line
AGE_DAYS = {"delivered": (5, 70), "shipped": (2, 3), "processed": (1, 2), "pending": (0, 1), "cancelled": (0, 40)}
STATUSES = ["delivered"] * 10 + ["shipped"] * 3 + ["processed"] * 3 + ["pending"] * 3 + ["cancelled"]


@lru_cache(maxsize=8192)
def _ts_ago(days: int, hours: int) -> str:
    return kit.ts(NOW - timedelta(days=days, hours=hours))


def _order_id(seed: int, i: int) -> str:
    # 104729 is prime and coprime with 9e6: distinct for every i < 9e6.
    return f"#W{(seed * 7919 + i * 104729) % 9_000_000 + 1_000_000}"


def generate(conn: sqlite3.Connection, seed: int, scale: int = 30) -> None:
    """Fill an empty retail database deterministically from `seed`."""
    if scale < 1:
        raise ValueError(f"scale must be a positive number of customers, got {scale}")
    rng = random.Random(seed)
    conn.execute("INSERT INTO meta VALUES ('now', ?)", (kit.ts(NOW),))

    # Catalog: products with 3-6 variants each; prices per variant around the base price.
    products: list[tuple[str, str, str]] = []
    variants: list[list] = []  # variant_id, product_id, options, price, stock (filled in later)
    by_product: dict[str, list[int]] = {}
    for p in range(8 + scale // 20):
        name, category, dims, (lo, hi) = CATALOG[p % len(CATALOG)]
        edition = p // len(CATALOG)
        pid = f"P{p:05d}"
        products.append((pid, name if edition == 0 else f"{name} Mk{edition + 1}", category))
        combos = list(itertools.product(*dims.values()))
        base = rng.randrange(lo, hi + 1)
        for j, combo in enumerate(sorted(rng.sample(combos, k=min(len(combos), rng.randint(3, 6))))):
            options = json.dumps(dict(zip(dims, combo, strict=True)))
            by_product.setdefault(pid, []).append(len(variants))
            variants.append([f"V{p:05d}{j:02d}", pid, options, max(1, base + rng.randrange(-5, 6)), 0])

    customers: list[tuple] = []
    payments: list[list] = []  # payment_id, customer_id, kind, last4, balance
    orders: list[tuple] = []
    items: list[tuple] = []
    cancels: list[tuple[str, str]] = []
    returns: list[tuple] = []
    sold: Counter[int] = Counter()
    gift_spent: Counter[int] = Counter()  # index into payments -> amount charged to it
    n_orders = 0
    n_variants = len(variants)
    for u in range(scale):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        cid = f"{first}_{last}_{1000 + u}"
        address = f"{rng.randrange(1, 999)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"
        customers.append((cid, first.title(), last.title(), f"{first}.{last}{u}@example.com",
                          f"{rng.randrange(10000, 99999)}", address))
        own: list[int] = []
        last4s = rng.sample(range(10000), k=2)
        for k in range(1 + (rng.random() < 0.35)):  # one or two credit cards, distinct last4
            own.append(len(payments))
            payments.append([f"credit_card_{u * 5 + k:06d}", cid, "credit_card", f"{last4s[k]:04d}", None])
        if rng.random() < 0.5:
            own.append(len(payments))
            payments.append([f"gift_card_{u * 5 + 2:06d}", cid, "gift_card", None, rng.randrange(0, 300, 10)])
        if rng.random() < 0.3:
            own.append(len(payments))
            payments.append([f"paypal_{u * 5 + 3:06d}", cid, "paypal", None, None])
        for _ in range(rng.choice([0, 1, 2, 2, 3, 4])):
            oid = _order_id(seed, n_orders)
            n_orders += 1
            status = rng.choice(STATUSES)
            lo, span = AGE_DAYS[status]
            age = lo + int(rng.random() * span)
            hours = 1 + int(rng.random() * 19)
            transit = 2 + int(rng.random() * 3)
            delivered = status == "delivered"
            lines = {int(rng.random() * n_variants) for _ in range(LINES[int(rng.random() * len(LINES))])}
            total = 0
            for v in sorted(lines):
                q = UNITS[int(rng.random() * len(UNITS))]
                items.append((oid, variants[v][0], q, variants[v][3]))
                sold[v] += q
                total += q * variants[v][3]
            pay = own[rng.randrange(len(own))]
            if payments[pay][2] == "gift_card":
                gift_spent[pay] += total
            # Cancelled orders are written as pending and cancelled through the trigger.
            orders.append((oid, cid, payments[pay][0], "pending" if status == "cancelled" else status, address,
                           total, _ts_ago(age, hours), _ts_ago(age - transit, hours) if delivered else None))
            if status == "cancelled":
                cancels.append((rng.choice(["no longer needed", "ordered by mistake"]), oid))
            elif delivered and age - transit < 30 and rng.random() < 0.25:  # one unit back, in the window
                _, vid, _, price = items[-1]
                rid = f"RT{seed % 97:02d}{len(returns):06d}"
                returns.append((rid, oid, vid, 1, payments[pay][0], price, _ts_ago(age - transit - 1, hours)))

    # Starting stock and balances: what is left now plus what the history will take.
    for v, row in enumerate(variants):
        row[4] = rng.choice([0, 1, 2, 3, 5, 8, 12, 20, 40]) + sold[v]
    for pay, spent in gift_spent.items():
        payments[pay][4] += spent
    conn.executemany("INSERT INTO products VALUES (?, ?, ?)", products)
    conn.executemany("INSERT INTO variants VALUES (?, ?, ?, ?, ?)", [tuple(v) for v in variants])
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?, ?)", customers)
    conn.executemany("INSERT INTO payment_methods VALUES (?, ?, ?, ?, ?)", [tuple(p) for p in payments])
    conn.executemany(
        "INSERT INTO orders (order_id, customer_id, payment_id, status, address, total, created_at, delivered_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", orders)
    conn.executemany("INSERT INTO order_items (order_id, variant_id, quantity, unit_price) VALUES (?, ?, ?, ?)",
                     items)
    conn.executemany("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?", cancels)
    conn.executemany("INSERT INTO returns VALUES (?, ?, ?, ?, ?, ?, ?)", returns)
