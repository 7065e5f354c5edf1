"""Tools of the retail world. Reads return records; writes change the database and the
schema's triggers enforce the policy (a broken rule raises `<RULE_ID>: message`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Literal

from envs import sql as kit
from envs.stock_tools import calculate_tool, transfer_tool
from envs.tools import ToolError, tool

CancelReason = Literal["no longer needed", "ordered by mistake"]


def _variant(record: dict) -> dict:
    """A variant row with its options decoded from JSON."""
    record["options"] = json.loads(record["options"])
    return record


def _same_orders(db: sqlite3.Connection, customer_id: str, payment_id: str, items: str) -> int:
    """How many orders of the customer, paid the same way, hold exactly these items."""
    found = kit.rows(db, "SELECT o.order_id, group_concat(i.variant_id || 'x' || i.quantity, ',') AS items"
                         " FROM orders o JOIN order_items i USING (order_id)"
                         " WHERE o.customer_id = ? AND o.payment_id = ? GROUP BY o.order_id", customer_id, payment_id)
    return sum(",".join(sorted(r["items"].split(","))) == items for r in found)


@tool()
def find_customer_by_email(db: sqlite3.Connection, email: str) -> dict:
    """Find a customer's id by their email address (to authenticate them).

    Args:
        email: The customer's email, e.g. "mia.li3@example.com".
    """
    row = kit.row(db, "SELECT customer_id FROM customers WHERE email = ?", email.strip().lower())
    return kit.need(row, "customer with email", email)


@tool()
def find_customer_by_name_zip(db: sqlite3.Connection, first_name: str, last_name: str, zip_code: str) -> dict:
    """Find customer ids by first name, last name and zip code (to authenticate them when
    they do not remember their email). Returns every matching account.

    Args:
        first_name: The customer's first name, e.g. "Mia".
        last_name: The customer's last name, e.g. "Li".
        zip_code: The customer's 5-digit zip code, e.g. "94107".
    """
    rows = kit.rows(
        db,
        "SELECT customer_id FROM customers WHERE lower(first_name) = lower(?) AND lower(last_name) = lower(?)"
        " AND zip = ? ORDER BY customer_id",
        first_name.strip(), last_name.strip(), zip_code.strip(),
    )
    if not rows:
        raise ToolError("NOT_FOUND", f"no customer named {first_name} {last_name} with zip {zip_code}")
    return {"customer_ids": [r["customer_id"] for r in rows]}


@tool()
def get_customer_details(db: sqlite3.Connection, customer_id: str) -> dict:
    """Get a customer's profile, payment methods (with gift card balances) and orders.

    Args:
        customer_id: The customer's id, e.g. "mia_li_1003".
    """
    customer = kit.fetch(db, "customers", "customer_id", customer_id, "customer")
    customer["payment_methods"] = kit.rows(
        db, "SELECT payment_id, kind, last4, balance FROM payment_methods WHERE customer_id = ? ORDER BY payment_id",
        customer_id,
    )
    customer["orders"] = kit.rows(
        db, "SELECT order_id, status, created_at FROM orders WHERE customer_id = ? ORDER BY created_at, order_id",
        customer_id,
    )
    return customer


@tool()
def get_order_details(db: sqlite3.Connection, order_id: str) -> dict:
    """Get an order: status, address, payment method, total, dates, its items (product,
    options, quantity, price paid, units returned and exchanged), returns, exchanges and the
    charges and refunds made.

    Args:
        order_id: The order id, e.g. "#W4821934".
    """
    order = kit.fetch(db, "orders", "order_id", order_id, "order")
    order["items"] = [
        _variant(r) for r in kit.rows(
            db,
            "SELECT i.variant_id, v.product_id, p.name AS product_name, v.options, i.quantity, i.unit_price,"
            " i.returned, i.exchanged FROM order_items i JOIN variants v USING (variant_id)"
            " JOIN products p USING (product_id) WHERE i.order_id = ? ORDER BY i.variant_id",
            order_id,
        )
    ]
    order["returns"] = kit.rows(db, "SELECT * FROM returns WHERE order_id = ? ORDER BY created_at, return_id", order_id)
    order["exchanges"] = kit.rows(
        db, "SELECT * FROM exchanges WHERE order_id = ? ORDER BY created_at, exchange_id", order_id
    )
    order["transactions"] = kit.rows(
        db, "SELECT source, payment_id, kind, amount, created_at FROM transactions WHERE order_id = ?"
        " ORDER BY created_at, source", order_id,
    )
    return order


@tool()
def get_product_details(db: sqlite3.Connection, product_id: str) -> dict:
    """Get a product and all its variants (options, price, units in stock).

    Args:
        product_id: The product id, e.g. "P00012".
    """
    product = kit.fetch(db, "products", "product_id", product_id, "product")
    product["variants"] = [
        _variant(r) for r in kit.rows(
            db, "SELECT variant_id, options, price, stock FROM variants WHERE product_id = ? ORDER BY variant_id",
            product_id,
        )
    ]
    return product


@tool()
def list_products(db: sqlite3.Connection, category: str | None = None) -> list:
    """List products (id, name, category), optionally of one category only.

    Args:
        category: A category such as "apparel", "footwear", "kitchen", "electronics",
            "home", "outdoor" or "office"; omit it to list every product.
    """
    if category is None:
        return kit.rows(db, "SELECT * FROM products ORDER BY name")
    rows = kit.rows(db, "SELECT * FROM products WHERE category = ? ORDER BY name", category.strip().lower())
    if not rows:
        known = [r["category"] for r in kit.rows(db, "SELECT DISTINCT category FROM products ORDER BY category")]
        raise ToolError("NOT_FOUND", f"no products in category {category!r}; categories are {known}")
    return rows


@tool(write=True)
def place_order(
    db: sqlite3.Connection, customer_id: str, variant_ids: list[str], quantities: list[int], payment_id: str
) -> dict:
    """Place an order shipped to the customer's address. Total = price x quantity summed over
    the items, charged to the payment method. Requires the customer's own payment method
    (R03) whose gift card balance covers the total (R04), 1-5 units per variant (R10) and
    enough units in stock (R02).

    Args:
        customer_id: The customer placing the order.
        variant_ids: The variants to order, each at most once, e.g. ["V0001203"].
        quantities: Units of each variant, in the same order as variant_ids.
        payment_id: The customer's payment method id.
    """
    customer = kit.need(
        kit.row(db, "SELECT customer_id, address FROM customers WHERE customer_id = ?", customer_id),
        "customer", customer_id,
    )
    if not variant_ids or len(variant_ids) != len(quantities):
        raise ToolError("BAD_VALUE", "variant_ids and quantities must be non-empty lists of the same length")
    if len(set(variant_ids)) != len(variant_ids):
        raise ToolError("BAD_VALUE", "each variant may appear once; put the number of units in quantities")
    kit.fetch(db, "payment_methods", "payment_id", payment_id, "payment method")
    prices = [
        kit.fetch(db, "variants", "variant_id", v, "variant")["price"]
        for v in variant_ids
    ]
    total = sum(p * q for p, q in zip(prices, quantities, strict=True))
    # Minted from the content (customer, payment, items), so orders in any order get the same ids.
    items = ",".join(sorted(f"{v}x{q}" for v, q in zip(variant_ids, quantities, strict=True)))
    content = {"customer_id": customer_id, "payment_id": payment_id, "items": items}
    order_id = kit.mint_id("#W", content, _same_orders(db, customer_id, payment_id, items), digits=True)
    while kit.row(db, "SELECT 1 FROM orders WHERE order_id = ?", order_id):
        order_id = kit.mint_id("#W", {"after": order_id}, digits=True)
    db.execute(
        "INSERT INTO orders (order_id, customer_id, payment_id, status, address, total, created_at)"
        " VALUES (?, ?, ?, 'pending', ?, ?, ?)",
        (order_id, customer_id, payment_id, customer["address"], total, kit.now(db)),
    )
    db.executemany(
        "INSERT INTO order_items (order_id, variant_id, quantity, unit_price) VALUES (?, ?, ?, ?)",
        [(order_id, v, q, p) for v, q, p in zip(variant_ids, quantities, prices, strict=True)],
    )
    return get_order_details(db, order_id)


@tool(write=True)
def cancel_pending_order(db: sqlite3.Connection, order_id: str, reason: CancelReason) -> dict:
    """Cancel an order. Only pending orders (R01); a cancelled order is final (R12). The total
    is refunded to the order's payment method and the items go back into stock.

    Args:
        order_id: The order to cancel, e.g. "#W4821934".
        reason: Either "no longer needed" or "ordered by mistake".
    """
    kit.fetch(db, "orders", "order_id", order_id, "order")
    db.execute("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?", (reason, order_id))
    return get_order_details(db, order_id)


@tool(write=True)
def modify_order_address(db: sqlite3.Connection, order_id: str, address: str) -> dict:
    """Change the shipping address of an order that is pending or processed (R11); not for
    cancelled orders (R12).

    Args:
        order_id: The order to change.
        address: The full new address, e.g. "12 Elm Street, Springfield".
    """
    order = kit.fetch(db, "orders", "order_id", order_id, "order")
    address = " ".join(address.split())
    if not address:
        raise ToolError("BAD_VALUE", "the address cannot be empty")
    kit.set_new(db, "orders", "order_id", order_id, "address", address, order["address"],
                "the order already ships to this address")
    return get_order_details(db, order_id)


def _line(db: sqlite3.Connection, order_id: str, variant_id: str) -> dict:
    kit.fetch(db, "orders", "order_id", order_id, "order")
    return kit.need(
        kit.row(db, "SELECT * FROM order_items WHERE order_id = ? AND variant_id = ?", order_id, variant_id),
        f"item of order {order_id} with variant", variant_id,
    )


@tool(write=True)
def return_item(
    db: sqlite3.Connection, order_id: str, variant_id: str, quantity: int, refund_payment_id: str
) -> dict:
    """Return units of an item of a delivered order (R06) within 30 days of delivery (R05),
    at most the units not yet returned or exchanged (R07). Refund = price paid x quantity, to
    the order's payment method or a gift card of the same customer (R09).

    Args:
        order_id: The order the item belongs to.
        variant_id: The item's variant id, as listed in the order.
        quantity: Units to return (at least 1).
        refund_payment_id: Where the refund goes: the order's payment method or a gift card id.
    """
    line = _line(db, order_id, variant_id)
    if quantity < 1:
        raise ToolError("BAD_VALUE", "quantity must be at least 1")
    kit.fetch(db, "payment_methods", "payment_id", refund_payment_id, "payment method")
    content = {"order_id": order_id, "variant_id": variant_id}
    return_id = kit.mint_id("RT", content, kit.count(db, "returns", **content), length=8)
    db.execute(
        "INSERT INTO returns VALUES (?, ?, ?, ?, ?, ?, ?)",
        (return_id, order_id, variant_id, quantity, refund_payment_id, line["unit_price"] * quantity, kit.now(db)),
    )
    return get_order_details(db, order_id)


@tool(write=True)
def exchange_item(
    db: sqlite3.Connection, order_id: str, variant_id: str, new_variant_id: str, quantity: int, payment_id: str
) -> dict:
    """Exchange units of an item of a delivered order (R06, within 30 days: R05; at most the
    units not yet returned or exchanged: R07) for another variant of the same product (R08)
    with enough stock (R02). The price difference ((new price - price paid) x quantity) is
    charged to, or refunded to, the given payment method of the customer (R03, R04).

    Args:
        order_id: The order the item belongs to.
        variant_id: The item's current variant id, as listed in the order.
        new_variant_id: The variant to exchange it for.
        quantity: Units to exchange (at least 1).
        payment_id: The customer's payment method for the price difference.
    """
    line = _line(db, order_id, variant_id)
    if quantity < 1:
        raise ToolError("BAD_VALUE", "quantity must be at least 1")
    new = kit.fetch(db, "variants", "variant_id", new_variant_id, "variant")
    kit.fetch(db, "payment_methods", "payment_id", payment_id, "payment method")
    content = {"order_id": order_id, "variant_id": variant_id}
    exchange_id = kit.mint_id("EX", content, kit.count(db, "exchanges", **content), length=8)
    db.execute(
        "INSERT INTO exchanges VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (exchange_id, order_id, variant_id, new_variant_id, quantity, payment_id,
         (new["price"] - line["unit_price"]) * quantity, kit.now(db)),
    )
    return get_order_details(db, order_id)


calculate = calculate_tool()
transfer_to_human_agents = transfer_tool("customer")
