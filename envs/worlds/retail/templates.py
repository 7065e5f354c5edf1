"""Self-play question templates of the retail world (see `envs/templating.py`); the
world's `design.py` hook `self_play_templates()` returns `TEMPLATES`. Each draws a call
whose writes pass the compiled rules on the base state (a pending order to cancel, a line
of an order delivered inside the return window, a sibling variant in stock, ...), from one
customer's records and the shared catalogue; reads state the answer the customer must hear."""

from __future__ import annotations

import json
import random
import sqlite3
from typing import Any

from envs.sql import NOW_SQL as NOW
from envs.sql import rows
from envs.templating import (
    Out,
    Question,
    Template,
    ask,
    count_of,
    each,
    insist_on,
    pick,
    pick_chain,
    request,
    told,
)

CATEGORIES = ["apparel", "footwear", "outdoor", "home", "kitchen", "electronics", "office"]
STREETS = ["Birch Street", "Willow Way", "Harbor Road", "Sunset Boulevard", "Quarry Lane"]
CITIES = ["Lakewood", "Ashford", "Brookside", "Westfield", "Millbrook"]
_WINDOW = f"datetime({NOW}, '-30 days')"


def by_email(conn: sqlite3.Connection, rng: random.Random) -> Out:
    c = pick(conn, rng, "SELECT * FROM customers")
    if c is None:
        return None
    return {"email": c["email"]}, rng.choice([
        f"Hi, my email is {c['email']}. Can you find my account and tell me my customer number?",
        f"What customer id is my email address {c['email']} registered under?",
    ]), [told("customer id", c["customer_id"], "id")]


def by_name_zip(conn: sqlite3.Connection, rng: random.Random) -> Out:
    c = pick(conn, rng, "SELECT * FROM customers")
    if c is None:
        return None
    args = {"first_name": c["first_name"], "last_name": c["last_name"], "zip_code": c["zip"]}
    return args, rng.choice([
        f"I'm {c['first_name']} {c['last_name']}, zip code {c['zip']}, and I forgot my email. What is my customer id?",
        f"Could you find my account? I'm {c['first_name']} {c['last_name']} in zip {c['zip']}; I need my customer id.",
    ]), [told("customer id", c["customer_id"], "id")]


def customer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    def questions(c: dict[str, Any], cid: str) -> list[Question]:
        orders = [r["order_id"] for r in rows(conn, "SELECT order_id FROM orders WHERE customer_id = ?"
                                                    " ORDER BY order_id", cid)]
        gift = rows(conn, "SELECT balance FROM payment_methods WHERE customer_id = ? AND kind = 'gift_card'", cid)
        options = []
        if 1 <= len(orders) <= 3:
            options.append((f"Which orders are on my customer account {cid}?", each("order number", orders, "id")))
        if len(gift) == 1:
            options.append((f"What is the gift card balance on my account {cid}?",
                            [told("gift card balance", gift[0]["balance"], "amount")]))
        return options
    return ask(conn, rng, "SELECT * FROM customers", "customer_id", questions)


def order(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return ask(conn, rng, "SELECT * FROM orders", "order_id", lambda o, oid: [
        (f"Where is my order {oid}? What is its status?", [told("order status", o["status"])]),
        (f"What did my order {oid} cost in total?", [told("order total", o["total"], "amount")]),
        (f"Has my order {oid} been delivered yet? Tell me its status.", [told("order status", o["status"])])])


def product(conn: sqlite3.Connection, rng: random.Random) -> Out:
    def questions(p: dict[str, Any], pid: str) -> list[Question]:
        variants = rows(conn, "SELECT options, price, stock FROM variants WHERE product_id = ?", pid)
        if not variants:
            return []
        cheapest = min(v["price"] for v in variants)
        v = rng.choice(variants)
        options = ", ".join(f"{k} {x}" for k, x in json.loads(v["options"]).items())
        return [(f"What is the lowest price you have {pid} for?", [told("lowest price", cheapest, "amount")]),
                (f"How many of {pid} in {options} do you have in stock?",
                 [told("units in stock", v["stock"], "count")])]
    return ask(conn, rng, "SELECT * FROM products", "product_id", questions)


def products(conn: sqlite3.Connection, rng: random.Random) -> Out:
    known = {r["category"] for r in rows(conn, "SELECT DISTINCT category FROM products")}
    options = [c for c in CATEGORIES if c in known]
    if not options:
        return None
    cat = rng.choice(options)
    names = [r["name"] for r in rows(conn, "SELECT name FROM products WHERE category = ? ORDER BY name", cat)]
    if len(names) > 4:
        return None
    return {"category": cat}, rng.choice([f"What do you sell in the {cat} category?",
                                          f"Which {cat} products do you have?"]), each("product", names)


def calculate(conn: sqlite3.Connection, rng: random.Random) -> Out:
    v = pick(conn, rng, "SELECT v.*, p.name FROM variants v JOIN products p USING (product_id)")
    if v is None:
        return None
    n = rng.randint(2, 5)
    expr, value, why = rng.choice([
        (f"{n} * {v['price']}", n * v["price"], f"{n} of the {v['name']} at {v['price']} each"),
        (f"{n} * {v['price']} + 12", n * v["price"] + 12, f"{n} of the {v['name']} plus 12 for gift wrap"),
    ])
    return {"expression": expr}, rng.choice([f"What would {why} come to? That is {expr}.",
                                             f"Could you work out {expr} for me ({why})?"]), [
        told("amount", value, "amount")]


def place(conn: sqlite3.Connection, rng: random.Random) -> Out:
    pay = pick(conn, rng, "SELECT * FROM payment_methods WHERE kind IN ('credit_card', 'paypal')")
    v = pick(conn, rng, "SELECT v.*, p.name FROM variants v JOIN products p USING (product_id) WHERE v.stock >= 1")
    if pay is None or v is None:
        return None
    q = rng.randint(1, min(3, v["stock"]))
    args = {"customer_id": pay["customer_id"], "variant_ids": [v["variant_id"]], "quantities": [q],
            "payment_id": pay["payment_id"]}
    return args, rng.choice([
        f"I'm customer {pay['customer_id']}. Please order {q} of {v['variant_id']} and charge {pay['payment_id']}.",
        f"Place an order for me (customer {pay['customer_id']}): {v['variant_id']}, quantity {q},"
        f" paid with {pay['payment_id']}.",
    ])


def cancel(conn: sqlite3.Connection, rng: random.Random) -> Out:
    o = pick(conn, rng, "SELECT * FROM orders WHERE status = 'pending'")
    if o is None:
        return None
    reason = rng.choice(["no longer needed", "ordered by mistake"])
    return {"order_id": o["order_id"], "reason": reason}, rng.choice([
        f"Please cancel my order {o['order_id']}, the reason is: {reason}.",
        f"Cancel my order {o['order_id']} ({reason}).",
    ])


def address(conn: sqlite3.Connection, rng: random.Random) -> Out:
    def said(o: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        new = f"{rng.randrange(1, 999)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"
        return {"order_id": o["order_id"], "address": new}, [
            f"Please ship my order {o['order_id']} to {new} instead.",
            f"Change the delivery address of my order {o['order_id']} to {new}."]
    return request(conn, rng, "SELECT * FROM orders WHERE status IN ('pending', 'processed')", said)


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
        f"I want to return {q} of {ln['variant_id']} from my order {ln['order_id']}; refund it to"
        f" {ln['payment_id']}.",
        f"Return {count_of(q, 'unit')} of {ln['variant_id']} in my order {ln['order_id']} with the refund going to"
        f" {ln['payment_id']}.",
    ])


def exchange(conn: sqlite3.Connection, rng: random.Random) -> Out:
    ln = _open_line(conn, rng)
    got = ln and pick_chain(
        conn, rng, "SELECT * FROM variants WHERE product_id = ? AND variant_id <> ? AND stock >= 1",
        ln["product_id"], ln["variant_id"],
        then=[lambda new: ("SELECT p.* FROM payment_methods p JOIN orders o ON o.customer_id = p.customer_id"
                           " WHERE o.order_id = ? AND p.kind <> 'gift_card'", (ln["order_id"],))])
    if not got:
        return None
    new, pay = got
    args = {"order_id": ln["order_id"], "variant_id": ln["variant_id"], "new_variant_id": new["variant_id"],
            "quantity": 1, "payment_id": pay["payment_id"]}
    return args, (f"In my order {ln['order_id']}, exchange 1 unit of {ln['variant_id']} for {new['variant_id']};"
                  f" any price difference goes on {pay['payment_id']}.")


def transfer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    """Compensation or a disputed total, which the policy does not allow, and the customer
    insists: the policy's case for a human agent."""
    return insist_on(conn, rng, "SELECT * FROM orders", lambda o: [
        (f"My order {o['order_id']} came late and I want compensation for it",
         f"Customer {o['customer_id']} wants compensation for a late order {o['order_id']}"),
        (f"The total of my order {o['order_id']} is wrong and I want it corrected",
         f"Customer {o['customer_id']} disputes the total of order {o['order_id']}"),
    ], "If you cannot do that, I insist on a human agent; please hand over this note")


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
