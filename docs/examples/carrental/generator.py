"""Seeded data of the carrental example world: `scale` customers and about scale/2 cars,
some of them already on an active rental (inserted through the schema's triggers)."""

from __future__ import annotations

import random
import sqlite3
from datetime import date, timedelta

TODAY = date(2026, 5, 10)
MODELS = [("Fiat Panda", 35), ("VW Golf", 48), ("Toyota Corolla", 52), ("Tesla Model 3", 95), ("Ford Transit", 80)]
NAMES = ["ada", "ben", "cai", "dee", "eli", "fay", "gus", "hal", "ivy", "jon", "kim", "lou"]


def generate(conn: sqlite3.Connection, seed: int, scale: int) -> None:
    rng = random.Random(seed)
    conn.execute("INSERT INTO meta VALUES ('now', ?)", (f"{TODAY} 09:00:00",))
    for i in range(scale):
        expires = TODAY + timedelta(days=rng.randrange(30, 900))
        conn.execute("INSERT INTO customers VALUES (?, ?, ?)",
                     (f"cu_{i:03d}", rng.choice(NAMES).title(), expires.isoformat()))
    for i in range(max(4, scale // 2)):
        model, rate = rng.choice(MODELS)
        status = "maintenance" if rng.random() < 0.1 else "available"
        conn.execute("INSERT INTO cars VALUES (?, ?, ?, ?)", (f"car_{i:03d}", model, rate, status))
    for i in range(scale // 4):  # a quarter of the customers are out on a car
        car = conn.execute("SELECT car_id, daily_rate FROM cars WHERE status = 'available' ORDER BY car_id"
                           " LIMIT 1 OFFSET ?", (rng.randrange(3),)).fetchone()
        if car is None:
            break
        days = rng.randrange(1, 8)
        start = TODAY - timedelta(days=rng.randrange(0, days))
        conn.execute("INSERT INTO rentals VALUES (?, ?, ?, ?, ?, ?, 'active')",
                     (f"RG{i:04d}", f"cu_{i * 4:03d}", car[0], start.isoformat(), days, days * car[1]))
