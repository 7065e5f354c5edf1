"""Tools of the airline world. Reads return records; writes change the database and the
schema's triggers enforce the policy (a broken rule raises `<RULE_ID>: message`)."""

from __future__ import annotations

import sqlite3
from typing import Literal

from envs import sql as kit
from envs.stock_tools import calculate_tool, transfer_tool
from envs.tools import ToolError, tool

Cabin = Literal["basic_economy", "economy", "business"]
INSURANCE_PER_PASSENGER = 30
BAG_FEE = 50
FREE_BAGS = {"regular": 0, "silver": 1, "gold": 2}


def price_column(cabin: str) -> str:
    return "price_basic" if cabin == "basic_economy" else f"price_{cabin}"


def bag_fee(membership: str, passengers: int, bags: int) -> int:
    """Fee for `bags` checked bags on a reservation (R10)."""
    return BAG_FEE * max(0, bags - FREE_BAGS[membership] * passengers)


@tool()
def get_user_details(db: sqlite3.Connection, user_id: str) -> dict:
    """Get a user's profile, payment methods and reservation ids.

    Args:
        user_id: The user's id, e.g. "mia_li_3668".
    """
    user = kit.fetch(db, "users", "user_id", user_id, "user")
    user["payment_methods"] = kit.rows(
        db, "SELECT payment_id, kind, last4, balance FROM payment_methods WHERE user_id = ? ORDER BY payment_id", user_id
    )
    user["reservations"] = [
        r["reservation_id"]
        for r in kit.rows(db, "SELECT reservation_id FROM reservations WHERE user_id = ? ORDER BY reservation_id", user_id)
    ]
    return user


@tool()
def get_reservation_details(db: sqlite3.Connection, reservation_id: str) -> dict:
    """Get a reservation: flight, cabin, passengers, bags, payment, amount paid and status.

    Args:
        reservation_id: The reservation id, e.g. "R4F2K9".
    """
    res = kit.need(
        kit.row(db, "SELECT * FROM reservations WHERE reservation_id = ?", reservation_id), "reservation", reservation_id
    )
    res["flight"] = kit.row(db, "SELECT * FROM flights WHERE flight_id = ?", res["flight_id"])
    return res


@tool()
def search_flights(db: sqlite3.Connection, origin: str, destination: str, date: str) -> list:
    """Search flights between two airports on one date (YYYY-MM-DD), with status, free seats
    and prices per cabin.

    Args:
        origin: IATA code of the departure airport, e.g. "SFO".
        destination: IATA code of the arrival airport, e.g. "JFK".
        date: Travel date as YYYY-MM-DD.
    """
    return kit.rows(
        db,
        "SELECT * FROM flights WHERE origin = ? AND destination = ? AND date = ? ORDER BY departure",
        origin.upper(), destination.upper(), date,
    )


@tool()
def get_flight_details(db: sqlite3.Connection, flight_id: str) -> dict:
    """Get one flight by id (flight number and date, e.g. "HAT012-2026-05-14").

    Args:
        flight_id: The flight id.
    """
    return kit.fetch(db, "flights", "flight_id", flight_id, "flight")


def _new_reservation_id(db: sqlite3.Connection, user_id: str, flight_id: str) -> str:
    """Minted from the content (user and flight), so bookings in any order get the same ids."""
    content = {"user_id": user_id, "flight_id": flight_id}
    return kit.mint_id("R", content, kit.count(db, "reservations", **content))


@tool(write=True)
def book_reservation(
    db: sqlite3.Connection,
    user_id: str,
    flight_id: str,
    cabin: Cabin,
    passengers: int,
    payment_id: str,
    insurance: bool = False,
) -> dict:
    """Book a flight. Amount = cabin price x passengers, plus 30 per passenger with insurance.
    Requires a scheduled flight (R01), enough seats (R02), the user's own payment method
    (R03) whose gift card or certificate balance covers the amount (R04), 1-5 passengers
    (R05) and no other active reservation of the user on that flight (R11).

    Args:
        user_id: The user making the reservation.
        flight_id: The flight id, e.g. "HAT012-2026-05-14".
        cabin: One of basic_economy, economy, business.
        passengers: Number of passengers (1-5).
        payment_id: The user's payment method id.
        insurance: Whether to add travel insurance (30 per passenger).
    """
    kit.fetch(db, "users", "user_id", user_id, "user")
    flight = kit.fetch(db, "flights", "flight_id", flight_id, "flight")
    kit.fetch(db, "payment_methods", "payment_id", payment_id, "payment method")
    total = flight[price_column(cabin)] * passengers
    total += INSURANCE_PER_PASSENGER * passengers if insurance else 0
    now = kit.now(db)
    rid = _new_reservation_id(db, user_id, flight_id)
    db.execute(
        "INSERT INTO reservations (reservation_id, user_id, flight_id, cabin, passengers, payment_id,"
        " insurance, bags, total_paid, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, 'active', ?)",
        (rid, user_id, flight_id, cabin, passengers, payment_id, int(insurance), total, now),
    )
    return get_reservation_details(db, rid)


@tool(write=True)
def cancel_reservation(db: sqlite3.Connection, reservation_id: str) -> dict:
    """Cancel a reservation and refund it to the original payment method. Allowed within 24
    hours of booking, for business cabin, with insurance, or when the airline cancelled the
    flight (R06); not for cancelled reservations (R07) or departed flights (R12).

    Args:
        reservation_id: The reservation to cancel.
    """
    kit.fetch(db, "reservations", "reservation_id", reservation_id, "reservation")
    db.execute("UPDATE reservations SET status = 'cancelled' WHERE reservation_id = ?", (reservation_id,))
    return get_reservation_details(db, reservation_id)


@tool(write=True)
def update_baggage(db: sqlite3.Connection, reservation_id: str, total_bags: int) -> dict:
    """Set the number of checked bags on a reservation. At most 3 per passenger (R10); bags
    beyond the membership's free allowance cost 50 each, charged to the original payment.

    Args:
        reservation_id: The reservation to update.
        total_bags: The new total number of checked bags.
    """
    res = kit.need(
        kit.row(db, "SELECT r.*, u.membership FROM reservations r JOIN users u USING (user_id) WHERE reservation_id = ?",
             reservation_id),
        "reservation", reservation_id,
    )
    if total_bags < 0:
        raise ToolError("BAD_VALUE", "total_bags cannot be negative")
    delta = bag_fee(res["membership"], res["passengers"], total_bags) - bag_fee(
        res["membership"], res["passengers"], res["bags"]
    )
    db.execute(
        "UPDATE reservations SET bags = ?, total_paid = total_paid + ? WHERE reservation_id = ?",
        (total_bags, delta, reservation_id),
    )
    return get_reservation_details(db, reservation_id)


@tool(write=True)
def change_flight(db: sqlite3.Connection, reservation_id: str, new_flight_id: str) -> dict:
    """Move a reservation to another flight on the same route (R09), keeping the cabin.
    Not for basic economy (R08); the new flight must be scheduled (R01) with enough seats
    (R02). The fare difference is charged to or refunded to the original payment method.

    Args:
        reservation_id: The reservation to change.
        new_flight_id: The flight to move to.
    """
    res = kit.need(
        kit.row(db, "SELECT * FROM reservations WHERE reservation_id = ?", reservation_id), "reservation", reservation_id
    )
    new = kit.fetch(db, "flights", "flight_id", new_flight_id, "flight")
    old = kit.row(db, "SELECT * FROM flights WHERE flight_id = ?", res["flight_id"])
    if new_flight_id == res["flight_id"]:
        raise ToolError("NO_CHANGE", "the reservation is already on this flight")
    column = price_column(res["cabin"])
    delta = (new[column] - old[column]) * res["passengers"]
    db.execute(
        "UPDATE reservations SET flight_id = ?, total_paid = total_paid + ? WHERE reservation_id = ?",
        (new_flight_id, delta, reservation_id),
    )
    return get_reservation_details(db, reservation_id)


calculate = calculate_tool()
transfer_to_human_agents = transfer_tool("user")
