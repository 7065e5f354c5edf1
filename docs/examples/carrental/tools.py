"""Tools of the carrental example world. Reads return records; writes change the database
and the schema's triggers enforce the policy (a broken rule raises `<RULE_ID>: message`)."""

from __future__ import annotations

import sqlite3

from envs import sql as kit
from envs.tools import ToolError, tool


@tool()
def get_customer(db: sqlite3.Connection, customer_id: str) -> dict:
    """Get a customer: name, licence expiry date and their rentals.

    Args:
        customer_id: The customer's id, e.g. "cu_007".
    """
    c = kit.fetch(db, "customers", "customer_id", customer_id, "customer")
    c["rentals"] = kit.rows(db, "SELECT * FROM rentals WHERE customer_id = ? ORDER BY rental_id", customer_id)
    return c


@tool()
def list_cars(db: sqlite3.Connection) -> list:
    """List every car with its model, daily rate and status (available, rented, maintenance)."""
    return kit.rows(db, "SELECT * FROM cars ORDER BY car_id")


@tool(write=True)
def rent_car(db: sqlite3.Connection, customer_id: str, car_id: str, days: int) -> dict:
    """Rent a car from today for a number of days. The car must be available (R01), the
    licence valid until the return date (R02), 1 to 14 days (R03), and the customer may
    hold only one active rental (R04). Charges the daily rate times the days.

    Args:
        customer_id: The customer's id.
        car_id: The car to rent (from list_cars).
        days: Number of days, 1 to 14.
    """
    car = kit.fetch(db, "cars", "car_id", car_id, "car")
    kit.fetch(db, "customers", "customer_id", customer_id, "customer")
    content = {"customer_id": customer_id, "car_id": car_id}  # the id is minted from what the rental is
    rental_id = kit.mint_id("RN", content, kit.count(db, "rentals", **content))
    db.execute("INSERT INTO rentals VALUES (?, ?, ?, ?, ?, ?, 'active')",
               (rental_id, customer_id, car_id, kit.today(db).isoformat(), days, days * car["daily_rate"]))
    return kit.row(db, "SELECT * FROM rentals WHERE rental_id = ?", rental_id) or {}


@tool(write=True)
def extend_rental(db: sqlite3.Connection, rental_id: str, extra_days: int) -> dict:
    """Extend an active rental by some days: at most 14 days in total (R03), within the
    licence's validity (R02), not a returned rental (R05). Charges the extra days.

    Args:
        rental_id: The rental to extend.
        extra_days: Days to add (at least 1).
    """
    if extra_days < 1:
        raise ToolError("BAD_VALUE", "extra_days must be at least 1")
    kit.fetch(db, "rentals", "rental_id", rental_id, "rental")
    db.execute("UPDATE rentals SET days = days + ?, total = total + ? * (SELECT daily_rate FROM cars"
               " WHERE cars.car_id = rentals.car_id) WHERE rental_id = ?", (extra_days, extra_days, rental_id))
    return kit.row(db, "SELECT * FROM rentals WHERE rental_id = ?", rental_id) or {}


@tool(write=True)
def return_car(db: sqlite3.Connection, rental_id: str) -> dict:
    """Close a rental and make its car available again; a returned rental cannot be
    returned twice (R05).

    Args:
        rental_id: The rental to close.
    """
    kit.fetch(db, "rentals", "rental_id", rental_id, "rental")
    db.execute("UPDATE rentals SET status = 'returned' WHERE rental_id = ?", (rental_id,))
    return kit.row(db, "SELECT * FROM rentals WHERE rental_id = ?", rental_id) or {}
