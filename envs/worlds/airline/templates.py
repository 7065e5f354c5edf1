"""Self-play question templates of the airline world (see `envs/templating.py`); the
world's `design.py` hook `self_play_templates()` returns `TEMPLATES`."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from envs.sql import TODAY_SQL as TODAY
from envs.sql import rows
from envs.templating import Template, pick

CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}


def air_user(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    u = pick(conn, rng, "SELECT * FROM users")
    if u is None:
        return None
    uid = u["user_id"]
    return {"user_id": uid}, rng.choice([
        f"Can you pull up the profile and payment methods of user {uid}?",
        f"I'm {u['name']}, user id {uid}. Which reservations do I have on file?",
        f"What membership tier does the account {uid} have?",
    ])


def air_reservation(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    r = pick(conn, rng, "SELECT * FROM reservations")
    if r is None:
        return None
    rid = r["reservation_id"]
    return {"reservation_id": rid}, rng.choice([
        f"What is the status of reservation {rid}?",
        f"How many checked bags are on my booking {rid}?",
        f"Please show me the details of reservation {rid}, including the flight.",
    ])


def air_search(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    f = pick(conn, rng, "SELECT * FROM flights")
    if f is None:
        return None
    o, d, day = f["origin"], f["destination"], f["date"]
    return {"origin": o, "destination": d, "date": day}, rng.choice([
        f"Which flights go from {o} to {d} on {day}?",
        f"I need to fly {o} to {d} on {day}. What are my options and prices?",
        f"Are there any seats left from {o} to {d} on {day}?",
    ])


def air_flight(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    f = pick(conn, rng, "SELECT * FROM flights")
    if f is None:
        return None
    fid = f["flight_id"]
    return {"flight_id": fid}, rng.choice([
        f"Is flight {fid} still on schedule?",
        f"How many seats are still free on flight {fid}?",
        f"What does a business seat cost on flight {fid}?",
    ])


def air_calculate(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    f = pick(conn, rng, "SELECT * FROM flights")
    if f is None:
        return None
    n = rng.randint(2, 4)
    expr = rng.choice([f"{n} * {f['price_economy']}", f"{f['price_business']} - {f['price_economy']}",
                       f"{n} * ({f['price_basic']} + 30)"])
    return {"expression": expr}, rng.choice([f"What is {expr}?", f"Please work out {expr} for me."])




def air_book(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    pay = pick(conn, rng, "SELECT * FROM payment_methods WHERE kind = 'credit_card'")
    if pay is None:
        return None
    uid = pay["user_id"]
    f = pick(conn, rng, f"SELECT * FROM flights WHERE status = 'scheduled' AND date > {TODAY}"
                         " AND seats_available >= 1 AND flight_id NOT IN (SELECT flight_id FROM reservations"
                         " WHERE user_id = ? AND status = 'active')", uid)
    if f is None:
        return None
    n = rng.randint(1, min(3, f["seats_available"]))
    cabin = rng.choice(list(CABIN_WORDS))
    insurance = rng.random() < 0.4
    args = {"user_id": uid, "flight_id": f["flight_id"], "cabin": cabin, "passengers": n,
            "payment_id": pay["payment_id"], "insurance": insurance}
    people = "1 passenger" if n == 1 else f"{n} passengers"
    ins = "with travel insurance" if insurance else "without insurance"
    return args, rng.choice([
        f"I'm user {uid}. Please book {people} in {CABIN_WORDS[cabin]} on flight {f['flight_id']}, "
        f"paid with {pay['payment_id']}, {ins}.",
        f"Book flight {f['flight_id']} for me ({uid}): {CABIN_WORDS[cabin]} cabin, {people}, {ins}. "
        f"Charge {pay['payment_id']}.",
    ])


def air_cancel(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    r = pick(conn, rng, "SELECT r.* FROM reservations r JOIN flights f USING (flight_id)"
                         f" WHERE r.status = 'active' AND f.status <> 'departed' AND f.date >= {TODAY}"
                         " AND (r.cabin = 'business' OR r.insurance = 1 OR f.status = 'cancelled'"
                         " OR r.created_at >= datetime((SELECT value FROM meta WHERE key = 'now'), '-24 hours'))")
    if r is None:
        return None
    rid = r["reservation_id"]
    return {"reservation_id": rid}, rng.choice([
        f"Please cancel my reservation {rid}.",
        f"I'd like to cancel booking {rid} and get my money back.",
    ])


def air_bags(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    r = pick(conn, rng, "SELECT r.* FROM reservations r JOIN flights f USING (flight_id)"
                         " WHERE r.status = 'active' AND f.status <> 'departed' AND r.bags < 3 * r.passengers")
    if r is None:
        return None
    rid, n = r["reservation_id"], r["bags"] + 1
    bags = "1 checked bag" if n == 1 else f"{n} checked bags"
    return {"reservation_id": rid, "total_bags": n}, rng.choice([
        f"Please set reservation {rid} to {bags} in total.",
        f"I want {bags} in total on my booking {rid}.",
    ])


def air_change(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    pairs = rows(conn, "SELECT r.reservation_id, n.flight_id AS new_id FROM reservations r"
                        " JOIN flights f ON f.flight_id = r.flight_id"
                        " JOIN flights n ON n.origin = f.origin AND n.destination = f.destination"
                        f" AND n.flight_id <> f.flight_id WHERE r.status = 'active' AND r.cabin <> 'basic_economy'"
                        f" AND f.status <> 'departed' AND f.date >= {TODAY} AND n.status = 'scheduled'"
                        f" AND n.date > {TODAY} AND n.seats_available >= r.passengers")
    if not pairs:
        return None
    p = rng.choice(pairs)
    rid, new = p["reservation_id"], p["new_id"]
    return {"reservation_id": rid, "new_flight_id": new}, rng.choice([
        f"Please move my reservation {rid} to flight {new}.",
        f"Can you change booking {rid} over to flight {new}?",
    ])


def air_transfer(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
    r = pick(conn, rng, "SELECT * FROM reservations")
    if r is None:
        return None
    summary = rng.choice([f"User {r['user_id']} wants compensation for reservation {r['reservation_id']}",
                          f"User {r['user_id']} disputes the amount paid on {r['reservation_id']}"])
    return {"summary": summary}, f'I want to talk to a human agent. Please pass this on: "{summary}".'


TEMPLATES: dict[str, Template] = {
    "get_user_details": air_user,
    "get_reservation_details": air_reservation,
    "search_flights": air_search,
    "get_flight_details": air_flight,
    "calculate": air_calculate,
    "book_reservation": air_book,
    "cancel_reservation": air_cancel,
    "update_baggage": air_bags,
    "change_flight": air_change,
    "transfer_to_human_agents": air_transfer,
}


