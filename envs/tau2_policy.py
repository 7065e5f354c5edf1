"""τ²'s policy rules as checks over τ²'s database, for the τ² worlds (airline, retail).

τ²'s tools check some rules themselves (retail refuses to cancel an order that is not
pending) and leave others to the agent: airline's policy says "the API does not check that
cancellation rules are met, so the agent must make sure the rules apply before calling the
API". `check(domain, db, call, context)` decides a write the way τ²'s policy text does, over
τ²'s pydantic database (`Tau2World.db`), and names the rule that decides it:

airline
  - ``cancel.flown``: a reservation with a flown segment cannot be cancelled (transfer);
  - ``cancel.eligible``: cancellable when booked within 24 hours of now, a flight was
    cancelled by the airline, the cabin is business, or the reservation has insurance and the
    reason (``context["reason"]``) is health or weather; otherwise ``cancel.not_eligible``;
  - ``flights.basic_economy``: basic economy flights cannot be changed (a cabin change keeps
    the flights and is allowed); ``flights.same_route``: origin, destination and trip type
    stay; ``cabin.flown``: no cabin change once a segment has flown;
  - ``payment.certificate``: a change is paid by a credit or gift card of the profile;
  - ``bags.no_removal`` and ``bags.allowance``: checked bags are added, never removed, and the
    non-free ones are those above the membership tier's allowance (`free_bags`).

retail
  - ``order.pending``: only pending orders are cancelled or modified; ``cancel.reason``: the
    reason is 'no longer needed' or 'ordered by mistake';
  - ``order.delivered``: only delivered orders are returned or exchanged;
    ``refund.method``: a refund goes to the original payment method or a gift card;
  - ``exchange.same_product``: an exchange is for an available variant of the same product.

A `Decision` is allowed or not, with the rule and one sentence of why (the text a refusal
tells the user). Nothing here imports τ²; the database is whatever `Tau2World.db` returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

AIRLINE_NOW = datetime(2024, 5, 15, 15, 0, 0)  # τ²'s airline policy: "The current time is 2024-05-15 15:00:00 EST."
FREE_BAGS = {  # membership -> cabin -> free checked bags per passenger (τ²'s airline policy)
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 4},
}
CANCEL_REASONS = ("change of plan", "airline cancelled flight", "health", "weather")
INSURED_REASONS = ("health", "weather")
RETAIL_CANCEL_REASONS = ("no longer needed", "ordered by mistake")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str  # e.g. "airline.cancel.eligible"
    why: str


def _ok(rule: str, why: str) -> Decision:
    return Decision(True, rule, why)


def _no(rule: str, why: str) -> Decision:
    return Decision(False, rule, why)


# -- airline ---------------------------------------------------------------------------------------


def free_bags(membership: str, cabin: str) -> int:
    """Free checked bags per passenger for a membership tier and cabin."""
    return FREE_BAGS[membership][cabin]


def flight_status(db: Any, flight_number: str, date: str) -> str:
    flight = db.flights.get(flight_number)
    status = flight.dates.get(date) if flight is not None else None
    return str(getattr(status, "status", "unknown"))


def flown(db: Any, reservation: Any) -> bool:
    """Whether a segment of the reservation has taken off (flying or landed)."""
    return any(flight_status(db, f.flight_number, f.date) in ("flying", "landed") for f in reservation.flights)


def airline_cancelled(db: Any, reservation: Any) -> bool:
    return any(flight_status(db, f.flight_number, f.date) == "cancelled" for f in reservation.flights)


def booked_within_24h(reservation: Any, now: datetime = AIRLINE_NOW) -> bool:
    created = datetime.fromisoformat(reservation.created_at)
    return now - timedelta(hours=24) < created <= now


def cancel_decision(db: Any, reservation: Any, reason: str, now: datetime = AIRLINE_NOW) -> Decision:
    if reservation.status == "cancelled":
        return _no("airline.cancel.already", "the reservation is already cancelled")
    if flown(db, reservation):
        return _no("airline.cancel.flown", "part of the trip has already been flown, so it needs a human agent")
    if booked_within_24h(reservation, now):
        return _ok("airline.cancel.eligible", "it was booked within the last 24 hours")
    if airline_cancelled(db, reservation):
        return _ok("airline.cancel.eligible", "a flight of it was cancelled by the airline")
    if reservation.cabin == "business":
        return _ok("airline.cancel.eligible", "it is a business reservation")
    if reservation.insurance == "yes" and reason in INSURED_REASONS:
        return _ok("airline.cancel.eligible", f"it has travel insurance, which covers {reason} reasons")
    return _no("airline.cancel.not_eligible",
               "it was booked more than 24 hours ago, no flight was cancelled by the airline, it is not "
               "business class" + (" and the travel insurance does not cover this reason"
                                   if reservation.insurance == "yes" else " and it has no travel insurance"))


def _payment(db: Any, user: Any, payment_id: str) -> Decision | None:
    method = user.payment_methods.get(payment_id)
    if method is None:
        return _no("airline.payment.profile", "the payment method is not in the profile")
    if method.source == "certificate":
        return _no("airline.payment.certificate", "a travel certificate cannot pay for a change")
    return None


def airline_check(db: Any, name: str, args: dict[str, Any], context: dict[str, Any] | None = None,
                  now: datetime = AIRLINE_NOW) -> Decision:
    """The airline policy's decision on write `name(args)` over `db`."""
    context = context or {}
    reservation = db.reservations.get(str(args.get("reservation_id", "")))
    if name in ("cancel_reservation", "update_reservation_flights", "update_reservation_baggages",
                "update_reservation_passengers") and reservation is None:
        return _no("airline.reservation.unknown", "there is no such reservation")
    if name == "cancel_reservation":
        return cancel_decision(db, reservation, str(context.get("reason", "change of plan")), now)
    if reservation is not None and reservation.status == "cancelled":
        return _no("airline.reservation.cancelled", "the reservation is cancelled")
    user = db.users[reservation.user_id] if reservation is not None else None
    if name == "update_reservation_flights":
        assert reservation is not None and user is not None
        new = [(f["flight_number"], f["date"]) if isinstance(f, dict) else (f.flight_number, f.date)
               for f in args.get("flights", [])]
        same_flights = new == [(f.flight_number, f.date) for f in reservation.flights]
        if not same_flights and reservation.cabin == "basic_economy":
            return _no("airline.flights.basic_economy", "basic economy flights cannot be modified")
        if args.get("cabin") != reservation.cabin and flown(db, reservation):
            return _no("airline.cabin.flown", "the cabin cannot change once a flight of the trip has flown")
        if not same_flights:
            legs = [db.flights.get(n) for n, _ in new]
            if any(leg is None for leg in legs) or not legs:
                return _no("airline.flights.unknown", "a flight does not exist")
            if legs[0].origin != reservation.origin or (reservation.flight_type == "one_way"
                                                        and legs[-1].destination != reservation.destination):
                return _no("airline.flights.same_route", "origin, destination and trip type cannot change")
        bad = _payment(db, user, str(args.get("payment_id", "")))
        return bad or _ok("airline.flights.allowed" if not same_flights else "airline.cabin.allowed",
                          "the change is allowed")
    if name == "update_reservation_baggages":
        assert reservation is not None and user is not None
        total, nonfree = int(args.get("total_baggages", -1)), int(args.get("nonfree_baggages", -1))
        if total < reservation.total_baggages:
            return _no("airline.bags.no_removal", "checked bags can be added but not removed")
        allowance = free_bags(user.membership, reservation.cabin) * len(reservation.passengers)
        if nonfree != max(0, total - allowance):
            return _no("airline.bags.allowance", f"{allowance} of the bags are free for this reservation")
        bad = _payment(db, user, str(args.get("payment_id", "")))
        return bad or _ok("airline.bags.allowed", "adding checked bags is allowed")
    if name == "update_reservation_passengers":
        assert reservation is not None
        if len(args.get("passengers", [])) != len(reservation.passengers):
            return _no("airline.passengers.count", "the number of passengers cannot change")
        return _ok("airline.passengers.allowed", "passenger details can be changed")
    return _ok("airline.other", "no rule of the policy applies")


# -- retail ----------------------------------------------------------------------------------------


def retail_check(db: Any, name: str, args: dict[str, Any], context: dict[str, Any] | None = None) -> Decision:
    """The retail policy's decision on write `name(args)` over `db`."""
    order = db.orders.get(str(args.get("order_id", ""))) if "order_id" in args else None
    if "order_id" in args and order is None:
        return _no("retail.order.unknown", "there is no such order")
    if name in ("cancel_pending_order", "modify_pending_order_address", "modify_pending_order_items",
                "modify_pending_order_payment"):
        assert order is not None
        if order.status != "pending" and not (name != "cancel_pending_order" and order.status.startswith("pending")):
            return _no("retail.order.pending", f"the order is {order.status}, and only pending orders can be "
                                               + ("cancelled" if name == "cancel_pending_order" else "modified"))
        if name == "cancel_pending_order" and args.get("reason") not in RETAIL_CANCEL_REASONS:
            return _no("retail.cancel.reason", "the reason must be 'no longer needed' or 'ordered by mistake'")
        return _ok("retail.order.pending", "the order is pending")
    if name in ("return_delivered_order_items", "exchange_delivered_order_items"):
        assert order is not None
        if order.status != "delivered":
            return _no("retail.order.delivered", f"the order is {order.status}, and only delivered orders can be "
                                                 + ("returned" if name.startswith("return") else "exchanged"))
        user = db.users[order.user_id]
        method = user.payment_methods.get(str(args.get("payment_method_id", "")))
        if method is None:
            return _no("retail.payment.profile", "the payment method is not in the profile")
        if name.startswith("return") and method.source != "gift_card" and \
                method.id != order.payment_history[0].payment_method_id:
            return _no("retail.refund.method", "a refund goes to the original payment method or a gift card")
        if name.startswith("exchange"):
            for old, new in zip(args.get("item_ids", []), args.get("new_item_ids", []), strict=False):
                item = next((i for i in order.items if i.item_id == old), None)
                product = db.products.get(item.product_id) if item is not None else None
                variant = product.variants.get(new) if product is not None else None
                if variant is None or not variant.available or new == old:
                    return _no("retail.exchange.same_product",
                               "an item is exchanged for another available option of the same product")
        return _ok("retail.order.delivered", "the order is delivered")
    return _ok("retail.other", "no rule of the policy applies")


def check(domain: str, db: Any, name: str, args: dict[str, Any], context: dict[str, Any] | None = None) -> Decision:
    """The policy's decision on the write `name(args)` in τ² `domain` over `db`."""
    if domain == "airline":
        return airline_check(db, name, args, context)
    if domain == "retail":
        return retail_check(db, name, args, context)
    raise ValueError(f"no policy checks for τ² domain {domain!r}")
