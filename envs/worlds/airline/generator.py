"""Seeded data generator for the airline world. `scale` is the number of users; flights
grow with it (about 230 rows at the default scale of 30, 10^5+ rows at scale 20000)."""

from __future__ import annotations

import random
import sqlite3
from datetime import date, datetime, timedelta

from envs import sql as kit

NOW = datetime(2026, 5, 10, 12, 0, 0)
AIRPORTS = ["SFO", "JFK", "LAX", "ORD", "SEA", "BOS", "DEN", "ATL", "MIA", "PHX"]
FIRST = ["mia", "noah", "ava", "liam", "emma", "omar", "yara", "ivan", "sofia", "lucas", "aisha", "chen",
         "raj", "ana", "ethan", "zoe", "kofi", "lena", "mateo", "nina"]
LAST = ["li", "garcia", "smith", "khan", "muller", "silva", "kim", "nguyen", "rossi", "ito", "ahmed", "lopez"]
DAYS = 10  # flights from NOW - 2 days to NOW + 7 days
DEPARTURES = ["07:30", "12:15", "18:45"]


def generate(conn: sqlite3.Connection, seed: int, scale: int = 30) -> None:
    """Fill an empty airline database deterministically from `seed`."""
    rng = random.Random(seed)
    conn.execute("INSERT INTO meta VALUES ('now', ?)", (kit.ts(NOW),))

    pairs = [(a, b) for a in AIRPORTS for b in AIRPORTS if a != b]
    rng.shuffle(pairs)
    routes = pairs[: min(len(pairs), 4 + scale // 10)]
    flights: list[list] = []
    for r, (origin, dest) in enumerate(routes):
        base_price = rng.randrange(90, 400, 10)
        per_day = 2 if r % 2 == 0 else 1
        for d in range(DAYS):
            day = date(2026, 5, 8) + timedelta(days=d)
            for k in range(per_day):
                number = f"HAT{(r * 3 + k) % 1000:03d}"
                seats = rng.choice([0, 1, 2, 3, 5, 8, 12, 20, 30])
                price = base_price + rng.randrange(-30, 40, 10)
                flights.append([
                    f"{number}-{day.isoformat()}", number, origin, dest, day.isoformat(),
                    DEPARTURES[(r + k) % len(DEPARTURES)], "scheduled", seats,
                    int(price * 0.8), price, int(price * 2.5),
                ])
    conn.executemany("INSERT INTO flights VALUES (?,?,?,?,?,?,?,?,?,?,?)", [tuple(f) for f in flights])

    for u in range(scale):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        uid = f"{first}_{last}_{1000 + u}"
        conn.execute(
            "INSERT INTO users VALUES (?, ?, ?, ?)",
            (uid, f"{first.title()} {last.title()}", f"{first}.{last}{u}@example.com",
             rng.choice(["regular", "regular", "silver", "gold"])),
        )
        pms = [(f"credit_card_{u * 7 + 1:05d}", "credit_card", f"{rng.randrange(10000):04d}", None)]
        if rng.random() < 0.6:
            pms.append((f"gift_card_{u * 7 + 2:05d}", "gift_card", None, rng.randrange(50, 900, 10)))
        if rng.random() < 0.3:
            pms.append((f"certificate_{u * 7 + 3:05d}", "certificate", None, rng.choice([100, 250, 500])))
        conn.executemany(
            "INSERT INTO payment_methods VALUES (?, ?, ?, ?, ?)", [(p, uid, k, l4, b) for p, k, l4, b in pms]
        )
        held: set[str] = set()
        for n in range(rng.choice([0, 1, 1, 2, 3])):
            flight = flights[rng.randrange(len(flights))]
            passengers = rng.choice([1, 1, 2, 3])
            if flight[7] < passengers or flight[0] in held:  # R02 seats, R11 one active per flight
                continue
            held.add(flight[0])
            cabin = rng.choice(["basic_economy", "economy", "economy", "business"])
            price = {"basic_economy": flight[8], "economy": flight[9], "business": flight[10]}[cabin]
            insurance = int(rng.random() < 0.3)
            total = (price + 30 * insurance) * passengers
            created = NOW - timedelta(hours=rng.choice([2, 10, 30, 50, 200]))
            rid = f"R{seed % 97:02d}{u:04d}{n}"
            conn.execute(
                "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?)",
                (rid, uid, flight[0], cabin, passengers, pms[0][0], insurance, rng.choice([0, 0, 1, 2]) * passengers,
                 total, kit.ts(created)),
            )
            flight[7] -= passengers  # the booking trigger did the same in the database

    # Time passes: earlier flights have departed; a few later ones are delayed or cancelled.
    conn.execute("UPDATE flights SET status = 'departed' WHERE date < ?", (NOW.date().isoformat(),))
    future = [f[0] for f in flights if f[4] > NOW.date().isoformat()]
    for fid in rng.sample(future, k=max(1, len(future) // 15)):
        conn.execute("UPDATE flights SET status = ? WHERE flight_id = ?", (rng.choice(["delayed", "cancelled"]), fid))
