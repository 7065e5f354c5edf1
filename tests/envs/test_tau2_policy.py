"""τ²'s policy rules as checks over τ²'s database (envs/tau2_policy.py), on small stand-ins
of τ²'s records: each rule on both sides of its boundary."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace as NS

import pytest

from envs.tau2_policy import AIRLINE_NOW, check, free_bags


def _airline(cabin: str = "economy", insurance: str = "no", hours_ago: float = 48, status: str = "available",
             membership: str = "regular", passengers: int = 2, bags: int = 1) -> NS:
    created = (AIRLINE_NOW - timedelta(hours=hours_ago)).isoformat(timespec="seconds")
    res = NS(reservation_id="R1", user_id="u1", cabin=cabin, insurance=insurance, created_at=created, status=None,
             origin="JFK", destination="SFO", flight_type="one_way", total_baggages=bags, nonfree_baggages=0,
             flights=[NS(flight_number="HAT001", date="2024-05-20")], passengers=[NS()] * passengers)
    user = NS(user_id="u1", membership=membership, payment_methods={
        "credit_card_1": NS(source="credit_card", id="credit_card_1"),
        "certificate_1": NS(source="certificate", id="certificate_1")})
    flights = {"HAT001": NS(origin="JFK", destination="SFO", dates={"2024-05-20": NS(status=status),
                                                                       "2024-05-21": NS(status="available")})}
    return NS(reservations={"R1": res}, users={"u1": user}, flights=flights)


@pytest.mark.parametrize(("kw", "reason", "allowed", "rule"), [
    ({"hours_ago": 23}, "change of plan", True, "airline.cancel.eligible"),
    ({"hours_ago": 25}, "change of plan", False, "airline.cancel.not_eligible"),
    ({"cabin": "business"}, "change of plan", True, "airline.cancel.eligible"),
    ({"insurance": "yes"}, "health", True, "airline.cancel.eligible"),
    ({"insurance": "yes"}, "change of plan", False, "airline.cancel.not_eligible"),
    ({"status": "cancelled"}, "change of plan", True, "airline.cancel.eligible"),
    ({"status": "landed"}, "health", False, "airline.cancel.flown"),
])
def test_airline_cancellation_eligibility(kw: dict, reason: str, allowed: bool, rule: str) -> None:
    d = check("airline", _airline(**kw), "cancel_reservation", {"reservation_id": "R1"}, {"reason": reason})
    assert (d.allowed, d.rule) == (allowed, rule)


def test_basic_economy_flights_cannot_change_but_its_cabin_can() -> None:
    db = _airline(cabin="basic_economy")
    later = [{"flight_number": "HAT001", "date": "2024-05-21"}]
    same = [{"flight_number": "HAT001", "date": "2024-05-20"}]
    move = check("airline", db, "update_reservation_flights",
                 {"reservation_id": "R1", "cabin": "basic_economy", "flights": later, "payment_id": "credit_card_1"})
    assert (move.allowed, move.rule) == (False, "airline.flights.basic_economy")
    up = check("airline", db, "update_reservation_flights",
               {"reservation_id": "R1", "cabin": "economy", "flights": same, "payment_id": "credit_card_1"})
    assert up.allowed
    assert check("airline", _airline(), "update_reservation_flights",
                 {"reservation_id": "R1", "cabin": "economy", "flights": later, "payment_id": "credit_card_1"}).allowed
    cert = check("airline", _airline(), "update_reservation_flights",
                 {"reservation_id": "R1", "cabin": "business", "flights": same, "payment_id": "certificate_1"})
    assert (cert.allowed, cert.rule) == (False, "airline.payment.certificate")


@pytest.mark.parametrize(("membership", "cabin", "free"), [
    ("regular", "basic_economy", 0), ("regular", "business", 2), ("silver", "economy", 2), ("gold", "economy", 3),
    ("gold", "business", 4)])
def test_bag_allowance_by_membership_tier(membership: str, cabin: str, free: int) -> None:
    assert free_bags(membership, cabin) == free
    db = _airline(cabin=cabin, membership=membership, passengers=2, bags=0)
    total = 2 * free + 1  # one over the allowance of the two passengers

    def bags(nonfree: int, total: int = total) -> bool:
        return check("airline", db, "update_reservation_baggages", {
            "reservation_id": "R1", "total_baggages": total, "nonfree_baggages": nonfree,
            "payment_id": "credit_card_1"}).allowed

    assert bags(1) and not bags(0) and not bags(2)
    db.reservations["R1"].total_baggages = total + 1
    assert not bags(1)  # bags are added, never removed


def _retail(status: str, paid_with: str = "credit_card_1") -> NS:
    order = NS(order_id="#W1", user_id="u1", status=status, payment_history=[NS(payment_method_id=paid_with)],
               items=[NS(item_id="i1", product_id="p1")])
    user = NS(user_id="u1", payment_methods={"credit_card_1": NS(source="credit_card", id="credit_card_1"),
                                              "paypal_1": NS(source="paypal", id="paypal_1"),
                                              "gift_card_1": NS(source="gift_card", id="gift_card_1")})
    product = NS(variants={"i1": NS(available=True), "i2": NS(available=True), "i3": NS(available=False)})
    return NS(orders={"#W1": order}, users={"u1": user}, products={"p1": product})


def test_retail_pending_only_changes_and_delivered_only_returns() -> None:
    cancel = {"order_id": "#W1", "reason": "no longer needed"}
    assert check("retail", _retail("pending"), "cancel_pending_order", cancel).allowed
    assert not check("retail", _retail("processed"), "cancel_pending_order", cancel).allowed
    assert check("retail", _retail("pending"), "cancel_pending_order", {**cancel, "reason": "too slow"}).rule \
        == "retail.cancel.reason"
    assert check("retail", _retail("pending (items modified)"), "modify_pending_order_address", {"order_id": "#W1"}).allowed
    ret = {"order_id": "#W1", "item_ids": ["i1"], "payment_method_id": "credit_card_1"}
    assert check("retail", _retail("delivered"), "return_delivered_order_items", ret).allowed
    assert not check("retail", _retail("pending"), "return_delivered_order_items", ret).allowed
    assert check("retail", _retail("delivered"), "return_delivered_order_items",
                 {**ret, "payment_method_id": "paypal_1"}).rule == "retail.refund.method"
    assert check("retail", _retail("delivered"), "return_delivered_order_items",
                 {**ret, "payment_method_id": "gift_card_1"}).allowed
    ex = {"order_id": "#W1", "item_ids": ["i1"], "payment_method_id": "credit_card_1"}
    assert check("retail", _retail("delivered"), "exchange_delivered_order_items", {**ex, "new_item_ids": ["i2"]}).allowed
    for new in ("i3", "i1", "zz"):  # unavailable, the same item, another product's
        assert not check("retail", _retail("delivered"), "exchange_delivered_order_items",
                         {**ex, "new_item_ids": [new]}).allowed
