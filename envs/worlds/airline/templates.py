"""Self-play question templates of the airline world (see `envs/templating.py`); the
world's `design.py` hook `self_play_templates()` returns `TEMPLATES`. Each is drawn from
one user's records (and the shared flights); reads state the answer the user must hear."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from envs.sql import TODAY_SQL as TODAY
from envs.sql import rows
from envs.templating import Out, Question, Template, ask, each, insist_on, pick, told

CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}


def air_user(conn: sqlite3.Connection, rng: random.Random) -> Out:
    def questions(u: dict[str, Any], uid: str) -> list[Question]:
        mine = [r["reservation_id"] for r in rows(conn, "SELECT reservation_id FROM reservations WHERE user_id = ?"
                                                        " ORDER BY reservation_id", uid)]
        options = [(f"What membership tier does my account {uid} have?", [told("membership tier", u["membership"])]),
                   (f"I'm {u['name']}, user id {uid}. What is my membership level?",
                    [told("membership tier", u["membership"])])]
        if 1 <= len(mine) <= 3:
            options.append((f"I'm {u['name']}, user id {uid}. Which reservations do I have on file?",
                            each("reservation id", mine, "id")))
        return options
    return ask(conn, rng, "SELECT * FROM users", "user_id", questions)


def air_reservation(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return ask(conn, rng, "SELECT r.*, f.flight_number FROM reservations r JOIN flights f USING (flight_id)",
               "reservation_id", lambda r, rid: [
                   (f"What is the status of my reservation {rid}?", [told("reservation status", r["status"])]),
                   (f"How many checked bags are on my booking {rid}?", [told("checked bags", r["bags"], "count")]),
                   (f"Which flight is my reservation {rid} on?", [told("flight number", r["flight_number"], "id")])])


_AHEAD = f"SELECT * FROM flights WHERE date > {TODAY}"  # a user asks about flights still to come


def air_search(conn: sqlite3.Connection, rng: random.Random) -> Out:
    f = pick(conn, rng, _AHEAD)
    if f is None:
        return None
    o, d, day = f["origin"], f["destination"], f["date"]
    found = rows(conn, "SELECT flight_number FROM flights WHERE origin = ? AND destination = ? AND date = ?"
                       " ORDER BY departure", o, d, day)
    if len(found) > 3:
        return None
    return {"origin": o, "destination": d, "date": day}, rng.choice([
        f"Which flights go from {o} to {d} on {day}?",
        f"I need to fly {o} to {d} on {day}. Which flights are there?",
    ]), each("flight number", [x["flight_number"] for x in found], "id")


def air_flight(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return ask(conn, rng, _AHEAD, "flight_id", lambda f, fid: [
        (f"Is {fid} still on schedule?", [told("flight status", f["status"])]),
        (f"How many seats are still free on {fid}?", [told("free seats", f["seats_available"], "count")]),
        (f"What does a business seat cost on {fid}?", [told("business fare", f["price_business"], "amount")])])


def air_calculate(conn: sqlite3.Connection, rng: random.Random) -> Out:
    f = pick(conn, rng, "SELECT * FROM flights")
    if f is None:
        return None
    n = rng.randint(2, 4)
    expr, value, why = rng.choice([
        (f"{n} * {f['price_economy']}", n * f["price_economy"], f"{n} economy seats at {f['price_economy']} each"),
        (f"{f['price_business']} - {f['price_economy']}", f["price_business"] - f["price_economy"],
         "the step up from economy to business"),
        (f"{n} * ({f['price_basic']} + 30)", n * (f["price_basic"] + 30),
         f"{n} basic economy seats with insurance"),
    ])
    return {"expression": expr}, rng.choice([f"What does {why} come to? That is {expr}.",
                                             f"Please work out {expr} for me: {why}."]), [
        told("amount", value, "amount")]


def air_book(conn: sqlite3.Connection, rng: random.Random) -> Out:
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
        f"I'm user {uid}. Please book {people} in {CABIN_WORDS[cabin]} on {f['flight_id']}, "
        f"paid with {pay['payment_id']}, {ins}.",
        f"Book {f['flight_id']} for me ({uid}): {CABIN_WORDS[cabin]} cabin, {people}, {ins}. "
        f"Charge {pay['payment_id']}.",
    ])


def air_cancel(conn: sqlite3.Connection, rng: random.Random) -> Out:
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


def air_bags(conn: sqlite3.Connection, rng: random.Random) -> Out:
    r = pick(conn, rng, "SELECT r.* FROM reservations r JOIN flights f USING (flight_id)"
                         " WHERE r.status = 'active' AND f.status <> 'departed' AND r.bags < 3 * r.passengers")
    if r is None:
        return None
    rid, n = r["reservation_id"], r["bags"] + 1
    bags = "1 checked bag" if n == 1 else f"{n} checked bags"
    return {"reservation_id": rid, "total_bags": n}, rng.choice([
        f"Please set my reservation {rid} to {bags} in total.",
        f"I want {bags} in total on my booking {rid}.",
    ])


def air_change(conn: sqlite3.Connection, rng: random.Random) -> Out:
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
        f"Please move my reservation {rid} to {new}.",
        f"Can you change my booking {rid} over to {new}?",
    ])


def air_transfer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    """A request the policy does not allow (compensation, a disputed fare) that the user
    insists on: the policy's case for a human agent."""
    return insist_on(conn, rng, "SELECT * FROM reservations", lambda r: [
        (f"I want compensation for the trouble with my reservation {r['reservation_id']}",
         f"User {r['user_id']} wants compensation for reservation {r['reservation_id']}"),
        (f"I think I was overcharged on my reservation {r['reservation_id']} and want the difference back",
         f"User {r['user_id']} disputes the amount paid on {r['reservation_id']}"),
    ], "If you cannot do that, I insist on a human agent; please pass this on")


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
