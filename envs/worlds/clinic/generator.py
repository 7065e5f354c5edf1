"""Seeded data generator for the clinic world. `scale` is the number of patients; providers
and their slots grow with it (about 400 rows at the default scale of 30, 10^5+ rows at
scale 20000). Appointments are booked through the schema's triggers on a clock set back
four days, then time passes to NOW: past visits become completed or no-shows."""

from __future__ import annotations

import itertools
import random
import sqlite3
from datetime import date, datetime, timedelta

from envs import sql as kit

NOW = datetime(2026, 5, 11, 9, 0, 0)  # a Monday
BOOKING_CLOCK = NOW - timedelta(days=4)
FIRST = ["mia", "noah", "ava", "liam", "emma", "omar", "yara", "ivan", "sofia", "lucas", "aisha", "chen",
         "raj", "ana", "ethan", "zoe", "kofi", "lena", "mateo", "nina"]
LAST = ["li", "garcia", "smith", "khan", "muller", "silva", "kim", "nguyen", "rossi", "ito", "ahmed", "lopez"]
SPECIALTIES = ["primary_care", "pediatrics", "cardiology", "dermatology", "orthopedics"]
SPECIALISTS = ("cardiology", "dermatology", "orthopedics")
LOCATIONS = ["Main Street", "Riverside", "Hillcrest"]
PLANS = [  # plan_id, name, requires_referral, copay
    ("hmo_carepoint", "CarePoint HMO", 1, 15),
    ("ppo_meridian", "Meridian PPO", 0, 40),
    ("basic_summit", "Summit Basic", 1, 25),
    ("plus_horizon", "Horizon Plus", 0, 30),
]
TYPES = [  # type_code, name, offered_by, fee, late_cancel_fee, min_age, max_age
    ("annual_physical", "Annual physical", "primary_care", 180, 50, 18, 150),
    ("sick_visit", "Sick visit", "primary_care", 120, 30, 0, 150),
    ("well_child", "Well-child visit", "pediatrics", 140, 40, 0, 17),
    ("consultation", "Specialist consultation", "specialist", 260, 75, 0, 150),
    ("follow_up", "Follow-up visit", "any", 90, 25, 0, 150),
]
MEDICATIONS = [("lisinopril", "10 mg daily"), ("metformin", "500 mg twice daily"),
               ("atorvastatin", "20 mg daily"), ("levothyroxine", "50 mcg daily"),
               ("amlodipine", "5 mg daily"), ("sertraline", "50 mg daily"),
               ("albuterol", "2 puffs as needed"), ("omeprazole", "20 mg daily"),
               ("cetirizine", "10 mg daily"), ("tretinoin", "apply nightly")]
WORKDAYS = [d for d in (date(2026, 5, 8) + timedelta(days=k) for k in range(14)) if d.weekday() < 5]
DAY_STRINGS = [d.isoformat() for d in WORKDAYS]
SLOTS_PER_DAY = 4  # two in the morning from 09:00, two in the afternoon from 14:00


def _offers(offered_by: str, specialty: str) -> bool:
    return offered_by in ("any", specialty) or (offered_by == "specialist" and specialty in SPECIALISTS)


def _age_ok(dob: date, day: date, min_age: int, max_age: int) -> bool:
    def birthday(years: int) -> date:
        try:
            return dob.replace(year=dob.year + years)
        except ValueError:  # 29 February: SQLite's date(dob, '+N years') rolls to 1 March
            return date(dob.year + years, 3, 1)

    return birthday(min_age) <= day < birthday(max_age + 1)


def generate(conn: sqlite3.Connection, seed: int, scale: int = 30) -> None:
    """Fill an empty clinic database deterministically from `seed`."""
    if scale < 1:
        raise ValueError(f"scale must be at least 1, got {scale}")
    rng = random.Random(seed)
    conn.execute("INSERT INTO meta VALUES ('now', ?)", (kit.ts(BOOKING_CLOCK),))
    conn.executemany("INSERT INTO insurance_plans VALUES (?, ?, ?, ?)", PLANS)
    conn.executemany("INSERT INTO appointment_types VALUES (?, ?, ?, ?, ?, ?, ?)", TYPES)

    # Providers: every specialty at least once; unique names; 2-3 accepted plans each.
    n_prov = 6 + scale // 20
    names = [f"{f.title()} {m}. {la.title()}" for f, m, la in
             itertools.product(FIRST, "ABCDEFGHJKLMNPRSTW", LAST)]
    rng.shuffle(names)
    providers: list[tuple[str, str, str, str]] = []
    accepted: dict[str, set[str]] = {}
    for k in range(n_prov):
        name = names[k] if k < len(names) else f"{names[k % len(names)]} {k}"
        pid = f"dr_{name.split()[-1].lower()}_{100 + k}"
        specialty = SPECIALTIES[k % len(SPECIALTIES)]
        providers.append((pid, f"Dr. {name}", specialty, rng.choice(LOCATIONS)))
        accepted[pid] = set(rng.sample([p[0] for p in PLANS], k=rng.choice([2, 3, 3])))
    conn.executemany("INSERT INTO providers VALUES (?, ?, ?, ?)", providers)
    conn.executemany("INSERT INTO provider_plans VALUES (?, ?)",
                     [(pid, plan) for pid, *_ in providers for plan in sorted(accepted[pid])])

    # Slots: SLOTS_PER_DAY per provider and workday, back to back from an offset.
    slots: list[list] = []
    by_provider: dict[str, list[int]] = {}
    for pid, _name, specialty, _loc in providers:
        duration = rng.choice([30, 45]) if specialty in SPECIALISTS else rng.choice([20, 30])
        offset = rng.choice([0, 10, 15])
        for day in DAY_STRINGS:
            for block in (9, 14):
                for i in range(SLOTS_PER_DAY // 2):
                    hh, mm = divmod(block * 60 + offset + duration * i, 60)
                    status = "blocked" if rng.random() < 0.05 else "open"
                    by_provider.setdefault(pid, []).append(len(slots))
                    slots.append([f"{pid}-{day.replace('-', '')}-{hh:02d}{mm:02d}", pid,
                                  f"{day} {hh:02d}:{mm:02d}:00", duration, status])
    conn.executemany("INSERT INTO slots VALUES (?, ?, ?, ?, ?)", [tuple(s) for s in slots])

    patients, referrals, appointments, prescriptions = [], [], [], []
    spec_of = {p[0]: p[2] for p in providers}
    prov_ids = [p[0] for p in providers]
    in_network = {plan: [p for p in prov_ids if plan in accepted[p]] for plan, *_ in PLANS}
    needs_referral = {p[0]: bool(p[2]) for p in PLANS}
    copay = {p[0]: p[3] for p in PLANS}
    plan_choices = [None, *[p[0] for p in PLANS], PLANS[0][0], PLANS[1][0]]
    for u in range(scale):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        pid = f"{first}_{last}_{1000 + u}"
        dob = date(1940, 1, 1) + timedelta(days=rng.randrange(0, 84 * 365))
        plan = rng.choice(plan_choices)
        balance = rng.choice([0] * 6 + [40, 90, 150, 220])
        patients.append((pid, f"{first.title()} {last.title()}", dob.isoformat(),
                         f"555-{rng.randrange(10000):04d}", plan, f"{rng.randrange(10000):04d}", balance))
        refs: dict[str, list] = {}
        if plan and needs_referral[plan] and rng.random() < 0.5:
            specialty = rng.choice(SPECIALISTS)
            issued = NOW.date() - timedelta(days=rng.randrange(5, 80))
            ref = [f"REF{u:05d}", pid, specialty, issued.isoformat(),
                   (issued + timedelta(days=90)).isoformat(), rng.choice([1, 2, 3]), 0]
            refs[specialty] = ref
            referrals.append(ref)
        taken: list[tuple[datetime, datetime]] = []
        for n in range(rng.choice([0, 1, 1, 2, 3]) if balance <= 150 else 0):
            pool = in_network[plan] if plan else prov_ids  # R02
            prov = pool[rng.randrange(len(pool))]
            spec = spec_of[prov]
            s = slots[by_provider[prov][rng.randrange(len(by_provider[prov]))]]
            start = datetime.fromisoformat(s[2])  # R01 needs the slot open and after the clock
            end = start + timedelta(minutes=s[3])
            if s[4] != "open" or any(a < end and start < b for a, b in taken):
                continue  # R01, R05
            fits = [t for t in TYPES if _offers(t[2], spec) and _age_ok(dob, start.date(), t[5], t[6])]
            if not fits:
                continue  # R04
            ref_id = None
            if plan and spec in SPECIALISTS and needs_referral[plan]:
                ref = refs.get(spec)
                if ref is None or ref[6] >= ref[5] or ref[4] < start.date().isoformat():
                    continue  # R03
                ref[6] += 1
                ref_id = ref[0]
            t = rng.choice(fits)
            fee = copay[plan] if plan else t[3]
            s[4] = "booked"
            taken.append((start, end))
            booked = BOOKING_CLOCK - timedelta(hours=rng.randrange(1, 400))
            appointments.append((f"A{seed % 97:02d}{u:05d}{n}", pid, s[0], t[0], ref_id, "scheduled", fee,
                                 kit.ts(booked)))
        meds = rng.sample(MEDICATIONS, k=rng.choice([0, 0, 1, 1, 2, 3]))
        for k, (med, dosage) in enumerate(meds):
            supply = rng.choice([30, 30, 60, 90])
            last_fill = NOW.date() - timedelta(days=rng.randrange(0, supply + 10))
            expires = NOW.date() + timedelta(days=rng.randrange(-30, 300))
            prescriptions.append((f"RX{u:05d}{k}", pid, prov_ids[rng.randrange(len(prov_ids))], med, dosage,
                                  supply, rng.choice([0, 1, 2, 3, 5]), last_fill.isoformat(), expires.isoformat()))
    conn.executemany("INSERT INTO patients VALUES (?, ?, ?, ?, ?, ?, ?)", patients)
    conn.executemany("INSERT INTO referrals VALUES (?, ?, ?, ?, ?, ?, 0)", [tuple(r[:6]) for r in referrals])
    # Bookings go through the rule triggers (a generator bug fails loudly here).
    conn.executemany(
        "INSERT INTO appointments (appointment_id, patient_id, slot_id, type_code, referral_id, status, fee,"
        " booked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", appointments)
    conn.executemany("INSERT INTO prescriptions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", prescriptions)

    # Time passes: a few upcoming visits were cancelled (free, days ahead); past visits closed.
    now = kit.ts(NOW)
    starts = {s[0]: s[2] for s in slots}
    closed = []
    for a in appointments:
        if starts[a[2]] > now:
            if rng.random() < 0.08:
                closed.append(("cancelled", a[0]))
        else:
            closed.append(("no_show" if rng.random() < 0.1 else "completed", a[0]))
    conn.executemany("UPDATE appointments SET status = ? WHERE appointment_id = ?", closed)
    conn.execute("UPDATE slots SET status = 'blocked' WHERE status = 'open' AND start_at <= ?", (now,))
    conn.execute("UPDATE meta SET value = ? WHERE key = 'now'", (now,))
