"""Synthesis hooks of the carrental example world (the contract is in `envs/design.py`).

Three boundary kinds, each one step from a compiled rule's limit:

- `license_exact` (R02): the licence expires exactly on the return date of the wanted
  rental; one more day is rejected;
- `extend_to_limit` (R03): an active rental of 12 days; extending by 2 reaches 14, by 3 is
  rejected;
- `car_taken` (R01): the preferred car was just rented out; a car of the same model is free.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import timedelta
from typing import Any

from data.records import ToolCall
from envs import sql as kit
from envs.design import Goal, Variant
from envs.state import CellChange

KINDS = ["license_exact", "extend_to_limit", "car_taken"]


def variants(conn: sqlite3.Connection, rng: random.Random, n: int) -> list[Variant]:
    """`n` boundary-adjacent variants, cycling through the kinds."""
    free = kit.rows(conn, "SELECT * FROM customers c WHERE NOT EXISTS (SELECT 1 FROM rentals r"
                       " WHERE r.customer_id = c.customer_id AND r.status = 'active') ORDER BY customer_id")
    cars = kit.rows(conn, "SELECT * FROM cars WHERE status = 'available' ORDER BY car_id")
    today = kit.today(conn)
    out: list[Variant] = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        if len(free) < 1 or len(cars) < 2:
            break
        cust, car, other = rng.choice(free), *rng.sample(cars, 2)
        days = rng.randrange(2, 8)
        focus: dict[str, Any] = {"customer_id": cust["customer_id"], "car_ids": [car["car_id"]], "days": [days],
                                 "rental_ids": []}
        if kind == "license_exact":
            expires = today + timedelta(days=days)
            out.append(Variant(kind, [f"UPDATE customers SET license_expires = {kit.q(expires)}"
                                      f" WHERE customer_id = {kit.q(cust['customer_id'])}"],
                               {**focus, "days": [days, days + 1]}, ["R02_LICENSE_VALID"], "boundary",
                               f"licence expires {expires}, {days} days from today"))
        elif kind == "extend_to_limit":
            rid = f"RX{rng.randrange(16 ** 4):04X}"
            patches = [f"INSERT INTO rentals VALUES ({kit.q(rid)}, {kit.q(cust['customer_id'])}, {kit.q(car['car_id'])},"
                       f" {kit.q(today)}, 12, {12 * car['daily_rate']}, 'active')",
                       f"UPDATE customers SET license_expires = {kit.q(today + timedelta(days=60))}"
                       f" WHERE customer_id = {kit.q(cust['customer_id'])}"]
            out.append(Variant(kind, patches, {**focus, "car_ids": [], "rental_ids": [rid], "extra": [2, 3]},
                               ["R03_MAX_DAYS"], "novice", f"rental {rid} runs 12 of at most 14 days",
                               preference={"wants_days": 15}))
        else:
            twin = f"{car['car_id']}b"
            patches = [f"UPDATE cars SET status = 'maintenance' WHERE car_id = {kit.q(car['car_id'])}",
                       f"INSERT INTO cars VALUES ({kit.q(twin)}, {kit.q(car['model'])}, {car['daily_rate']}, 'available')"]
            out.append(Variant(kind, patches, {**focus, "car_ids": [car["car_id"], twin, other["car_id"]]},
                               ["R01_CAR_AVAILABLE"], "mismatch", f"{car['car_id']} is in maintenance",
                               preference={"preferred_car": car["car_id"]}))
    return out


def candidate_calls(conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
    """Rentals of the focus cars for the focus day counts; extensions and returns of the
    focus rentals."""
    calls = [ToolCall(name="rent_car", arguments={"customer_id": focus["customer_id"], "car_id": c, "days": d})
             for c in focus["car_ids"] for d in focus["days"]]
    for rid in focus["rental_ids"]:
        calls += [ToolCall(name="extend_rental", arguments={"rental_id": rid, "extra_days": e})
                  for e in focus.get("extra", [1])]
        calls.append(ToolCall(name="return_car", arguments={"rental_id": rid}))
    return calls


def lookup_calls(focus: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(name="get_customer", arguments={"customer_id": focus["customer_id"]}),
            ToolCall(name="list_cars", arguments={})]


def describe(changes: list[CellChange], before: sqlite3.Connection, after: sqlite3.Connection,
             variant: Variant) -> Goal | None:
    """The user's side of a change to the rentals (the car status follows by trigger)."""
    rows: dict[str, dict[str, CellChange]] = {}
    for c in changes:
        if c.table == "rentals":
            rows.setdefault(c.key, {})[c.column] = c
    known = {"customer_id": variant.focus["customer_id"]}
    parts = []
    for key, cols in rows.items():
        op = next(iter(cols.values())).op
        if op == "insert":
            car = kit.rows(after, "SELECT * FROM cars WHERE car_id = ?", cols["car_id"].after)[0]
            text = f"rent the {car['model']} {car['car_id']} from today for {cols['days'].after} days"
            pref = variant.preference.get("preferred_car")
            if pref and pref != car["car_id"]:
                text += f" (you would rather have {pref} if it can be rented, otherwise the same model)"
            parts.append(text)
        elif op == "update" and "days" in cols:
            rid = key.strip('[]"')
            known["rental_id"] = rid
            parts.append(f"extend your rental {rid} to {cols['days'].after} days in total"
                         + (" (you hoped for 15 if allowed)" if variant.preference.get("wants_days") else ""))
        elif op == "update" and "status" in cols:
            rid = key.strip('[]"')
            known["rental_id"] = rid
            parts.append(f"return the car of your rental {rid}")
        else:
            return None
    if not parts:
        return None
    return Goal(instruction="You want to " + "; and ".join(parts) + ".", reason="a car for a trip",
                known_info=known)


def goal_score(changes: list[CellChange], variant: Variant) -> float:
    """Prefer the change that sits on the boundary the variant planted."""
    cells = {(c.table, c.column): c.after for c in changes}
    if variant.kind == "license_exact":
        return 2.0 if cells.get(("rentals", "days")) == variant.focus["days"][0] else 0.0
    if variant.kind == "extend_to_limit":
        return 2.0 if cells.get(("rentals", "days")) == 14 else 0.0
    return 2.0 if cells.get(("rentals", "car_id")) == variant.focus["car_ids"][1] else 0.0
