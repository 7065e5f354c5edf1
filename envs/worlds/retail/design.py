"""Synthesis hooks of the retail world (see `envs/design.py` for the contract).

Every compiled rule has two boundary kinds, one step apart: at the limit (allowed) and one
step past it (rejected). On the rejected side either a nearby alternative is the goal (a
sibling variant in stock, another payment method, the refund to the original card, the
units that are left) or nothing may change (`allow_no_change`: the agent should refuse).
The goal a kind aims at is `focus["expect"]`: rows the goal state should write.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from data.records import ToolCall
from envs import sql as kit
from envs.design import Goal, Variant
from envs.state import CellChange

# The two sides of each compiled rule, in rule order: (rule, allowed kind, rejected kind).
_SIDES = [
    ("R01_CANCEL_PENDING", "cancel_pending", "cancel_processed"),
    ("R02_STOCK", "stock_exact", "stock_short"),
    ("R03_PAYMENT_OWNER", "payment_same_account", "payment_other_account"),
    ("R04_GIFT_BALANCE", "balance_exact", "balance_short"),
    ("R05_RETURN_WINDOW", "return_day_30", "return_day_31"),
    ("R06_DELIVERED_ONLY", "return_just_delivered", "return_not_delivered"),
    ("R07_ITEM_QUANTITY", "return_remaining", "return_over"),
    ("R08_SAME_PRODUCT", "exchange_same_product", "exchange_other_product"),
    ("R09_REFUND_DESTINATION", "refund_gift_card", "refund_other_card"),
    ("R10_LINE_QUANTITY", "qty_at_limit", "qty_over_limit"),
    ("R11_ADDRESS_CHANGE", "address_processed", "address_shipped"),
    ("R12_CANCELLED_FINAL", "address_pending", "address_cancelled"),
]
ALLOWED = {kind: rule for rule, kind, _ in _SIDES}
REJECTED = {kind: rule for rule, _, kind in _SIDES}
RULE_OF = {**ALLOWED, **REJECTED}
KINDS = [*ALLOWED, *REJECTED]
PERSONAS = {
    "cancel_pending": "entangled", "stock_exact": "boundary", "payment_same_account": "novice",
    "balance_exact": "boundary", "return_day_30": "entangled", "return_just_delivered": "novice",
    "return_remaining": "boundary", "exchange_same_product": "novice", "refund_gift_card": "novice",
    "qty_at_limit": "boundary", "address_processed": "novice", "address_pending": "entangled",
    "cancel_processed": "boundary", "stock_short": "mismatch", "payment_other_account": "mismatch",
    "balance_short": "boundary", "return_day_31": "boundary", "return_not_delivered": "novice",
    "return_over": "mismatch", "exchange_other_product": "mismatch", "refund_other_card": "mismatch",
    "qty_over_limit": "boundary", "address_shipped": "boundary", "address_cancelled": "mismatch",
}
STREETS = ["Birch Street", "Willow Way", "Harbor Road", "Sunset Boulevard", "Quarry Lane", "Orchard Drive"]
CITIES = ["Lakewood", "Ashford", "Brookside", "Westfield", "Millbrook"]
USER_TABLES = ("orders", "order_items", "returns", "exchanges")
NOTHING_ELSE = "; if that is not possible, you do not want anything else changed"
REASONS = {"no longer needed": "you no longer need it", "ordered by mistake": "you ordered it by mistake"}


def item_phrase(conn: sqlite3.Connection, variant_id: str) -> str:
    """A variant as a customer names it: product and options, e.g. 'the T-Shirt (color blue, size M)'."""
    v = kit.one(conn, "SELECT p.name, v.options FROM variants v JOIN products p USING (product_id)"
                   " WHERE v.variant_id = ?", variant_id)
    return f"the {v['name']} ({options_phrase(v['options'])})"


def options_phrase(options: str) -> str:
    return ", ".join(f"{k} {v}" for k, v in json.loads(options).items())


def payment_phrase(conn: sqlite3.Connection, payment_id: str, owner: str | None = None) -> str:
    """A payment method without its id: card digits, or the only gift card / PayPal of the account."""
    p = kit.one(conn, "SELECT p.*, c.email FROM payment_methods p JOIN customers c USING (customer_id)"
                   " WHERE payment_id = ?", payment_id)
    whose = "your" if owner is None or owner == p["customer_id"] else "the"
    text = {"credit_card": f"{whose} credit card ending in {p['last4']}", "gift_card": f"{whose} gift card",
            "paypal": f"{whose} PayPal account"}[p["kind"]]
    return text if whose == "your" else f"{text} on your other account ({p['email']})"


def _units(n: int) -> str:
    return f"{n} unit{'s' if n != 1 else ''}"


class _Builder:
    """Patches that put one customer's records one step from a rule's limit."""

    def __init__(self, conn: sqlite3.Connection, rng: random.Random, customer: dict[str, Any]) -> None:
        self.conn, self.rng, self.c = conn, rng, customer
        self.cid = customer["customer_id"]
        self.now = kit.now_dt(conn)
        self.patches: list[str] = []
        self.pms = kit.rows(conn, "SELECT * FROM payment_methods WHERE customer_id = ? ORDER BY payment_id", self.cid)
        self._taken: set[str] = set()

    def card(self, k: int = 0) -> dict[str, Any]:
        """The customer's k-th credit card (LookupError when there is none: the kind is skipped)."""
        cards = [p for p in self.pms if p["kind"] == "credit_card"]
        if len(cards) <= k:
            raise LookupError(f"{self.cid} has no credit card #{k + 1}")
        return cards[k]

    def gift(self) -> dict[str, Any]:
        gift = next((p for p in self.pms if p["kind"] == "gift_card"), None)
        if gift is None:
            raise LookupError(f"{self.cid} has no gift card")
        return gift

    def set_stock(self, vid: str, stock: int) -> None:
        self.patches.append(f"UPDATE variants SET stock = {stock} WHERE variant_id = {kit.q(vid)}")

    def set_balance(self, pid: str, balance: int) -> None:
        self.patches.append(f"UPDATE payment_methods SET balance = {balance} WHERE payment_id = {kit.q(pid)}")

    def new_order_id(self) -> str:
        while True:
            oid = f"#W{self.rng.randrange(1_000_000, 10_000_000)}"
            if oid not in self._taken and not self.conn.execute(
                    "SELECT 1 FROM orders WHERE order_id = ?", (oid,)).fetchone():
                self._taken.add(oid)
                return oid

    def order(self, lines: list[tuple[dict[str, Any], int]], status: str, *, days_ago: float = 0,
              delivered: datetime | None = None, payment: str | None = None) -> str:
        """Insert an order with `lines` (variant row, units) through the triggers."""
        oid = self.new_order_id()
        payment = payment or self.card()["payment_id"]
        created = (delivered or self.now) - timedelta(days=days_ago, hours=2)
        total = sum(v["price"] * q for v, q in lines)
        for v, q in lines:  # the order took these units: make sure it could have
            self.patches.append(f"UPDATE variants SET stock = MAX(stock, {q}) WHERE variant_id = {kit.q(v['variant_id'])}")
        db_status = "pending" if status == "cancelled" else status
        self.patches.append(
            "INSERT INTO orders (order_id, customer_id, payment_id, status, address, total, created_at, delivered_at)"
            f" VALUES ({kit.q(oid)}, {kit.q(self.cid)}, {kit.q(payment)}, {kit.q(db_status)}, {kit.q(self.c['address'])}, {total},"
            f" {kit.q(kit.ts(created))}, {kit.q(kit.ts(delivered) if delivered else None)})")
        for v, q in lines:
            self.patches.append(
                "INSERT INTO order_items (order_id, variant_id, quantity, unit_price) VALUES"
                f" ({kit.q(oid)}, {kit.q(v['variant_id'])}, {q}, {v['price']})")
        if status == "cancelled":
            self.patches.append(
                f"UPDATE orders SET status = 'cancelled', cancel_reason = 'no longer needed' WHERE order_id = {kit.q(oid)}")
        return oid

    def new_address(self) -> str:
        while True:
            addr = f"{self.rng.randrange(1, 999)} {self.rng.choice(STREETS)}, {self.rng.choice(CITIES)}"
            if addr != self.c["address"]:
                return addr


def _siblings(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(variant, another variant of the same product, a variant of another product)."""
    variants = kit.rows(conn, "SELECT * FROM variants ORDER BY variant_id")
    by_product: dict[str, list[dict[str, Any]]] = {}
    for v in variants:
        by_product.setdefault(v["product_id"], []).append(v)
    pid = rng.choice(sorted(p for p, vs in by_product.items() if len(vs) >= 2))
    v, s = rng.sample(by_product[pid], 2)
    other = rng.choice([x for x in variants if x["product_id"] != pid])
    return v, s, other


def _customer(conn: sqlite3.Connection, rng: random.Random, where: str = "1") -> dict[str, Any] | None:
    rows = kit.rows(conn, f"SELECT * FROM customers c WHERE {where} ORDER BY customer_id")
    return rng.choice(rows) if rows else None


def _expect(table: str, **where: Any) -> dict[str, Any]:
    return {"table": table, "where": where}


def _key(*values: Any) -> str:
    return json.dumps(list(values), separators=(",", ":"))


def variants(conn: sqlite3.Connection, rng: random.Random, n: int) -> list[Variant]:
    """`n` boundary-adjacent variants: the rules in a random order, each on a random side of
    its limit (so up to 12 variants touch 12 different rules)."""
    sides = [(a, r) for _, a, r in _SIDES]
    out: list[Variant] = []
    order: list[str] = []
    attempts = 0
    while len(out) < n and attempts < 20 * n:
        if not order:
            order = [pair[rng.random() < 0.5] for pair in rng.sample(sides, len(sides))]
        kind = order.pop(0)
        attempts += 1
        try:
            v = _MAKERS[kind](kind, conn, rng)
        except LookupError:  # the state lacks a record this kind needs (e.g. a second card)
            v = None
        if v is not None:
            out.append(v)
    return out


def _variant(kind: str, b: _Builder, focus: dict[str, Any], note: str, *, expect: list[dict[str, Any]],
             preference: dict[str, Any] | None = None, wish: str | None = None,
             unknown: list[str] | None = None) -> Variant:
    base = {"customer_id": b.cid, "email": b.c["email"], "name": f"{b.c['first_name']} {b.c['last_name']}",
            "zip": b.c["zip"], "order_ids": [], "actions": [], "expect": expect}
    pref = dict(preference or {})
    if wish is not None:
        pref["wish"] = wish
        pref["unknown"] = unknown or []
        known = {f"order {o}": o for o in focus.get("order_ids", [])[:1]}
        if focus.get("new_address"):
            known["address"] = focus["new_address"]
        pref["known"] = known
    return Variant(kind, b.patches, {**base, **focus}, [RULE_OF[kind]], PERSONAS[kind], note, pref,
                   allow_no_change=wish is not None)


# --------------------------------------------------------------------------- placing orders

def _make_buy(kind: str, conn: sqlite3.Connection, rng: random.Random) -> Variant | None:
    need = "EXISTS (SELECT 1 FROM payment_methods p WHERE p.customer_id = c.customer_id AND kind = 'gift_card')"
    customer = _customer(conn, rng, need if kind.startswith("balance") else "1")
    if customer is None:
        return None
    b = _Builder(conn, rng, customer)
    card = b.card()
    v, s, _ = _siblings(conn, rng)
    vid, sid = v["variant_id"], s["variant_id"]
    buy: dict[str, Any] = {"customer_ids": [b.cid], "variant_ids": [vid], "payment_ids": [card["payment_id"]]}
    focus: dict[str, Any] = {"buy": buy, "product_ids": [v["product_id"]]}
    if kind in ("stock_exact", "stock_short"):
        q = rng.choice([1, 2, 3]) if kind == "stock_exact" else rng.choice([2, 3])
        k = q if kind == "stock_exact" else q - 1
        b.set_stock(vid, k)
        b.set_stock(sid, max(s["stock"], q + 2))
        buy.update(variant_ids=[vid, sid], quantities=[q])
        target = vid if kind == "stock_exact" else sid
        pref = {"preferred_variant": vid} if kind == "stock_short" else {}
        return _variant(kind, b, focus, f"{vid} has {k} in stock for {q} wanted", preference=pref,
                        expect=[_expect("order_items", variant_id=target, quantity=q)])
    if kind in ("balance_exact", "balance_short"):
        gift = b.gift()
        q = rng.choice([1, 2])
        total = v["price"] * q
        balance = total if kind == "balance_exact" else total - 1
        b.set_balance(gift["payment_id"], balance)
        b.set_stock(vid, max(v["stock"], q + 2))
        buy.update(quantities=[q], payment_ids=[gift["payment_id"], card["payment_id"]])
        target = gift["payment_id"] if kind == "balance_exact" else card["payment_id"]
        pref = {"preferred_payment": gift["payment_id"]} if kind == "balance_short" else {}
        return _variant(kind, b, focus, f"gift card balance {balance} for a {total} order", preference=pref,
                        expect=[_expect("orders", customer_id=b.cid, payment_id=target)])
    if kind in ("qty_at_limit", "qty_over_limit"):
        b.set_stock(vid, max(v["stock"], 8))
        want = 5 if kind == "qty_at_limit" else 6
        buy.update(quantities=[5, 6], payment_ids=[card["payment_id"]])
        if kind == "qty_at_limit":
            return _variant(kind, b, focus, "5 units: the most one order line may hold",
                            expect=[_expect("order_items", variant_id=vid, quantity=5)])
        wish = (f"You want to order {want} units of {item_phrase(conn, vid)} in a single order, paying with "
                f"{payment_phrase(conn, card['payment_id'])}{NOTHING_ELSE}.")
        return _variant(kind, b, focus, "6 units: one past the per-line limit", expect=[], wish=wish,
                        unknown=["whether one order can hold 6 units of the same item"])
    return None


def _make_two_accounts(kind: str, conn: sqlite3.Connection, rng: random.Random) -> Variant | None:
    """The same person holds two accounts; the gift card sits on the other one (R03). The
    other account is a new customer row of the same person (name, zip, address), with an
    id of the generator's form (`first_last_NNNN`) and an email of its own."""
    customers = kit.rows(conn, "SELECT * FROM customers ORDER BY customer_id")
    if not customers:
        return None
    a = rng.choice(customers)
    b = _Builder(conn, rng, a)
    card = b.card()
    v, _, _ = _siblings(conn, rng)
    q = rng.choice([1, 2])
    taken = {int(c["customer_id"].rsplit("_", 1)[-1]) for c in customers if c["customer_id"].rsplit("_", 1)[-1].isdigit()}
    number = rng.choice([n for n in range(1000, 10000) if n not in taken])
    first, last = a["first_name"].lower(), a["last_name"].lower()
    other = {"customer_id": f"{first}_{last}_{number}", "email": f"{first}.{last}.{number}@example.net"}
    b.patches.append(f"INSERT INTO customers VALUES ({kit.q(other['customer_id'])}, {kit.q(a['first_name'])}, "
                     f"{kit.q(a['last_name'])}, {kit.q(other['email'])}, {kit.q(a['zip'])}, {kit.q(a['address'])})")
    balance = v["price"] * q + rng.randrange(0, 60, 10)
    gid = f"gift_card_x{rng.randrange(16**5):05x}"
    b.patches.append(f"INSERT INTO payment_methods VALUES ({kit.q(gid)}, {kit.q(other['customer_id'])}, 'gift_card',"
                     f" NULL, {balance})")
    b.set_stock(v["variant_id"], max(v["stock"], q + 2))
    focus = {"buy": {"customer_ids": [a["customer_id"], other["customer_id"]], "variant_ids": [v["variant_id"]],
                     "quantities": [q], "payment_ids": [gid, card["payment_id"]]},
             "product_ids": [v["product_id"]], "other_customer_id": other["customer_id"],
             "other_email": other["email"]}
    if kind == "payment_same_account":
        return _variant(kind, b, focus, "gift card on the account that orders",
                        expect=[_expect("orders", customer_id=other["customer_id"], payment_id=gid)])
    return _variant(kind, b, focus, "gift card of another account", preference={"preferred_payment": gid},
                    expect=[_expect("orders", customer_id=a["customer_id"], payment_id=card["payment_id"])])


# --------------------------------------------------------------------------- cancelling and addresses

def _make_order_change(kind: str, conn: sqlite3.Connection, rng: random.Random) -> Variant | None:
    customer = _customer(conn, rng)
    if customer is None:
        return None
    b = _Builder(conn, rng, customer)
    v, s, other = _siblings(conn, rng)
    status = {"cancel_pending": "pending", "cancel_processed": "processed", "address_processed": "processed",
              "address_shipped": "shipped", "address_pending": "pending", "address_cancelled": "cancelled"}[kind]
    days = {"pending": 0, "processed": 1, "shipped": 3, "cancelled": 1}[status]
    oid = b.order([(v, rng.choice([1, 2]))], status, days_ago=days)
    order_ids = [oid]
    if kind in ("cancel_pending", "address_pending"):  # entangled: a similar pending order stays as it is
        order_ids.append(b.order([(s, 1), (other, 1)], "pending", days_ago=0))
    focus: dict[str, Any] = {"order_ids": order_ids}
    phrase = f"your order {oid} of {item_phrase(conn, v['variant_id'])}"
    if kind.startswith("cancel"):
        focus["actions"] = ["cancel"]
        if kind == "cancel_pending":
            return _variant(kind, b, focus, "pending order: cancellable",
                            expect=[_expect("orders", order_id=oid, status="cancelled")])
        return _variant(kind, b, focus, "processed order: one step past cancellable", expect=[],
                        wish=f"You want to cancel {phrase} because you no longer need it{NOTHING_ELSE}.",
                        unknown=["whether the order can still be cancelled"])
    address = b.new_address()
    focus.update(actions=["address", "cancel"], new_address=address)
    if kind in ("address_processed", "address_pending"):
        return _variant(kind, b, focus, f"{status} order: address can change",
                        expect=[_expect("orders", order_id=oid, address=address)])
    unknown = (["whether the order has shipped"] if kind == "address_shipped"
               else ["whether the order is still active"])
    return _variant(kind, b, focus, f"{status} order: address is final", expect=[], unknown=unknown,
                    wish=f"You want to have {phrase} shipped to {address} instead{NOTHING_ELSE}.")


# --------------------------------------------------------------------------- returns and exchanges

def _make_return(kind: str, conn: sqlite3.Connection, rng: random.Random) -> Variant | None:
    two_cards = ("(SELECT COUNT(*) FROM payment_methods p WHERE p.customer_id = c.customer_id"
                 " AND kind = 'credit_card') >= 2")
    gift = "EXISTS (SELECT 1 FROM payment_methods p WHERE p.customer_id = c.customer_id AND kind = 'gift_card')"
    where = {"refund_gift_card": gift, "refund_other_card": two_cards}.get(kind, "1")
    customer = _customer(conn, rng, where)
    if customer is None:
        return None
    b = _Builder(conn, rng, customer)
    card = b.card()["payment_id"]
    v, s, other = _siblings(conn, rng)
    vid = v["variant_id"]
    now = b.now
    q = 3 if kind in ("return_remaining", "return_over") else rng.choice([1, 2])
    lines = [(v, q), (s, 1)]  # the sibling is a distractor on the same order
    if kind.startswith("exchange"):
        lines = [(v, 1), (other, 1)]
    delivered: datetime | None = {
        "return_day_30": now - timedelta(days=30), "return_day_31": now - timedelta(days=31),
        "return_just_delivered": now - timedelta(hours=1), "return_not_delivered": None,
    }.get(kind, now - timedelta(days=rng.randrange(3, 20)))
    status = "shipped" if delivered is None else "delivered"
    oid = b.order(lines, status, days_ago=3, delivered=delivered)
    focus: dict[str, Any] = {"order_ids": [oid], "actions": ["return"], "refund_payment_ids": [card],
                             "line_variant_ids": [vid, s["variant_id"]]}
    item = item_phrase(conn, vid)
    expect = [_expect("returns", order_id=oid, variant_id=vid, quantity=q, refund_payment_id=card)]
    if kind in ("return_day_30", "return_just_delivered"):
        note = "delivered exactly 30 days ago" if kind == "return_day_30" else "delivered an hour ago"
        return _variant(kind, b, focus, note, expect=expect)
    if kind in ("return_day_31", "return_not_delivered"):
        note = "delivered 31 days ago" if kind == "return_day_31" else "shipped, not yet delivered"
        unknown = ["whether the item can still be returned"]
        wish = (f"You want to return {_units(q)} of {item} from your order {oid}, with the refund going to "
                f"{payment_phrase(conn, card)}{NOTHING_ELSE}.")
        return _variant(kind, b, focus, note, expect=[], wish=wish, unknown=unknown)
    if kind in ("return_remaining", "return_over"):
        # One of the 3 units went back already: 2 are left to return.
        assert delivered is not None
        b.patches.append(f"INSERT INTO returns VALUES ('RT{rng.randrange(16**6):06X}', {kit.q(oid)}, {kit.q(vid)}, 1,"
                         f" {kit.q(card)}, {v['price']}, {kit.q(kit.ts(delivered + timedelta(hours=6)))})")
        focus.update(return_quantities=[1, 2, 3], line_variant_ids=[vid])
        expect = [_expect("returns", order_id=oid, variant_id=vid, quantity=2, refund_payment_id=card)]
        pref = {"claimed_units": 3} if kind == "return_over" else {}
        return _variant(kind, b, focus, "3 bought, 1 returned, 2 left", expect=expect, preference=pref)
    if kind in ("refund_gift_card", "refund_other_card"):
        dest = b.gift()["payment_id"] if kind == "refund_gift_card" else b.card(1)["payment_id"]
        focus.update(refund_payment_ids=[dest, card], line_variant_ids=[vid])
        if kind == "refund_gift_card":
            return _variant(kind, b, focus, "refund to the customer's gift card", expect=[
                _expect("returns", order_id=oid, variant_id=vid, quantity=q, refund_payment_id=dest)])
        return _variant(kind, b, focus, "refund wanted on a card that did not pay", expect=expect,
                        preference={"preferred_refund": dest})
    # Exchanges: a sibling variant of the same product is allowed, another product is not.
    sid = s["variant_id"]
    b.set_stock(sid, max(s["stock"], 2))
    focus.update(actions=["exchange"], line_variant_ids=[vid], new_variant_ids=[sid, other["variant_id"]],
                 exchange_payment_ids=[card], product_ids=[v["product_id"]])
    if kind == "exchange_same_product":
        return _variant(kind, b, focus, "exchange within the product",
                        expect=[_expect("exchanges", order_id=oid, variant_id=vid, new_variant_id=sid)])
    # The wanted product is one the order does not hold, so the user can name it unambiguously.
    target = rng.choice(kit.rows(conn, "SELECT * FROM variants WHERE product_id NOT IN (?, ?) ORDER BY variant_id",
                              v["product_id"], other["product_id"]))
    b.set_stock(target["variant_id"], max(target["stock"], 2))  # only the product differs
    focus["new_variant_ids"] = [target["variant_id"], sid]
    wish = (f"You want to exchange {item} from your order {oid} for {item_phrase(conn, target['variant_id'])}"
            f"{NOTHING_ELSE}.")
    return _variant(kind, b, focus, "exchange for another product", expect=[], wish=wish,
                    unknown=["whether an item can be exchanged for a different product"])


_MAKERS: dict[str, Callable[[str, sqlite3.Connection, random.Random], Variant | None]] = {
    **dict.fromkeys(["stock_exact", "stock_short", "balance_exact", "balance_short", "qty_at_limit",
                     "qty_over_limit"], _make_buy),
    **dict.fromkeys(["payment_same_account", "payment_other_account"], _make_two_accounts),
    **dict.fromkeys(["cancel_pending", "cancel_processed", "address_processed", "address_shipped",
                     "address_pending", "address_cancelled"], _make_order_change),
    **dict.fromkeys(["return_day_30", "return_day_31", "return_just_delivered", "return_not_delivered",
                     "return_remaining", "return_over", "refund_gift_card", "refund_other_card",
                     "exchange_same_product", "exchange_other_product"], _make_return),
}
assert set(_MAKERS) == set(KINDS)


# --------------------------------------------------------------------------- explorer hooks

def candidate_calls(conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
    """Write calls with arguments drawn from the database around the focus records."""
    calls: list[ToolCall] = []
    buy = focus.get("buy")
    if buy:
        for cid in buy["customer_ids"]:
            for vid in buy["variant_ids"]:
                for q in buy["quantities"]:
                    for pid in buy["payment_ids"]:
                        calls.append(ToolCall(name="place_order", arguments={
                            "customer_id": cid, "variant_ids": [vid], "quantities": [q], "payment_id": pid}))
    actions = set(focus.get("actions", []))
    for oid in focus.get("order_ids", []):
        order = kit.rows(conn, "SELECT * FROM orders WHERE order_id = ?", oid)
        if not order:
            continue
        # in the focus's order: the first is what the user asks for, and a refusal task
        # refuses the first candidate a rule stops (synthesis.logic_driven.refused_request)
        for action in focus.get("actions", []):
            if action == "cancel":
                calls.append(ToolCall(name="cancel_pending_order",
                                      arguments={"order_id": oid, "reason": "no longer needed"}))
            elif action == "address":
                calls.append(ToolCall(name="modify_order_address",
                                      arguments={"order_id": oid, "address": focus["new_address"]}))
        lines = kit.rows(conn, "SELECT * FROM order_items WHERE order_id = ? ORDER BY variant_id", oid)
        wanted = focus.get("line_variant_ids")
        for line in lines:
            vid = line["variant_id"]
            if wanted is not None and vid not in wanted:
                continue
            left = line["quantity"] - line["returned"] - line["exchanged"]
            if "return" in actions:
                for q in focus.get("return_quantities") or sorted({1, max(left, 1)}):
                    for pid in focus.get("refund_payment_ids") or [order[0]["payment_id"]]:
                        calls.append(ToolCall(name="return_item", arguments={
                            "order_id": oid, "variant_id": vid, "quantity": q, "refund_payment_id": pid}))
            if "exchange" in actions:
                for nv in focus.get("new_variant_ids", []):
                    for pid in focus.get("exchange_payment_ids") or [order[0]["payment_id"]]:
                        calls.append(ToolCall(name="exchange_item", arguments={
                            "order_id": oid, "variant_id": vid, "new_variant_id": nv, "quantity": 1,
                            "payment_id": pid}))
    return calls


def lookup_calls(focus: dict[str, Any]) -> list[ToolCall]:
    """The reads a careful agent makes first: authenticate, then the records in question."""
    calls = [ToolCall(name="find_customer_by_email", arguments={"email": focus["email"]}),
             ToolCall(name="get_customer_details", arguments={"customer_id": focus["customer_id"]})]
    if focus.get("other_email"):
        calls += [ToolCall(name="find_customer_by_email", arguments={"email": focus["other_email"]}),
                  ToolCall(name="get_customer_details", arguments={"customer_id": focus["other_customer_id"]})]
    calls += [ToolCall(name="get_order_details", arguments={"order_id": o}) for o in focus.get("order_ids", [])]
    calls += [ToolCall(name="get_product_details", arguments={"product_id": p}) for p in focus.get("product_ids", [])]
    return calls


# --------------------------------------------------------------------------- goals

def _user_rows(changes: list[CellChange]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(table, op, key, values) of the rows a user asks for; side-effect tables are left out.
    An update's values are its changed columns plus the order id from its key."""
    rows: dict[tuple[str, str], dict[str, CellChange]] = {}
    for c in changes:
        if c.table in USER_TABLES:
            rows.setdefault((c.table, c.key), {})[c.column] = c
    out = []
    for (table, key), cols in rows.items():
        op = next(iter(cols.values())).op
        values = {col: ch.after for col, ch in cols.items()}
        if op == "update":
            if table == "order_items":
                continue  # returned/exchanged counters: side effects of returns and exchanges
            values["order_id"] = json.loads(key)[0]
        out.append((table, op, key, values))
    return out


def describe(changes: list[CellChange], before: sqlite3.Connection, after: sqlite3.Connection,
             variant: Variant) -> Goal | None:
    """User-perspective projection of a change to orders, returns and exchanges (side effects
    such as stock, balances and the money ledger are implied)."""
    if any(c.op == "delete" or c.table in ("customers", "products", "meta") for c in changes):
        return None
    focus, pref = variant.focus, variant.preference
    known = {"email": focus["email"], "name": focus["name"], "zip code": focus["zip"]}
    rows = _user_rows(changes)
    parts: list[str] = []
    seen_lines: set[tuple[str, str]] = set()
    for table, op, _key, vals in rows:
        if table == "orders" and op == "insert":
            items = [r for t, o, _, r in rows if t == "order_items" and o == "insert" and r["order_id"] == vals["order_id"]]
            what = " and ".join(f"{_units(r['quantity'])} of {item_phrase(after, r['variant_id'])}" for r in items)
            text = f"order {what}"
            if vals["customer_id"] != focus["customer_id"]:
                other = kit.one(after, "SELECT email FROM customers WHERE customer_id = ?", vals["customer_id"])["email"]
                text += f" on your other account ({other})"
                known["other account email"] = other
            elif focus.get("other_email"):
                text += f" on your account {focus['email']}"
                known["other account email"] = focus["other_email"]
            text += f", paying with {payment_phrase(after, vals['payment_id'], focus['customer_id'])}"
            pv = pref.get("preferred_variant")
            if pv and all(r["variant_id"] != pv for r in items):
                text += (f" (you would prefer {item_phrase(after, pv)} if there are enough in stock;"
                         " otherwise this one is fine)")
            pp = pref.get("preferred_payment")
            if pp and pp != vals["payment_id"]:
                text += f" (you would rather pay with {payment_phrase(after, pp, focus['customer_id'])} if possible)"
            parts.append(text)
        elif table == "orders":  # update
            oid = vals["order_id"]
            known[f"order {oid}"] = oid
            if "status" in vals:
                if vals["status"] != "cancelled":
                    return None
                parts.append(f"cancel your order {oid} because {REASONS[vals['cancel_reason']]}")
            elif "address" in vals:
                parts.append(f"have your order {oid} shipped to {vals['address']} instead")
                known["address"] = vals["address"]
            else:
                return None
        elif table in ("returns", "exchanges"):
            line = (vals["order_id"], vals["variant_id"])
            if line in seen_lines:
                return None  # two changes to one item: not something a user would ask for
            seen_lines.add(line)
            oid = vals["order_id"]
            known[f"order {oid}"] = oid
            item = item_phrase(after, vals["variant_id"])
            if table == "returns":
                n = vals["quantity"]
                if pref.get("claimed_units"):
                    what = (f"all the units of {item} from your order {oid} that you still have (you think"
                            f" that is {pref['claimed_units']}; return however many can still be returned)")
                elif n > 1 and variant.kind == "return_remaining":
                    what = f"the {n} remaining units of {item} from your order {oid}"
                else:
                    what = f"{_units(n)} of {item} from your order {oid}"
                text = f"return {what}, with the refund going to {payment_phrase(after, vals['refund_payment_id'])}"
                pr = pref.get("preferred_refund")
                if pr and pr != vals["refund_payment_id"]:
                    text += f" (you would rather get it on {payment_phrase(after, pr)} if that is allowed)"
            else:
                opts = options_phrase(kit.one(after, "SELECT options FROM variants WHERE variant_id = ?",
                                           vals["new_variant_id"])["options"])
                text = (f"exchange {_units(vals['quantity'])} of {item} from your order {oid} for the one with"
                        f" {opts}, settling any price difference with {payment_phrase(after, vals['payment_id'])}")
            parts.append(text)
    if not parts:
        if not variant.allow_no_change:
            return None
        return Goal(instruction=pref["wish"], reason="a request at the edge of the policy",
                    known_info={**known, **pref.get("known", {})}, unknown_info=list(pref.get("unknown", [])))
    return Goal(instruction="You want to " + "; and ".join(parts) + ".", reason="shopping", known_info=known)


def goal_score(changes: list[CellChange], variant: Variant) -> float:
    """2 per expected row the goal writes; an untouched state scores 3 where refusing is right."""
    rows = _user_rows(changes)
    if not rows:
        return 3.0 if variant.allow_no_change else 0.0
    score = 0.0
    for exp in variant.focus.get("expect", []):
        if any(t == exp["table"] and all(vals.get(k) == v for k, v in exp["where"].items())
               for t, _, _, vals in rows):
            score += 2.0
    return score


def self_play_templates() -> dict[str, Any]:
    """Self-play (Tool-R0) question templates per tool (see `envs/templating.py`); they
    live in `templates.py` beside this file."""
    from envs.worlds.retail.templates import TEMPLATES

    return dict(TEMPLATES)
