"""Self-play question templates of the retail world (see `envs/templating.py`); the
world's `design.py` hook `self_play_templates()` returns `TEMPLATES`. Each draws a call
whose writes pass the compiled rules on the base state (a pending order to cancel, a line
of an order delivered inside the return window, a sibling variant in stock, ...)."""

from __future__ import annotations

import json
import random
import sqlite3
from typing import Any

from envs.sql import NOW_SQL as NOW
from envs.sql import rows
from envs.templating import Template, pick

CATEGORIES = ["apparel", "footwear", "outdoor", "home", "kitchen", "electronics", "office"]
STREETS = ["Birch Street", "Willow Way", "Harbor Road", "Sunset Boulevard", "Quarry Lane"]
CITIES = ["Lakewood", "Ashford", "Brookside", "Westfield", "Millbrook"]
_WINDOW = f"datetime({NOW}, '-30 days')"
Out = tuple[dict[str, Any], str] | None


def _options(options: str) -> str:
    return ", ".join(f"{k} {v}" for k, v in json.loads(options).items())


def by_email(conn: sqlite3.Connection, rng: random.Random) -> Out:
    c = pick(conn, rng, "SELECT * FROM customers")
    if c is None:
        return None
    return {"email": c["email"]}, rng.choice([
        f"Hi, my email is {c['email']}. Can you find my account?",
        f"Please look up the customer with the email address {c['email']}.",
    ])


def by_name_zip(conn: sqlite3.Connection, rng: random.Random) -> Out:
    c = pick(conn, rng, "SELECT * FROM customers")
    if c is None:
        return None
    args = {"first_name": c["first_name"], "last_name": c["last_name"], "zip_code": c["zip"]}
    return args, rng.choice([
        f"I'm {c['first_name']} {c['last_name']}, zip code {c['zip']}, and I forgot my email. Can you find me?",
        f"Find the account of {c['first_name']} {c['last_name']} in zip {c['zip']}, please.",
    ])


def customer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    c = pick(conn, rng, "SELECT * FROM customers")
    if c is None:
        return None
    cid = c["customer_id"]
    return {"customer_id": cid}, rng.choice([
        f"Which orders and payment methods are on customer account {cid}?",
        f"What is the gift card balance on my account {cid}?",
    ])


def order(conn: sqlite3.Connection, rng: random.Random) -> Out:
    o = pick(conn, rng, "SELECT * FROM orders")
    if o is None:
        return None
    oid = o["order_id"]
    return {"order_id": oid}, rng.choice([f"Where is my order {oid}?", f"What did I buy in order {oid}, and what"
                                          " did it cost?", f"Has order {oid} been delivered yet?"])


def product(conn: sqlite3.Connection, rng: random.Random) -> Out:
    p = pick(conn, rng, "SELECT * FROM products")
    if p is None:
        return None
    pid = p["product_id"]
    return {"product_id": pid}, rng.choice([f"Which colors and sizes does product {pid} ({p['name']}) come in?",
                                            f"Is product {pid} in stock, and at what price?"])


def products(conn: sqlite3.Connection, rng: random.Random) -> Out:
    known = {r["category"] for r in rows(conn, "SELECT DISTINCT category FROM products")}
    options = [c for c in CATEGORIES if c in known]
    if not options:
        return None
    cat = rng.choice(options)
    return {"category": cat}, rng.choice([f"What do you sell in the {cat} category?",
                                          f"Show me your {cat} products."])


def calculate(conn: sqlite3.Connection, rng: random.Random) -> Out:
    v = pick(conn, rng, "SELECT * FROM variants")
    if v is None:
        return None
    n = rng.randint(2, 5)
    expr = rng.choice([f"{n} * {v['price']}", f"{v['price']} - {n}", f"{n} * {v['price']} + 12"])
    return {"expression": expr}, rng.choice([f"What is {expr}?", f"Could you work out {expr} for me?"])


def place(conn: sqlite3.Connection, rng: random.Random) -> Out:
    pay = pick(conn, rng, "SELECT * FROM payment_methods WHERE kind IN ('credit_card', 'paypal')")
    v = pick(conn, rng, "SELECT v.*, p.name FROM variants v JOIN products p USING (product_id) WHERE v.stock >= 1")
    if pay is None or v is None:
        return None
    q = rng.randint(1, min(3, v["stock"]))
    args = {"customer_id": pay["customer_id"], "variant_ids": [v["variant_id"]], "quantities": [q],
            "payment_id": pay["payment_id"]}
    return args, rng.choice([
        f"I'm customer {pay['customer_id']}. Please order {q} of variant {v['variant_id']} ({v['name']},"
        f" {_options(v['options'])}) and charge {pay['payment_id']}.",
        f"Place an order for customer {pay['customer_id']}: variant {v['variant_id']}, quantity {q},"
        f" paid with {pay['payment_id']}.",
    ])


def cancel(conn: sqlite3.Connection, rng: random.Random) -> Out:
    o = pick(conn, rng, "SELECT * FROM orders WHERE status = 'pending'")
    if o is None:
        return None
    reason = rng.choice(["no longer needed", "ordered by mistake"])
    return {"order_id": o["order_id"], "reason": reason}, rng.choice([
        f"Please cancel my order {o['order_id']}, the reason is: {reason}.",
        f"Cancel order {o['order_id']} ({reason}).",
    ])


def address(conn: sqlite3.Connection, rng: random.Random) -> Out:
    o = pick(conn, rng, "SELECT * FROM orders WHERE status IN ('pending', 'processed')")
    if o is None:
        return None
    new = f"{rng.randrange(1, 999)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"
    return {"order_id": o["order_id"], "address": new}, rng.choice([
        f"Please ship my order {o['order_id']} to {new} instead.",
        f"Change the delivery address of order {o['order_id']} to {new}.",
    ])


def _open_line(conn: sqlite3.Connection, rng: random.Random) -> dict[str, Any] | None:
    return pick(conn, rng, "SELECT i.*, o.payment_id, v.product_id, v.options FROM order_items i"
                           " JOIN orders o USING (order_id) JOIN variants v USING (variant_id)"
                           f" WHERE o.status = 'delivered' AND o.delivered_at >= {_WINDOW}"
                           " AND i.quantity - i.returned - i.exchanged >= 1")


def return_item(conn: sqlite3.Connection, rng: random.Random) -> Out:
    ln = _open_line(conn, rng)
    if ln is None:
        return None
    q = rng.randint(1, ln["quantity"] - ln["returned"] - ln["exchanged"])
    args = {"order_id": ln["order_id"], "variant_id": ln["variant_id"], "quantity": q,
            "refund_payment_id": ln["payment_id"]}
    return args, rng.choice([
        f"I want to return {q} of item {ln['variant_id']} from order {ln['order_id']}; refund it to"
        f" {ln['payment_id']}.",
        f"Return {q} unit(s) of {ln['variant_id']} in order {ln['order_id']} with the refund going to"
        f" {ln['payment_id']}.",
    ])


def exchange(conn: sqlite3.Connection, rng: random.Random) -> Out:
    ln = _open_line(conn, rng)
    if ln is None:
        return None
    new = pick(conn, rng, "SELECT * FROM variants WHERE product_id = ? AND variant_id <> ? AND stock >= 1",
               ln["product_id"], ln["variant_id"])
    if new is None:
        return None
    pay = pick(conn, rng, "SELECT p.* FROM payment_methods p JOIN orders o ON o.customer_id = p.customer_id"
                          " WHERE o.order_id = ? AND p.kind <> 'gift_card'", ln["order_id"])
    if pay is None:
        return None
    args = {"order_id": ln["order_id"], "variant_id": ln["variant_id"], "new_variant_id": new["variant_id"],
            "quantity": 1, "payment_id": pay["payment_id"]}
    return args, (f"In order {ln['order_id']}, exchange 1 unit of {ln['variant_id']} for {new['variant_id']}"
                  f" ({_options(new['options'])}); any price difference goes on {pay['payment_id']}.")


def transfer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    o = pick(conn, rng, "SELECT * FROM orders")
    if o is None:
        return None
    summary = rng.choice([f"Customer {o['customer_id']} wants compensation for a late order {o['order_id']}",
                          f"Customer {o['customer_id']} disputes the total of order {o['order_id']}"])
    return {"summary": summary}, f'I need a human agent. Please hand over this note: "{summary}".'


TEMPLATES: dict[str, Template] = {
    "find_customer_by_email": by_email,
    "find_customer_by_name_zip": by_name_zip,
    "get_customer_details": customer,
    "get_order_details": order,
    "get_product_details": product,
    "list_products": products,
    "calculate": calculate,
    "place_order": place,
    "cancel_pending_order": cancel,
    "modify_order_address": address,
    "return_item": return_item,
    "exchange_item": exchange,
    "transfer_to_human_agents": transfer,
}
