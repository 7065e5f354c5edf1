"""How conversations go in the retail world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, id_fact
from envs.worlds.retail.design import item_phrase, payment_phrase

IDENTITY = Identity(keys=[["email"], ["name", "zip code"]],
                    lookups={"find_customer_by_email": ["email"],
                             "find_customer_by_name_zip": ["first_name", "last_name", "zip_code"]})
USER_FACING_IDS = ["customer_id", "order_id", "return_id", "exchange_id"]  # account, order and case numbers
CLAUSES = DEFAULT_CLAUSES
ASK_IDENTITY = [
    "I can help with that. Could you tell me the email address on your account?",
    "Happy to help. First, what is the email address of your account?",
    "Sure. To find your account, may I have your email address?",
]
RULE_TERMS = {
    "R01_CANCEL_PENDING": ["only `pending` orders can be cancelled", "pending"],
    "R02_STOCK": ["in stock"],
    "R03_PAYMENT_OWNER": ["must belong to the customer who owns the order"],
    "R04_GIFT_BALANCE": ["must cover the whole amount"],
    "R05_RETURN_WINDOW": ["30 days"],
    "R06_DELIVERED_ONLY": ["only from `delivered` orders", "delivered"],
    "R07_ITEM_QUANTITY": ["not yet returned or exchanged"],
    "R08_SAME_PRODUCT": ["of the same product"],
    "R09_REFUND_DESTINATION": ["original payment method", "gift card of the same customer"],
    "R10_LINE_QUANTITY": ["between 1 and 5 units"],
    "R11_ADDRESS_CHANGE": ["`pending` or `processed`", "shipped or delivered"],
    "R12_CANCELLED_FINAL": ["a cancelled order is final"],
}
ALTERNATIVES = {
    "R08_SAME_PRODUCT": "You can return the item and place a new order for the other product.",
    "R01_CANCEL_PENDING": "Once it is delivered, you can return the items within 30 days.",
    "R10_LINE_QUANTITY": "I can place the order with up to 5 units of it.",
}


def lookup(keys: list[str], known: dict[str, Any]) -> ToolCall | None:
    """The identity lookup of a customer who identifies with `keys`: by email, or by name and
    zip code (the name split at its first space into first and last name)."""
    if keys == ["email"] and known.get("email"):
        return ToolCall(name="find_customer_by_email", arguments={"email": str(known["email"])})
    if keys == ["name", "zip code"] and known.get("name") and known.get("zip code"):
        first, _, last = str(known["name"]).strip().partition(" ")
        if first and last:
            return ToolCall(name="find_customer_by_name_zip",
                            arguments={"first_name": first, "last_name": last, "zip_code": str(known["zip code"])})
    return None


def mentions(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> list[str]:
    """How a record is named to a customer."""
    if table == "payment_methods":
        return {"credit_card": [row["last4"] or ""], "gift_card": ["gift card"], "paypal": ["PayPal"]}[row["kind"]]
    if table == "variants":
        v = kit.one(conn, "SELECT p.name FROM variants v JOIN products p USING (product_id) WHERE variant_id = ?",
                    row["variant_id"])
        return [v["name"]]
    if table == "orders":
        return [row["order_id"]]
    return []


def phrase(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
    """How a customer names a record in a request: an item by its product and options, a
    product by its name, a payment method by its card digits or kind."""
    if table == "variants":
        return item_phrase(conn, row["variant_id"])
    if table == "products":
        return f"the {row['name']}"
    if table == "payment_methods":
        return payment_phrase(conn, row["payment_id"]).replace("your ", "my ", 1)
    return None


def _pay(conn: sqlite3.Connection, payment_id: str) -> str:
    return payment_phrase(conn, payment_id).replace("your ", "the ", 1)


def _items(conn: sqlite3.Connection, variant_ids: list[str], quantities: list[int]) -> tuple[str, int]:
    words, total = [], 0
    for v, q in zip(variant_ids, quantities, strict=True):
        price = kit.one(conn, "SELECT price FROM variants WHERE variant_id = ?", v)["price"]
        total += price * int(q)
        words.append(f"{q} × {item_phrase(conn, v)[4:]} at {price} each")
    return ", ".join(words), total


def action(conn: sqlite3.Connection, call: ToolCall) -> list[str]:
    """Realisations of the plan for one write, with the amounts it moves."""
    a = call.arguments
    if call.name == "place_order":
        items, total = _items(conn, list(a["variant_ids"]), list(a["quantities"]))
        pay = _pay(conn, a["payment_id"])
        return [f"place an order for {items}, {total} in total, charged to {pay}",
                f"order {items} for a total of {total}, paid with {pay}"]
    if call.name == "cancel_pending_order":
        o = kit.one(conn, "SELECT * FROM orders WHERE order_id = ?", a["order_id"])
        pay = _pay(conn, o["payment_id"])
        return [f"cancel order {o['order_id']} ({a['reason']}) and refund its {o['total']} to {pay}",
                f"cancel {o['order_id']}; the {o['total']} you paid goes back to {pay}"]
    if call.name == "modify_order_address":
        return [f"change the shipping address of order {a['order_id']} to {a['address']}",
                f"ship order {a['order_id']} to {a['address']} instead"]
    if call.name == "return_item":
        line = kit.one(conn, "SELECT * FROM order_items WHERE order_id = ? AND variant_id = ?", a["order_id"],
                       a["variant_id"])
        refund = line["unit_price"] * int(a["quantity"])
        item = item_phrase(conn, a["variant_id"])
        pay = _pay(conn, a["refund_payment_id"])
        return [f"return {a['quantity']} × {item[4:]} from order {a['order_id']} and refund {refund} to {pay}",
                f"process the return of {item} ({a['quantity']} unit(s)) from {a['order_id']}: {refund} back to {pay}"]
    if call.name == "exchange_item":
        line = kit.one(conn, "SELECT * FROM order_items WHERE order_id = ? AND variant_id = ?", a["order_id"],
                       a["variant_id"])
        new = kit.one(conn, "SELECT price FROM variants WHERE variant_id = ?", a["new_variant_id"])
        diff = (new["price"] - line["unit_price"]) * int(a["quantity"])
        pay = _pay(conn, a["payment_id"])
        money = (f"the difference of {diff} is charged to {pay}" if diff > 0 else
                 f"the difference of {-diff} is refunded to {pay}" if diff < 0 else
                 f"at no price difference, so nothing is charged to {pay}")
        return [f"exchange {a['quantity']} × {item_phrase(conn, a['variant_id'])[4:]} in order {a['order_id']} for "
                f"{item_phrase(conn, a['new_variant_id'])[4:]}; {money}"]
    return [call.name.replace("_", " ")]


def facts(before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall, result: Any) -> list[Fact]:
    """What the customer must hear: the new order number, the money charged or refunded."""
    a = call.arguments
    if call.name == "place_order":
        return [id_fact("order number", result["order_id"]), amount_fact("amount charged", result["total"])]
    if call.name == "cancel_pending_order":
        return [amount_fact("amount refunded", result["total"])]
    if call.name == "modify_order_address":
        return [Fact(label="new address", any_of=[result["address"]], kind="text")]
    if call.name == "return_item":
        new = [r for r in result["returns"] if r["variant_id"] == a["variant_id"]][-1]
        return [amount_fact("amount refunded", new["amount"])]
    if call.name == "exchange_item":
        new = [r for r in result["exchanges"] if r["variant_id"] == a["variant_id"]][-1]
        diff = new["price_difference"]
        return [amount_fact("amount charged" if diff > 0 else "amount refunded", diff)] if diff else []
    return []


def report(conn: sqlite3.Connection, call: ToolCall, result: Any, facts: list[Fact]) -> list[str]:
    a = call.arguments
    if call.name == "place_order":
        return [f"Your order {result['order_id']} is placed: {result['total']} was charged to {_pay(conn, result['payment_id'])}.",
                f"Order {result['order_id']} is on its way to being processed; the total of {result['total']} "
                f"was charged to {_pay(conn, result['payment_id'])}."]
    if call.name == "cancel_pending_order":
        return [f"Order {result['order_id']} is cancelled and {result['total']} is refunded to "
                f"{_pay(conn, result['payment_id'])}."]
    if call.name == "modify_order_address":
        return [f"Order {result['order_id']} will now ship to {result['address']}."]
    if call.name == "return_item":
        amount = facts[0].any_of[0] if facts else "the price paid"
        return [f"The return is registered and {amount} will be refunded to {_pay(conn, a['refund_payment_id'])}."]
    if call.name == "exchange_item":
        money = (f"{facts[0].any_of[0]} was {'charged to' if 'charged' in facts[0].label else 'refunded to'} "
                 f"{_pay(conn, a['payment_id'])}" if facts else "there is no price difference")
        return [f"The exchange is registered; {money}."]
    return []


def grounding(conn: sqlite3.Connection, call: ToolCall, known: dict[str, str]) -> list[ToolCall]:
    """Reads that show a write's ids: the order's details, and the products of new items."""
    a = call.arguments
    out: list[ToolCall] = []
    if "order_id" in a:
        out.append(ToolCall(name="get_order_details", arguments={"order_id": a["order_id"]}))
    variants = list(a.get("variant_ids") or []) + ([a["new_variant_id"]] if a.get("new_variant_id") else [])
    for v in variants:
        row = kit.one(conn, "SELECT p.product_id, p.category FROM variants v JOIN products p USING (product_id)"
                            " WHERE variant_id = ?", v)
        out.append(ToolCall(name="list_products", arguments={"category": row["category"]}))
        out.append(ToolCall(name="get_product_details", arguments={"product_id": row["product_id"]}))
    return out
