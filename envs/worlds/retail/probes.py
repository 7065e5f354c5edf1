"""Rule probes of the retail world: for every compiled rule a call that must be rejected with
exactly that rule id and a call one step away that must pass, on a small fixture state
(`envs.probes` runs them; the world's tests and `bench/synthesis_yield.py` use them)."""

from __future__ import annotations

from data.records import ToolCall

NOW = "2026-06-15 10:00:00"
FIXTURE = f"""
INSERT INTO meta VALUES ('now', '{NOW}');
INSERT INTO customers VALUES
 ('c1', 'Uma', 'One', 'uma@example.com', '94107', '1 Main Street, Springfield'),
 ('c2', 'Ugo', 'Two', 'ugo@example.com', '10001', '2 Side Road, Riverton');
INSERT INTO payment_methods VALUES
 ('cc1', 'c1', 'credit_card', '1111', NULL), ('cc1b', 'c1', 'credit_card', '2222', NULL),
 ('gc1', 'c1', 'gift_card', NULL, 100), ('gc4', 'c1', 'gift_card', NULL, 4), ('gc5', 'c1', 'gift_card', NULL, 5),
 ('pp1', 'c1', 'paypal', NULL, NULL), ('cc2', 'c2', 'credit_card', '3333', NULL);
INSERT INTO products VALUES ('P1', 'T-Shirt', 'apparel'), ('P2', 'Mug', 'kitchen'), ('P3', 'Sticker', 'office');
INSERT INTO variants VALUES
 ('V1a', 'P1', '{{"color": "blue", "size": "M"}}', 20, 100),
 ('V1b', 'P1', '{{"color": "red", "size": "M"}}', 25, 100),
 ('V1c', 'P1', '{{"color": "black", "size": "M"}}', 30, 100),
 ('V2a', 'P2', '{{"color": "white"}}', 12, 100),
 ('V3a', 'P3', '{{"shape": "star"}}', 1, 100);
INSERT INTO orders (order_id, customer_id, payment_id, status, address, total, created_at, delivered_at) VALUES
 ('OP', 'c1', 'cc1', 'pending', '1 Main Street, Springfield', 20, '2026-06-15 08:00:00', NULL),
 ('OPR', 'c1', 'cc1', 'processed', '1 Main Street, Springfield', 20, '2026-06-14 08:00:00', NULL),
 ('OS', 'c1', 'cc1', 'shipped', '1 Main Street, Springfield', 12, '2026-06-12 08:00:00', NULL),
 ('OD', 'c1', 'cc1', 'delivered', '1 Main Street, Springfield', 72, '2026-06-01 08:00:00', '2026-06-05 10:00:00'),
 ('O30', 'c1', 'cc1', 'delivered', '1 Main Street, Springfield', 20, '2026-05-12 08:00:00', '2026-05-16 10:00:00'),
 ('O31', 'c1', 'cc1', 'delivered', '1 Main Street, Springfield', 20, '2026-05-12 08:00:00', '2026-05-16 09:59:59'),
 ('OC', 'c1', 'gc1', 'pending', '1 Main Street, Springfield', 20, '2026-06-10 08:00:00', NULL),
 ('OD2', 'c2', 'cc2', 'delivered', '2 Side Road, Riverton', 20, '2026-06-01 08:00:00', '2026-06-05 10:00:00');
INSERT INTO order_items (order_id, variant_id, quantity, unit_price) VALUES
 ('OP', 'V1a', 1, 20), ('OPR', 'V1a', 1, 20), ('OS', 'V2a', 1, 12), ('OD', 'V1a', 3, 20), ('OD', 'V2a', 1, 12),
 ('O30', 'V1a', 1, 20), ('O31', 'V1a', 1, 20), ('OC', 'V1a', 1, 20), ('OD2', 'V1a', 1, 20);
UPDATE orders SET status = 'cancelled', cancel_reason = 'ordered by mistake' WHERE order_id = 'OC';
INSERT INTO returns VALUES ('RT0', 'OD', 'V1a', 1, 'cc1', 20, '2026-06-08 10:00:00');
UPDATE variants SET stock = 10 WHERE variant_id IN ('V1a', 'V2a');
UPDATE variants SET stock = 3 WHERE variant_id = 'V1b';
UPDATE variants SET stock = 0 WHERE variant_id = 'V1c';
UPDATE variants SET stock = 50 WHERE variant_id = 'V3a';
UPDATE payment_methods SET balance = 100 WHERE payment_id = 'gc1';
"""


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=args)


def order(variants: list[str], quantities: list[int], pay: str, customer: str = "c1") -> ToolCall:
    return call("place_order", customer_id=customer, variant_ids=variants, quantities=quantities, payment_id=pay)


def ret(oid: str, vid: str, q: int, pay: str = "cc1") -> ToolCall:
    return call("return_item", order_id=oid, variant_id=vid, quantity=q, refund_payment_id=pay)


def exch(oid: str, vid: str, new: str, q: int = 1, pay: str = "cc1") -> ToolCall:
    return call("exchange_item", order_id=oid, variant_id=vid, new_variant_id=new, quantity=q, payment_id=pay)


def address(oid: str, text: str = "9 New Road, Fairview") -> ToolCall:
    return call("modify_order_address", order_id=oid, address=text)


# rule id -> (violating probe, valid probe one step away)
PROBES = {
    "R01_CANCEL_PENDING": (call("cancel_pending_order", order_id="OPR", reason="no longer needed"),
                           call("cancel_pending_order", order_id="OP", reason="no longer needed")),
    "R02_STOCK": (order(["V1b"], [4], "cc1"), order(["V1b"], [3], "cc1")),  # 3 in stock
    "R03_PAYMENT_OWNER": (order(["V1a"], [1], "cc2"), order(["V1a"], [1], "cc1")),
    "R04_GIFT_BALANCE": (order(["V1a", "V3a"], [5, 1], "gc1"), order(["V1a"], [5], "gc1")),  # 101 vs 100
    "R05_RETURN_WINDOW": (ret("O31", "V1a", 1), ret("O30", "V1a", 1)),  # 30 days + 1 s vs exactly 30 days
    "R06_DELIVERED_ONLY": (ret("OS", "V2a", 1), ret("OD", "V2a", 1)),
    "R07_ITEM_QUANTITY": (ret("OD", "V1a", 3), ret("OD", "V1a", 2)),  # 3 bought, 1 returned
    "R08_SAME_PRODUCT": (exch("OD", "V2a", "V1a"), exch("OD", "V1a", "V1b")),
    "R09_REFUND_DESTINATION": (ret("OD", "V2a", 1, "cc1b"), ret("OD", "V2a", 1, "gc1")),
    "R10_LINE_QUANTITY": (order(["V1a"], [6], "cc1"), order(["V1a"], [5], "cc1")),
    "R11_ADDRESS_CHANGE": (address("OS"), address("OPR")),
    "R12_CANCELLED_FINAL": (address("OC"), address("OP")),
}
# The same rules on their other paths (exchanges, a second cancel).
MORE_PROBES = [
    ("R02_STOCK", exch("OD", "V1a", "V1c"), exch("OD", "V1a", "V1b", 2)),
    ("R03_PAYMENT_OWNER", exch("OD", "V1a", "V1b", pay="cc2"), exch("OD", "V1a", "V1b", pay="pp1")),
    ("R04_GIFT_BALANCE", exch("OD", "V1a", "V1b", pay="gc4"), exch("OD", "V1a", "V1b", pay="gc5")),  # owes 5
    ("R05_RETURN_WINDOW", exch("O31", "V1a", "V1b"), exch("O30", "V1a", "V1b")),
    ("R06_DELIVERED_ONLY", exch("OP", "V1a", "V1b"), exch("OD", "V1a", "V1b")),
    ("R07_ITEM_QUANTITY", exch("OD", "V1a", "V1b", 3), exch("OD", "V1a", "V1b", 2)),
    ("R08_SAME_PRODUCT", exch("OD", "V1a", "V1a"), exch("OD", "V1a", "V1b")),
    ("R09_REFUND_DESTINATION", ret("OD2", "V1a", 1, "gc1"), ret("OD2", "V1a", 1, "cc2")),  # another's gift card
    ("R12_CANCELLED_FINAL", call("cancel_pending_order", order_id="OC", reason="no longer needed"),
     call("cancel_pending_order", order_id="OP", reason="ordered by mistake")),
]
