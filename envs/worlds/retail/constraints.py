"""Constraint sets of the retail world (CoVe, methods.md §2); the hooks are described in
`envs/constraints.py`, the shared helpers in `envs/cove.py`.

A set is about one customer (who authenticates by email, never by id): one request out of
placing an order (a variant in stock, a quantity, a payment method that covers it),
cancelling a pending order (with a reason), changing the address of a pending or processed
order, returning units of an item of an order delivered within the window (refund to the
original method or a gift card) or exchanging them for a sibling variant in stock; with
probability `p_extra` a second request on another order. With `kind` (constraint-guided
synthesis passes ``KINDS`` in turn) the first request is of that kind; "order_address"
depends on the order itself (`envs.cove.ON_NEW`): place an order, then have that new order
shipped to another address. A set is kept only if its writes succeed in every order. Descriptions replace order, item, variant and payment ids; each
matches exactly one record of its scope (orders and payment methods: the customer's;
items: the order's lines; variants: the catalog, or the product's variants).
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from datetime import datetime, timedelta
from typing import Any

from data.records import ToolCall
from envs import cove
from envs import sql as kit
from envs.constraints import Constraint, Fuzzification, FuzzyRef, record_key
from envs.design import Goal

WORLD = "retail"
IDENTITY_FIELDS: tuple[str, ...] = ()  # the customer gives an email; the customer id stays hidden
BASE_KINDS = ["order", "cancel", "address", "return", "exchange"]
DEPENDENT = ["order_address"]  # an order, then a request on that new order
KINDS = [*BASE_KINDS, *DEPENDENT]
# The customer's own reason for shipping the order they are placing somewhere else.
NEW_ORDER_ADDRESS_REASONS = ["you will be staying there when it arrives", "it is a present for whoever lives there",
                             "nobody will be home at your usual address that week", "you are moving there shortly",
                             "someone is always in at that address to sign for parcels"]
REASONS = {"no longer needed": "you no longer need it", "ordered by mistake": "you ordered it by mistake"}
STREETS = ["Birch Street", "Willow Way", "Harbor Road", "Sunset Boulevard", "Quarry Lane", "Orchard Drive"]
CITIES = ["Lakewood", "Ashford", "Brookside", "Westfield", "Millbrook"]
WINDOW_DAYS = 30


# -- entities (plain records; the descriptions' attributes refer to their keys) -------------

def _variants(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    out = []
    for r in kit.rows(conn, "SELECT v.*, p.name AS product FROM variants v JOIN products p USING (product_id)"):
        out.append({**json.loads(r["options"]), "id": r["variant_id"], "product": r["product"],
                    "product_id": r["product_id"], "price": r["price"], "stock": r["stock"]})
    return out


def _orders(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    products: dict[str, set[str]] = {}
    for r in kit.rows(conn, "SELECT i.order_id, p.name FROM order_items i JOIN variants v USING (variant_id)"
                             " JOIN products p USING (product_id)"):
        products.setdefault(r["order_id"], set()).add(r["name"])
    return [{"id": o["order_id"], "customer_id": o["customer_id"], "status": o["status"],
             "products": sorted(products.get(o["order_id"], ())), "date": o["created_at"][:10]}
            for o in kit.rows(conn, "SELECT * FROM orders")]


def _lines(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    out = []
    for r in kit.rows(conn, "SELECT i.*, v.options, p.name AS product FROM order_items i"
                             " JOIN variants v USING (variant_id) JOIN products p USING (product_id)"):
        out.append({**json.loads(r["options"]), "id": r["variant_id"], "order_id": r["order_id"],
                    "product": r["product"]})
    return out


def _payments(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    return [{**p, "id": p["payment_id"]} for p in kit.rows(conn, "SELECT * FROM payment_methods")]


ENTITIES = {"variant": _variants, "order": _orders, "line": _lines, "payment": _payments}


def matching_ids(conn: sqlite3.Connection, entity: str, where: dict[str, Any]) -> list[str]:
    """Ids of the `entity` records whose attributes equal every value in `where`."""
    return cove.matching_ids_in(ENTITIES, conn, entity, where)


def _one(conn: sqlite3.Connection, entity: str, record_id: str) -> dict[str, Any]:
    return cove.one(ENTITIES, conn, entity, record_id)


# -- sampling ----------------------------------------------------------------------------

def _covers(payment: dict[str, Any], amount: int) -> bool:
    return payment["balance"] is None or payment["balance"] >= amount


def _in_window(conn: sqlite3.Connection) -> str:
    """Oldest delivery time still inside the return window (R05)."""
    return (datetime.fromisoformat(kit.now(conn)) - timedelta(days=WINDOW_DAYS)).strftime("%Y-%m-%d %H:%M:%S")


def _open_lines(conn: sqlite3.Connection, customer_id: str) -> list[dict[str, Any]]:
    """Lines of the customer's orders delivered inside the window with units left (R05-R07)."""
    return kit.rows(conn, "SELECT i.*, v.product_id, v.price, o.payment_id AS order_payment FROM order_items i"
                           " JOIN orders o USING (order_id) JOIN variants v USING (variant_id)"
                           " WHERE o.customer_id = ? AND o.status = 'delivered' AND o.delivered_at >= ?"
                           " AND i.quantity - i.returned - i.exchanged >= 1 ORDER BY i.order_id, i.variant_id",
                     customer_id, _in_window(conn))


def _sample(kind: str, conn: sqlite3.Connection, rng: random.Random, cid: str,
            avoid: set[str]) -> Constraint | None:
    """One constraint of `kind` for customer `cid` on records outside `avoid` (ids)."""
    pays = kit.rows(conn, "SELECT * FROM payment_methods WHERE customer_id = ? ORDER BY payment_id", cid)
    if kind == "order":
        variants = [v for v in _variants(conn) if v["stock"] >= 1 and v["id"] not in avoid]
        if not variants:
            return None
        v = rng.choice(sorted(variants, key=lambda x: x["id"]))
        q = rng.randint(1, min(3, v["stock"]))
        ok = [p for p in pays if _covers(p, v["price"] * q)]
        if not ok:
            return None
        return Constraint(kind="order", fields={"customer_id": cid, "variant_id": v["id"], "quantity": q,
                                                "payment_id": rng.choice(ok)["payment_id"]})
    if kind in ("cancel", "address"):
        statuses = ("pending",) if kind == "cancel" else ("pending", "processed")
        orders = [o for o in kit.rows(conn, "SELECT * FROM orders WHERE customer_id = ? ORDER BY order_id", cid)
                  if o["status"] in statuses and o["order_id"] not in avoid]
        if not orders:
            return None
        o = rng.choice(orders)
        if kind == "cancel":
            return Constraint(kind="cancel", fields={"customer_id": cid, "order_id": o["order_id"],
                                                     "reason": rng.choice(list(REASONS))})
        return Constraint(kind="address", fields={"customer_id": cid, "order_id": o["order_id"],
                                                  "address": _new_address(rng, o["address"])})
    lines = [ln for ln in _open_lines(conn, cid) if ln["order_id"] not in avoid]
    rng.shuffle(lines)
    for ln in lines:
        left = ln["quantity"] - ln["returned"] - ln["exchanged"]
        q = rng.randint(1, left)
        if kind == "return":
            gifts = [p["payment_id"] for p in pays if p["kind"] == "gift_card" and p["payment_id"] != ln["order_payment"]]
            refund = ln["order_payment"] if not gifts or rng.random() < 0.6 else gifts[0]
            return Constraint(kind="return", fields={"customer_id": cid, "order_id": ln["order_id"],
                                                     "variant_id": ln["variant_id"], "quantity": q,
                                                     "refund_payment_id": refund})
        siblings = kit.rows(conn, "SELECT * FROM variants WHERE product_id = ? AND variant_id <> ? AND stock >= ?"
                                   " ORDER BY variant_id", ln["product_id"], ln["variant_id"], q)
        siblings = [s for s in siblings if s["variant_id"] not in avoid]
        if not siblings:
            continue
        new = rng.choice(siblings)
        diff = (new["price"] - ln["unit_price"]) * q
        ok = [p for p in pays if diff <= 0 or _covers(p, diff)]
        if not ok:
            continue
        return Constraint(kind="exchange", fields={"customer_id": cid, "order_id": ln["order_id"],
                                                   "variant_id": ln["variant_id"], "new_variant_id": new["variant_id"],
                                                   "quantity": q, "payment_id": rng.choice(ok)["payment_id"]})
    return None


def _touched(c: Constraint) -> set[str]:
    return {str(v) for k, v in c.fields.items() if k.endswith("_id") and k not in ("customer_id",)
            and not k.startswith("payment") and not k.startswith("refund")}


def _new_address(rng: random.Random, current: str) -> str:
    address = current
    while address == current:
        address = f"{rng.randrange(1, 999)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"
    return address


def _on_new_order(conn: sqlite3.Connection, rng: random.Random, cid: str, kind: str) -> list[Constraint]:
    """An order for customer `cid`, then a new shipping address for that order (module
    docstring): the order id its write mints, and an address change that succeeds on it."""
    opening = _sample("order", conn, rng, cid, set())
    if opening is None:
        return []
    oid = cove.created_id(conn, WORLD, [write_call(opening)], "orders", "order_id")
    if oid is None:
        return []
    with cove.applied(conn, WORLD, [write_call(opening)]) as ok:
        current = kit.one(conn, "SELECT address FROM orders WHERE order_id = ?", oid)["address"] if ok else None
    if current is None:
        return []
    out = [opening, Constraint(kind="address", fields={"customer_id": cid, "order_id": oid,
                                                       "address": _new_address(rng, current), cove.ON_NEW: 0})]
    return out  # kept if its writes succeed in this order (cove.constraint_sampler)


sample_constraints = cove.constraint_sampler(
    WORLD, lambda conn: [r["customer_id"] for r in kit.rows(conn, "SELECT customer_id FROM customers ORDER BY customer_id")],
    BASE_KINDS, DEPENDENT, _on_new_order, _sample, _touched, lambda c: write_call(c),  # write_call: below
    owner="customer", other="another order or variant")


# -- fuzzification -------------------------------------------------------------------------

def _options(where: dict[str, Any], skip: tuple[str, ...]) -> str:
    return ", ".join(f"{k} {v}" for k, v in where.items() if k not in skip)


def variant_text(where: dict[str, Any]) -> str:
    opts = _options(where, ("product", "product_id"))
    return f"the {where['product']}" + (f" with {opts}" if opts else "")


def order_text(where: dict[str, Any]) -> str:
    text = "your " + (f"{where['status']} " if "status" in where else "") + "order"
    return cove.worded(text, where, products=lambda ps: " with the " + " and the ".join(ps),
                       date=lambda d: f" placed on {cove.date_words(d)}")


def line_text(where: dict[str, Any]) -> str:
    opts = _options(where, ("product", "order_id"))
    return f"the {where['product']}" + (f" ({opts})" if opts else "")


def payment_text(where: dict[str, Any]) -> str:
    kind = where["kind"]
    if kind == "credit_card":
        return "your credit card" + (f" ending in {where['last4']}" if "last4" in where else "")
    if kind == "gift_card":
        return "your gift card" + (f" with a balance of {where['balance']}" if "balance" in where else "")
    return "your PayPal account"


def _option_keys(record: dict[str, Any], skip: set[str]) -> list[str]:
    return [k for k in record if k not in skip]


_VARIANT_META = {"id", "product", "product_id", "price", "stock"}


def describe_variant(conn: sqlite3.Connection, rng: random.Random, slot: str, variant_id: str,
                     current: str | None = None) -> FuzzyRef:
    """The product, then its options one by one (options that differ from `current`, the
    variant being exchanged, first), among all variants of the catalog."""
    rec = _one(conn, "variant", variant_id)
    keys = _option_keys(rec, _VARIANT_META)
    rng.shuffle(keys)
    if current is not None:
        cur = _one(conn, "variant", current)
        keys.sort(key=lambda k: cur.get(k) == rec[k])
    ladder = cove.cumulative({"product": rec["product"]}, rec, keys)
    ladder = [{"product": rec["product"]}, *ladder] if current is None else ladder
    return cove.unique_ref(slot, "variant", variant_id, ladder, variant_text,
                           lambda w: matching_ids(conn, "variant", w))


def describe_order(conn: sqlite3.Connection, rng: random.Random, slot: str, order_id: str) -> FuzzyRef:
    """Its status or its products first, then the other, then the date (among the customer's orders)."""
    rec = _one(conn, "order", order_id)
    first = rng.choice(["status", "products"])
    order = [first, "products" if first == "status" else "status", "date"]
    return cove.unique_ref(slot, "order", order_id, cove.cumulative({"customer_id": rec["customer_id"]}, rec, order),
                           order_text, lambda w: matching_ids(conn, "order", w))


def describe_line(conn: sqlite3.Connection, slot: str, order_id: str, variant_id: str) -> FuzzyRef:
    """The product, then its options (among the order's lines)."""
    rec = next(r for r in _lines(conn) if r["order_id"] == order_id and r["id"] == variant_id)
    ladder = [{"order_id": order_id, "product": rec["product"]},
              *cove.cumulative({"order_id": order_id, "product": rec["product"]}, rec,
                               _option_keys(rec, {"id", "order_id", "product"}))]
    return cove.unique_ref(slot, "line", variant_id, ladder, line_text, lambda w: matching_ids(conn, "line", w))


def describe_payment(conn: sqlite3.Connection, slot: str, payment_id: str) -> FuzzyRef:
    """The kind, then the card's last four digits or the gift card's balance (among the customer's methods)."""
    rec = _one(conn, "payment", payment_id)
    extra = {"credit_card": ["last4"], "gift_card": ["balance"]}.get(rec["kind"], [])
    return cove.unique_ref(slot, "payment", payment_id,
                           cove.cumulative({"customer_id": rec["customer_id"]}, rec, ["kind", *extra]),
                           payment_text, lambda w: matching_ids(conn, "payment", w))


def fuzzify(conn: sqlite3.Connection, constraints: list[Constraint], rng: random.Random) -> Fuzzification:
    """Unique descriptions for every id in the set, keyed "c<i>.<field>"; raises
    `FuzzifyError` when the most specific description still matches two or more records."""

    def variant(s: str, v: str) -> FuzzyRef:
        return describe_variant(conn, rng, s, v)

    def payment(s: str, v: str) -> FuzzyRef:
        return describe_payment(conn, s, v)

    def fields(c: Constraint) -> dict[str, cove.Describe] | None:
        if c.kind == "order":
            return {"variant_id": variant, "payment_id": payment}
        if cove.ON_NEW in c.fields:
            return {}  # the order the customer is placing: "that new order"
        if c.kind not in ("cancel", "address", "return", "exchange"):
            return None
        found: dict[str, cove.Describe] = {"order_id": lambda s, v: describe_order(conn, rng, s, v)}
        if c.kind in ("return", "exchange"):
            found["variant_id"] = lambda s, v: describe_line(conn, s, c["order_id"], v)
        if c.kind == "return":
            found["refund_payment_id"] = payment
        if c.kind == "exchange":
            found["new_variant_id"] = lambda s, v: describe_variant(conn, rng, s, v, current=c["variant_id"])
            found["payment_id"] = payment
        return found

    return cove.fuzzification(constraints, fields)


def _units(n: int) -> str:
    return f"{n} unit{'s' if n != 1 else ''}"


def goal(constraints: list[Constraint], fuzzy: dict[str, str]) -> Goal:
    """The user's goal from the descriptions (never the ids); what the customer
    authenticates with comes from `known_identity`."""
    parts: list[str] = []
    known = cove.KnownInfo({})
    unknown: set[str] = set()
    for _, c, f in known.requests(constraints, fuzzy):
        if c.kind == "order":
            parts.append(f"order {_units(c['quantity'])} of {f['variant_id']}, paying with {f['payment_id']}")
            known.update({"item": cove.mine(f["variant_id"]), "quantity": str(c["quantity"]),
                          "payment method": cove.mine(f["payment_id"])})
            unknown |= {"the variant id", "the payment method id", "the price"}
        elif c.kind == "cancel":
            parts.append(f"cancel {f['order_id']} because {REASONS[c['reason']]}")
            known.update({"order": cove.mine(f["order_id"]), "reason": c["reason"]})
            unknown.add("the order id")
        elif c.kind == "address" and cove.ON_NEW in c.fields:
            bank = NEW_ORDER_ADDRESS_REASONS
            why = bank[int(hashlib.sha256(f"{c['order_id']}|{c['address']}".encode()).hexdigest(), 16) % len(bank)]
            parts.append(f"have that new order shipped to {c['address']} rather than your usual address, since {why}")
            known["address for the new order"] = c["address"]
        elif c.kind == "address":
            parts.append(f"have {f['order_id']} shipped to {c['address']} instead")
            known.update({"order": cove.mine(f["order_id"]), "address": c["address"]})
            unknown.add("the order id")
        elif c.kind == "return":
            parts.append(f"return {_units(c['quantity'])} of {f['variant_id']} from {f['order_id']}, with the refund"
                         f" going to {f['refund_payment_id']}")
            known.update({"order": cove.mine(f["order_id"]), "item": cove.mine(f["variant_id"]),
                          "refund to": cove.mine(f["refund_payment_id"])})
            unknown |= {"the order id", "the variant id"}
        elif c.kind == "exchange":
            parts.append(f"exchange {_units(c['quantity'])} of {f['variant_id']} from {f['order_id']} for"
                         f" {f['new_variant_id']}, settling any price difference with {f['payment_id']}")
            known.update({"order": cove.mine(f["order_id"]), "item": cove.mine(f["variant_id"]),
                          "new item": cove.mine(f["new_variant_id"]), "payment method": cove.mine(f["payment_id"])})
            unknown |= {"the order id", "the variant ids"}
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
    return cove.wants(parts, "shopping", known, unknown)


def known_identity(conn: sqlite3.Connection, constraints: list[Constraint]) -> dict[str, str]:
    """What the customer authenticates with (R13): email, name and zip code."""
    c = kit.rows(conn, "SELECT * FROM customers WHERE customer_id = ?", constraints[0]["customer_id"])[0]
    return {"email": c["email"], "name": f"{c['first_name']} {c['last_name']}", "zip code": c["zip"]}


# -- reference and checks ------------------------------------------------------------------

def _order_call(c: Constraint) -> ToolCall:
    f = c.fields
    return ToolCall(name="place_order", arguments={"customer_id": f["customer_id"], "variant_ids": [f["variant_id"]],
                                                   "quantities": [f["quantity"]], "payment_id": f["payment_id"]})


# kind -> the write tool and its arguments (each the constraint's field of that name), or the call.
_WRITES: cove.Calls = {
    "order": _order_call,
    "cancel": ("cancel_pending_order", "order_id", "reason"),
    "address": ("modify_order_address", "order_id", "address"),
    "return": ("return_item", "order_id", "variant_id", "quantity", "refund_payment_id"),
    "exchange": ("exchange_item", "order_id", "variant_id", "new_variant_id", "quantity", "payment_id"),
}


def write_call(c: Constraint) -> ToolCall:
    """The one write that satisfies `c`."""
    return cove.call_of(c, _WRITES)


def reference_calls(conn: sqlite3.Connection, constraints: list[Constraint]) -> list[ToolCall]:
    """Authenticate and look the records up (as R13 asks), then one write per constraint."""

    def reads(c: Constraint) -> list[ToolCall]:
        if c.kind == "order":
            product = _one(conn, "variant", c["variant_id"])["product_id"]
            return [ToolCall(name="get_product_details", arguments={"product_id": product})]
        if cove.ON_NEW in c.fields:  # a new order's details come with its own write's result
            return []
        return [ToolCall(name="get_order_details", arguments={"order_id": c["order_id"]})]

    email = known_identity(conn, constraints)["email"]
    account = [ToolCall(name="find_customer_by_email", arguments={"email": email}),
               ToolCall(name="get_customer_details", arguments={"customer_id": constraints[0]["customer_id"]})]
    return cove.reference_calls(constraints, account, reads, write_call)


_order_row = kit.lookup("orders", "order_id")


def check(conn_initial: sqlite3.Connection, conn_final: sqlite3.Connection,
          constraints: list[Constraint]) -> tuple[list[bool], list[dict[str, Any]]]:
    """Each constraint on the final state; a detail names the satisfying record.

    - order: a new pending order of the customer, paid with that method, holding exactly
      that variant in that quantity;
    - cancel: the order was pending and is cancelled now, for that reason;
    - address: the order ships to the new address now (and did not before; for the order
      being placed, ``on_new``: the order that satisfied the order request ships there);
    - return / exchange: a new return (exchange) of exactly those units of that line, with
      that refund method (new variant and payment method).
    """
    satisfied: list[bool] = []
    details: list[dict[str, Any]] = []
    records: list[str | None] = []
    for c in constraints:
        f = c.fields
        table, record = "orders", None
        if c.kind == "order":
            for oid in cove.new_ids(conn_initial, conn_final, "orders", "order_id",
                            {"customer_id": f["customer_id"], "payment_id": f["payment_id"], "status": "pending"}):
                items = conn_final.execute("SELECT variant_id, quantity FROM order_items WHERE order_id = ?",
                                           (oid,)).fetchall()
                if [tuple(i) for i in items] == [(f["variant_id"], f["quantity"])]:
                    record = oid
                    break
            reason = "ordered" if record else "no new order with exactly that item, quantity and payment method"
        elif c.kind == "address" and cove.ON_NEW in f:
            oid = cove.target(c, "order_id", records)
            after = _order_row(conn_final, oid) if oid else None
            ok = bool(after and after["address"] == f["address"])
            record = oid if ok else None
            reason = "address changed" if ok else (f"ships to {after['address']}" if after else "the new order was not placed")
        elif c.kind in ("cancel", "address"):
            before, after = _order_row(conn_initial, f["order_id"]), _order_row(conn_final, f["order_id"])
            if c.kind == "cancel":
                ok = bool(before and after and before["status"] == "pending" and after["status"] == "cancelled"
                          and after["cancel_reason"] == f["reason"])
                reason = "cancelled" if ok else (f"status {after['status']}, reason {after['cancel_reason']}"
                                                 if after else "missing")
            else:
                ok = bool(before and after and after["address"] == f["address"] != before["address"])
                reason = "address changed" if ok else (f"ships to {after['address']}" if after else "missing")
            record = f["order_id"] if ok else None
        elif c.kind == "return":
            table = "returns"
            new = cove.new_ids(conn_initial, conn_final, "returns", "return_id",
                       {k: f[k] for k in ("order_id", "variant_id", "quantity", "refund_payment_id")})
            record = new[0] if new else None
            reason = "returned" if record else "no new return of those units with that refund method"
        elif c.kind == "exchange":
            table = "exchanges"
            new = cove.new_ids(conn_initial, conn_final, "exchanges", "exchange_id",
                       {k: f[k] for k in ("order_id", "variant_id", "new_variant_id", "quantity", "payment_id")})
            record = new[0] if new else None
            reason = "exchanged" if record else "no new exchange of those units for that variant and payment method"
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
        satisfied.append(record is not None)
        records.append(record)
        details.append({"kind": c.kind, "satisfied": record is not None, "reason": reason,
                        "record": {"table": table, "key": record_key([record])} if record else None})
    return satisfied, details


# -- known-bad variants for the verifier audit --------------------------------------------------

def audit_mutations(conn: sqlite3.Connection, constraints: list[Constraint],
                    reference: list[ToolCall]) -> dict[str, list[ToolCall]]:
    """Variants of `reference` that must fail and whose writes all succeed: a wrong item
    (another variant, line or new variant), a wrong payment or refund method, a wrong
    quantity, a wrong target order, one extra (unrelated, successful) order. A case is left
    out when the state offers no such call."""
    audit = cove.Audit(conn, WORLD, reference)
    offer = audit.offer
    touched = set().union(*(_touched(c) for c in constraints))
    for c, swap in audit.writes(constraints, write_call):
        f = c.fields
        pays = [p["payment_id"] for p in kit.rows(conn, "SELECT payment_id FROM payment_methods WHERE"
                                                         " customer_id = ? ORDER BY payment_id", f["customer_id"])]
        if c.kind == "order":
            rec = _one(conn, "variant", f["variant_id"])
            others = sorted((v for v in _variants(conn) if v["id"] not in touched and v["stock"] >= f["quantity"]),
                            key=lambda v: (v["product_id"] != rec["product_id"], v["id"]))
            for v in others[:4]:
                offer("wrong_item", swap(variant_ids=[v["id"]]))
            for p in pays:
                if p != f["payment_id"]:
                    offer("wrong_payment", swap(payment_id=p))
            for q in (f["quantity"] + 1, f["quantity"] - 1):
                if q >= 1:
                    offer("wrong_quantity", swap(quantities=[q]))
        elif c.kind in ("cancel", "address"):
            statuses = ("pending",) if c.kind == "cancel" else ("pending", "processed")
            for o in kit.rows(conn, "SELECT order_id, status FROM orders WHERE customer_id = ? ORDER BY order_id",
                               f["customer_id"]):
                if o["status"] in statuses and o["order_id"] not in touched:
                    offer("wrong_target", swap(order_id=o["order_id"]))
            if c.kind == "cancel":
                offer("wrong_reason", swap(reason=next(r for r in REASONS if r != f["reason"])))
        elif c.kind in ("return", "exchange"):
            for ln in _open_lines(conn, f["customer_id"]):
                if (ln["order_id"], ln["variant_id"]) != (f["order_id"], f["variant_id"]):
                    offer("wrong_item", swap(order_id=ln["order_id"], variant_id=ln["variant_id"]))
            key = "refund_payment_id" if c.kind == "return" else "payment_id"
            for p in pays:
                if p != f[key]:
                    offer("wrong_payment", swap(**{key: p}))
            for q in (f["quantity"] + 1, f["quantity"] - 1):
                if q >= 1:
                    offer("wrong_quantity", swap(quantity=q))
            if c.kind == "exchange":
                product = _one(conn, "variant", f["variant_id"])["product_id"]
                for v in _variants(conn):
                    if v["product_id"] == product and v["id"] not in (f["variant_id"], f["new_variant_id"]):
                        offer("wrong_new_variant", swap(new_variant_id=v["id"]))
    card = next((p["payment_id"] for p in kit.rows(conn, "SELECT payment_id, kind FROM payment_methods WHERE"
                                                          " customer_id = ? ORDER BY payment_id",
                                                    constraints[0]["customer_id"]) if p["kind"] == "credit_card"), None)
    if card is not None:
        spare = [v for v in _variants(conn) if v["id"] not in touched and v["stock"] >= 2]
        for v in spare[-3:]:
            offer("extra_write", [*reference, ToolCall(name="place_order", arguments={
                "customer_id": constraints[0]["customer_id"], "variant_ids": [v["id"]], "quantities": [1],
                "payment_id": card})])
    return audit.out
