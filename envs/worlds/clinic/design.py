"""Synthesis hooks of the clinic world (see `envs/design.py` for the contract).

Every compiled rule gets two boundary kinds one step apart: at the limit (allowed) and one
step past it (rejected). A rejected kind either offers a substitute (a second slot or
provider: mismatch), a way round it (pay the balance, cancel and rebook: entangled), or
is a request the agent must refuse (`allow_no_change`). The kind's intended outcome is in
`focus["want"]`; `goal_score` prefers the reached state that realises exactly it.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any

from envs import sql as kit
from envs.design import Variant
from envs.worlds.clinic.constraints import SPECIALISTS, SPECIALTY_WORDS
from envs.worlds.clinic.outcomes import (  # noqa: F401  (the explorer and projection hooks)
    candidate_calls,
    describe,
    goal_score,
    lookup_calls,
    slot_words,
    when_words,
)

NON_SPECIALISTS = ("primary_care", "pediatrics")
HOLD = 150  # R07: the largest balance that still allows booking
ACTIVE_LIMIT = 3  # R06
LEAD = timedelta(days=2)  # booking targets start at least this far ahead (cancelling them is free)

# (kind, rule, persona) for both sides of every rule: at the limit (allowed) and one step
# past it (rejected).
_PAIRS: list[tuple[tuple[str, str, str], tuple[str, str, str]]] = [
    (("slot_last_open", "R01_SLOT_OPEN", "boundary"), ("slot_taken", "R01_SLOT_OPEN", "mismatch")),
    (("network_in", "R02_IN_NETWORK", "novice"), ("network_out", "R02_IN_NETWORK", "mismatch")),
    (("referral_on_expiry", "R03_REFERRAL", "boundary"), ("referral_expired", "R03_REFERRAL", "mismatch")),
    (("age_day_before_18", "R04_AGE_RANGE", "boundary"), ("age_turns_18", "R04_AGE_RANGE", "mismatch")),
    (("overlap_back_to_back", "R05_NO_OVERLAP", "boundary"), ("overlap_by_step", "R05_NO_OVERLAP", "mismatch")),
    (("active_two_held", "R06_ACTIVE_LIMIT", "novice"), ("active_three_held", "R06_ACTIVE_LIMIT", "entangled")),
    (("balance_at_hold", "R07_BALANCE_HOLD", "boundary"), ("balance_over_hold", "R07_BALANCE_HOLD", "entangled")),
    (("cancel_24h_ahead", "R08_LATE_CANCEL", "boundary"), ("cancel_23h_ahead", "R08_LATE_CANCEL", "boundary")),
    (("move_starts_soon", "R09_LOCKED", "novice"), ("move_already_started", "R09_LOCKED", "boundary")),
    (("reschedule_second", "R10_RESCHEDULE", "novice"), ("reschedule_third", "R10_RESCHEDULE", "entangled")),
    (("refill_last_one", "R11_REFILLS_LEFT", "novice"), ("refill_none_left", "R11_REFILLS_LEFT", "boundary")),
    (("refill_first_day", "R12_REFILL_TOO_EARLY", "boundary"),
     ("refill_day_early", "R12_REFILL_TOO_EARLY", "boundary")),
    (("rx_expires_today", "R13_RX_EXPIRED", "boundary"), ("rx_expired_yesterday", "R13_RX_EXPIRED", "boundary")),
    (("referral_last_visit", "R03_REFERRAL", "novice"), ("referral_used_up", "R03_REFERRAL", "boundary")),
]
# Cycle order: any 7 consecutive kinds touch 7 different rules and mix both sides (one
# side of every rule, alternating, then the other sides).
KINDS: list[tuple[str, str, str]] = ([pair[i % 2] for i, pair in enumerate(_PAIRS)]
                                     + [pair[1 - i % 2] for i, pair in enumerate(_PAIRS)])
KIND_NAMES = [k for k, _, _ in KINDS]
_BOOK, _CANCEL, _MOVE, _REFILL = ["book_appointment"], ["cancel_appointment"], ["reschedule_appointment"], \
    ["refill_prescription"]
# The write tools each kind's goal calls (none: the right outcome is a refusal); logic-
# driven synthesis schedules kinds by it so every write tool is some task's target.
KIND_WRITES: dict[str, list[str]] = {
    "slot_last_open": _BOOK, "slot_taken": _BOOK, "network_in": _BOOK, "network_out": _BOOK,
    "referral_on_expiry": _BOOK, "referral_expired": _BOOK, "age_day_before_18": _BOOK, "age_turns_18": _BOOK,
    "overlap_back_to_back": _BOOK, "overlap_by_step": _BOOK, "active_two_held": _BOOK,
    "active_three_held": [*_CANCEL, *_BOOK], "balance_at_hold": _BOOK, "balance_over_hold": ["pay_balance", *_BOOK],
    "cancel_24h_ahead": _CANCEL, "cancel_23h_ahead": _CANCEL, "move_starts_soon": _MOVE, "move_already_started": [],
    "reschedule_second": _MOVE, "reschedule_third": [*_CANCEL, *_BOOK], "refill_last_one": _REFILL,
    "refill_none_left": [], "refill_first_day": _REFILL, "refill_day_early": [], "rx_expires_today": _REFILL,
    "rx_expired_yesterday": [], "referral_last_visit": _BOOK, "referral_used_up": [],
}


def _years_before(day: date, years: int) -> date:
    """The date of birth whose `years`-th birthday is `day` (29 February maps to 28 February)."""
    try:
        return day.replace(year=day.year - years)
    except ValueError:
        return date(day.year - years, 2, 28)


def _age_on(dob: str, day: date) -> int:
    born = date.fromisoformat(dob)
    return day.year - born.year - ((day.month, day.day) < (born.month, born.day))


class _Ctx:
    """What the builders share: the base state, the clock and the random stream. (A plain
    class: the world loader does not register this module in sys.modules, which
    dataclasses need.)"""

    def __init__(self, conn: sqlite3.Connection, rng: random.Random, now: datetime) -> None:
        self.conn = conn
        self.rng = rng
        self.now = now

    def patients(self, *, insured: bool | None = None, referral_plan: bool | None = None) -> list[dict]:
        """Patients free to book: balance within the hold, no upcoming scheduled visit."""
        rows = kit.rows(self.conn, """
            SELECT p.*, i.requires_referral, i.copay FROM patients p
            LEFT JOIN insurance_plans i ON i.plan_id = p.plan_id
            WHERE p.balance_due <= ? AND NOT EXISTS (
                SELECT 1 FROM appointments a JOIN slots s ON s.slot_id = a.slot_id
                WHERE a.patient_id = p.patient_id AND a.status = 'scheduled' AND s.start_at > ?)
            ORDER BY p.patient_id""", HOLD, kit.ts(self.now))
        if insured is not None:
            rows = [r for r in rows if (r["plan_id"] is not None) == insured]
        if referral_plan is not None:
            rows = [r for r in rows if bool(r["requires_referral"]) == referral_plan]
        return rows

    def pick_patient(self, **kw: Any) -> dict | None:
        rows = self.patients(**kw)
        return self.rng.choice(rows) if rows else None

    def open_slots(self, provider_id: str, after: datetime | None = None) -> list[dict]:
        return kit.rows(self.conn, "SELECT * FROM slots WHERE provider_id = ? AND status = 'open' AND start_at > ?"
                                " ORDER BY start_at", provider_id, kit.ts(after or self.now + LEAD))

    def pick_provider(self, specialties: tuple[str, ...], exclude: tuple[str, ...] = (), min_open: int = 3,
                      ) -> dict | None:
        rows = [p for p in kit.rows(self.conn, "SELECT * FROM providers ORDER BY provider_id")
                if p["specialty"] in specialties and p["provider_id"] not in exclude]
        rows = [p for p in rows if len(self.open_slots(p["provider_id"])) >= min_open]
        return self.rng.choice(rows) if rows else None

    def two_slots(self, provider_id: str, same_day: bool) -> tuple[dict, dict] | None:
        """Two open slots of a provider (same day or different days), earlier first."""
        slots = self.open_slots(provider_id)
        pairs = [(a, b) for i, a in enumerate(slots) for b in slots[i + 1:]
                 if (a["start_at"][:10] == b["start_at"][:10]) == same_day]
        return self.rng.choice(pairs) if pairs else None

    def fee(self, patient: dict, type_code: str) -> int:
        if patient["plan_id"] is not None:
            return int(patient["copay"])
        (fee,) = self.conn.execute("SELECT fee FROM appointment_types WHERE type_code = ?", (type_code,)).fetchone()
        return int(fee)

    def free_slot_id(self, provider_id: str, at: datetime) -> str | None:
        """A new slot id for `provider_id` at `at`, or None when the provider already has a slot then."""
        if kit.row(self.conn, "SELECT 1 FROM slots WHERE provider_id = ? AND start_at = ?", provider_id, kit.ts(at)):
            return None
        return f"{provider_id}-{at:%Y%m%d-%H%M}v"


def _network(patient: dict, provider_id: str) -> list[str]:
    """Patches that put the provider in the patient's network (none for self-pay)."""
    if patient["plan_id"] is None:
        return []
    return [f"INSERT OR IGNORE INTO provider_plans VALUES ({kit.q(provider_id)}, {kit.q(patient['plan_id'])})"]


def _insert_slot(slot_id: str, provider_id: str, at: datetime, minutes: int) -> str:
    return (f"INSERT INTO slots VALUES ({kit.q(slot_id)}, {kit.q(provider_id)}, {kit.q(kit.ts(at))}, {minutes}, 'open')")


def _insert_appt(aid: str, patient: dict, slot_id: str, type_code: str, fee: int, booked: datetime,
                 referral_id: str | None = None) -> str:
    return ("INSERT INTO appointments (appointment_id, patient_id, slot_id, type_code, referral_id, status, fee,"
            f" booked_at) VALUES ({kit.q(aid)}, {kit.q(patient['patient_id'])}, {kit.q(slot_id)}, {kit.q(type_code)},"
            f" {kit.q(referral_id)}, 'scheduled', {fee}, {kit.q(kit.ts(booked))})")


def _types_for(specialty: str, age: int) -> list[str]:
    if specialty == "primary_care":
        return ["annual_physical", "follow_up"] if age >= 18 else ["sick_visit", "follow_up"]
    if specialty == "pediatrics":
        return ["well_child", "follow_up"] if age < 18 else ["follow_up"]
    return ["consultation"]


def _focus(patient: dict, **kw: Any) -> dict[str, Any]:
    focus: dict[str, Any] = {"patient_id": patient["patient_id"], "slot_ids": [], "type_codes": [],
                             "referral_ids": [], "appointment_ids": [], "move_slots": [], "rx_ids": [],
                             "pay": False, "want": {}}
    focus.update(kw)
    return focus


def _book_or_instead(variant: Variant, allowed: bool, patient: dict, types: list[str], booked: str,
                     refused_instead: tuple[str, str], preference: dict[str, Any]) -> Variant:
    """A booking rule's two sides on `variant` (its kind, patches, rule, persona and note): the
    allowed side books `booked`; the rejected one asks for the refused slot (`preference` says
    why it wants it), is told no, and books the other one instead."""
    if allowed:
        return dataclasses.replace(variant, focus=_focus(patient, slot_ids=[booked], type_codes=types,
                                                         want={"book": booked}))
    refused, instead = refused_instead
    focus = _focus(patient, slot_ids=[refused, instead], type_codes=types, want={"book": instead})
    return dataclasses.replace(variant, focus=focus, preference=preference)


Builder = Callable[[_Ctx, str, str, str], Variant | None]


# -- booking kinds ----------------------------------------------------------------------------------


def _booking_base(ctx: _Ctx, *, insured: bool | None = None, referral_plan: bool | None = None,
                  same_day: bool = True, specialties: tuple[str, ...] = ("primary_care",),
                  ) -> tuple[dict, dict, dict, dict] | None:
    """A patient, a provider of `specialties` and two of its open slots (earlier first)."""
    patient = ctx.pick_patient(insured=insured, referral_plan=referral_plan)
    provider = ctx.pick_provider(specialties)
    if patient is None or provider is None:
        return None
    pair = ctx.two_slots(provider["provider_id"], same_day)
    if pair is None:
        return None
    return patient, provider, pair[0], pair[1]


def _slot_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    base = _booking_base(ctx)
    if base is None:
        return None
    patient, provider, s1, s2 = base
    age = _age_on(patient["date_of_birth"], date.fromisoformat(s1["start_at"][:10]))
    types = _types_for(provider["specialty"], age)
    patches = _network(patient, provider["provider_id"])
    if kind == "slot_last_open":  # R01 at the limit: the provider's last open slot that day
        patches.append(f"UPDATE slots SET status = 'blocked' WHERE provider_id = {kit.q(provider['provider_id'])}"
                       f" AND date(start_at) = {kit.q(s1['start_at'][:10])} AND status = 'open'"
                       f" AND slot_id <> {kit.q(s1['slot_id'])}")
        focus = _focus(patient, slot_ids=[s1["slot_id"]], type_codes=types, want={"book": s1["slot_id"]})
        return Variant(kind, patches, focus, [rule], persona, f"{s1['slot_id']} is the last open slot that day")
    # R01 one past: the preferred slot is no longer open; a later one that day is
    patches.append(f"UPDATE slots SET status = 'blocked' WHERE slot_id = {kit.q(s1['slot_id'])}")
    focus = _focus(patient, slot_ids=[s1["slot_id"], s2["slot_id"]], type_codes=types[:1],
                   want={"book": s2["slot_id"]})
    return Variant(kind, patches, focus, [rule], persona, f"preferred {s1['slot_id']} is blocked",
                   preference={"preferred_slot": s1["slot_id"]})


def _network_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    patient = ctx.pick_patient(insured=True)
    specialty = ctx.rng.choice(NON_SPECIALISTS)
    inside = ctx.pick_provider((specialty,))
    if patient is None or inside is None:
        return None
    outside = ctx.pick_provider((specialty,), exclude=(inside["provider_id"],))
    if outside is None:
        return None
    s_in = ctx.rng.choice(ctx.open_slots(inside["provider_id"]))
    s_out = ctx.rng.choice(ctx.open_slots(outside["provider_id"]))
    age = _age_on(patient["date_of_birth"], date.fromisoformat(s_in["start_at"][:10]))
    types = _types_for(specialty, age)[-1:]  # follow-up: every age
    patches = [*_network(patient, inside["provider_id"]),
               f"DELETE FROM provider_plans WHERE provider_id = {kit.q(outside['provider_id'])}"
               f" AND plan_id = {kit.q(patient['plan_id'])}"]
    note = f"{inside['provider_id']} accepts {patient['plan_id']}, {outside['provider_id']} does not"
    return _book_or_instead(Variant(kind, patches, {}, [rule], persona, note), kind == "network_in", patient, types,
                            s_in["slot_id"], (s_out["slot_id"], s_in["slot_id"]),
                            {"preferred_provider": outside["provider_id"]})


def _referral_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    base = _booking_base(ctx, referral_plan=True, same_day=False, specialties=SPECIALISTS)
    if base is None:
        return None
    patient, provider, early, late = base
    rid = f"REFV{ctx.rng.randrange(16 ** 4):04X}"
    late_day = date.fromisoformat(late["start_at"][:10])
    expires = {"referral_on_expiry": late_day, "referral_expired": late_day - timedelta(days=1)}.get(
        kind, late_day + timedelta(days=60))
    allowed, used = {"referral_last_visit": (2, 1), "referral_used_up": (2, 2)}.get(kind, (2, 0))
    specialty = provider["specialty"]
    if kit.row(ctx.conn, "SELECT 1 FROM referrals r JOIN appointments a ON a.referral_id = r.referral_id"
                      " WHERE r.patient_id = ? AND r.specialty = ?", patient["patient_id"], specialty):
        return None  # a second referral for the specialty would make "your referral" ambiguous
    patches = [*_network(patient, provider["provider_id"]),
               f"DELETE FROM referrals WHERE patient_id = {kit.q(patient['patient_id'])}"
               f" AND specialty = {kit.q(specialty)} AND referral_id NOT IN (SELECT referral_id FROM appointments"
               " WHERE referral_id IS NOT NULL)",
               f"INSERT INTO referrals VALUES ({kit.q(rid)}, {kit.q(patient['patient_id'])}, {kit.q(specialty)},"
               f" {kit.q((ctx.now - timedelta(days=20)).date().isoformat())}, {kit.q(expires.isoformat())},"
               f" {allowed}, {used})"]
    note = f"referral {rid} expires {expires}, {used}/{allowed} visits used; slot on {late_day}"
    common = {"type_codes": ["consultation"], "referral_ids": [rid]}
    if kind == "referral_expired":
        focus = _focus(patient, slot_ids=[late["slot_id"], early["slot_id"]], want={"book": early["slot_id"]},
                       **common)
        return Variant(kind, patches, focus, [rule], persona, note,
                       preference={"preferred_slot": late["slot_id"]})
    focus = _focus(patient, slot_ids=[late["slot_id"]], want={"book": late["slot_id"]}, **common)
    if kind == "referral_used_up":
        focus["want"] = {}
        return Variant(kind, patches, focus, [rule], persona, note, allow_no_change=True, preference={
            "request": ("book " + slot_words(ctx.conn, late["slot_id"], "consultation")
                        + f" using your {SPECIALTY_WORDS[specialty]} referral"),
            "unknown": ["whether your referral still has visits left"]})
    return Variant(kind, patches, focus, [rule], persona, note)


def _age_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    patient = ctx.pick_patient()
    provider = ctx.pick_provider(("pediatrics",))
    if patient is None or provider is None:
        return None
    slot = ctx.rng.choice(ctx.open_slots(provider["provider_id"]))
    day = date.fromisoformat(slot["start_at"][:10])
    birthday = day + timedelta(days=1) if kind == "age_day_before_18" else day  # the 18th birthday
    dob = _years_before(birthday, 18)
    patches = [*_network(patient, provider["provider_id"]),
               f"UPDATE patients SET date_of_birth = {kit.q(dob.isoformat())}"
               f" WHERE patient_id = {kit.q(patient['patient_id'])}"]
    note = f"turns 18 on {birthday}, visit on {day}"
    if kind == "age_day_before_18":
        focus = _focus(patient, slot_ids=[slot["slot_id"]], type_codes=["well_child", "follow_up"],
                       want={"book": slot["slot_id"], "type": "well_child"})
        return Variant(kind, patches, focus, [rule], persona, note)
    focus = _focus(patient, slot_ids=[slot["slot_id"]], type_codes=["well_child", "follow_up"],
                   want={"book": slot["slot_id"], "type": "follow_up"})
    return Variant(kind, patches, focus, [rule], persona, note, preference={"wanted_type": "well_child"})


def _overlap_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    base = _booking_base(ctx, same_day=False)
    if base is None:
        return None
    patient, provider, s1, s2 = base
    other = ctx.pick_provider(NON_SPECIALISTS, exclude=(provider["provider_id"],), min_open=0)
    if other is None:
        return None
    start = datetime.fromisoformat(s1["start_at"])
    minutes = 30
    at = start - timedelta(minutes=minutes) + (timedelta(minutes=5) if kind == "overlap_by_step" else timedelta())
    slot_id = ctx.free_slot_id(other["provider_id"], at)
    if slot_id is None:
        return None
    aid = f"AV{ctx.rng.randrange(16 ** 5):05X}"
    age = _age_on(patient["date_of_birth"], start.date())
    patches = [*_network(patient, provider["provider_id"]), *_network(patient, other["provider_id"]),
               _insert_slot(slot_id, other["provider_id"], at, minutes),
               _insert_appt(aid, patient, slot_id, "follow_up", ctx.fee(patient, "follow_up"),
                            ctx.now - timedelta(days=3))]
    types = _types_for(provider["specialty"], age)[:1]
    note = f"{aid} {at:%H:%M}-{at + timedelta(minutes=minutes):%H:%M}, wanted slot at {start:%H:%M}"
    return _book_or_instead(Variant(kind, patches, {}, [rule], persona, note), kind == "overlap_back_to_back",
                            patient, types, s1["slot_id"], (s1["slot_id"], s2["slot_id"]),
                            {"preferred_slot": s1["slot_id"]})


def _active_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    base = _booking_base(ctx)
    if base is None:
        return None
    patient, provider, s1, _ = base
    held = ACTIVE_LIMIT - 1 if kind == "active_two_held" else ACTIVE_LIMIT
    days = {s1["start_at"][:10]}
    patches = _network(patient, provider["provider_id"])
    aids: list[str] = []
    others = [p for p in kit.rows(ctx.conn, "SELECT * FROM providers ORDER BY provider_id")
              if p["specialty"] in NON_SPECIALISTS]
    ctx.rng.shuffle(others)
    for other in others:
        if len(aids) == held:
            break
        free = [s for s in ctx.open_slots(other["provider_id"]) if s["start_at"][:10] not in days]
        if not free:
            continue
        slot = ctx.rng.choice(free)
        days.add(slot["start_at"][:10])
        aid = f"AV{ctx.rng.randrange(16 ** 5):05X}{len(aids)}"
        aids.append(aid)
        patches += [*_network(patient, other["provider_id"]),
                    _insert_appt(aid, patient, slot["slot_id"], "follow_up", ctx.fee(patient, "follow_up"),
                                 ctx.now - timedelta(days=2))]
    if len(aids) < held:
        return None
    age = _age_on(patient["date_of_birth"], date.fromisoformat(s1["start_at"][:10]))
    types = _types_for(provider["specialty"], age)[:1]
    note = f"holds {held} upcoming appointments"
    if kind == "active_two_held":
        focus = _focus(patient, slot_ids=[s1["slot_id"]], type_codes=types, want={"book": s1["slot_id"]})
        return Variant(kind, patches, focus, [rule], persona, note)
    drop = aids[-1]
    focus = _focus(patient, slot_ids=[s1["slot_id"]], type_codes=types, appointment_ids=[drop],
                   want={"book": s1["slot_id"], "cancel": drop})
    return Variant(kind, patches, focus, [rule], persona, note, preference={"give_up": drop})


def _balance_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    base = _booking_base(ctx)
    if base is None:
        return None
    patient, provider, s1, _ = base
    balance = HOLD if kind == "balance_at_hold" else HOLD + 1
    age = _age_on(patient["date_of_birth"], date.fromisoformat(s1["start_at"][:10]))
    patches = [*_network(patient, provider["provider_id"]),
               f"UPDATE patients SET balance_due = {balance} WHERE patient_id = {kit.q(patient['patient_id'])}"]
    want: dict[str, Any] = {"book": s1["slot_id"]}
    if kind == "balance_over_hold":
        want["pay"] = balance
    focus = _focus(patient, slot_ids=[s1["slot_id"]], type_codes=_types_for(provider["specialty"], age)[:1],
                   pay=True, want=want)
    return Variant(kind, patches, focus, [rule], persona, f"unpaid balance {balance}")


# -- change kinds -----------------------------------------------------------------------------------


def _held_appointment(ctx: _Ctx, patient: dict, provider: dict, at: datetime | None = None,
                      slot_id: str | None = None, reschedules: int = 0) -> tuple[str, list[str]] | None:
    """Patches giving the patient a follow-up with the provider in an existing open slot, or
    in a new 30-minute slot at `at`."""
    patches = _network(patient, provider["provider_id"])
    if slot_id is None:
        assert at is not None
        existing = kit.row(ctx.conn, "SELECT * FROM slots WHERE provider_id = ? AND start_at = ?",
                        provider["provider_id"], kit.ts(at))
        if existing is not None and existing["status"] != "open":
            return None
        if existing is not None:
            slot_id = existing["slot_id"]
        else:
            slot_id = f"{provider['provider_id']}-{at:%Y%m%d-%H%M}v"
            patches.append(_insert_slot(slot_id, provider["provider_id"], at, 30))
    aid = f"AV{ctx.rng.randrange(16 ** 5):05X}"
    patches.append(_insert_appt(aid, patient, slot_id, "follow_up", ctx.fee(patient, "follow_up"),
                                ctx.now - timedelta(days=5)))
    if reschedules:
        patches.append(f"UPDATE appointments SET reschedule_count = {reschedules} WHERE appointment_id = {kit.q(aid)}")
    return aid, patches


def _cancel_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    patient = ctx.pick_patient()
    provider = ctx.pick_provider(NON_SPECIALISTS, min_open=0)
    if patient is None or provider is None:
        return None
    hours = 24 if kind == "cancel_24h_ahead" else 23
    held = _held_appointment(ctx, patient, provider, ctx.now + timedelta(hours=hours))
    if held is None:
        return None
    aid, patches = held
    focus = _focus(patient, appointment_ids=[aid], want={"cancel": aid})
    return Variant(kind, patches, focus, [rule], persona, f"{aid} starts in {hours} hours")


def _locked_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    patient = ctx.pick_patient()
    provider = ctx.pick_provider(NON_SPECIALISTS)
    if patient is None or provider is None:
        return None
    target = ctx.rng.choice(ctx.open_slots(provider["provider_id"]))
    held = _held_appointment(ctx, patient, provider, ctx.now + timedelta(minutes=30))
    if held is None:
        return None
    aid, patches = held
    focus = _focus(patient, appointment_ids=[aid], move_slots=[target["slot_id"]],
                   want={"move": [aid, target["slot_id"]]})
    if kind == "move_starts_soon":
        return Variant(kind, patches, focus, [rule], persona, f"{aid} starts in 30 minutes")
    started = ctx.now - timedelta(minutes=30)
    patches.append(f"UPDATE slots SET start_at = {kit.q(kit.ts(started))} WHERE slot_id ="
                   f" (SELECT slot_id FROM appointments WHERE appointment_id = {kit.q(aid)})")
    focus["want"] = {}
    request = (f"move your appointment {aid} with {provider['name']} this morning to "
               + when_words(datetime.fromisoformat(target["start_at"])))
    return Variant(kind, patches, focus, [rule], persona, f"{aid} started 30 minutes ago", allow_no_change=True,
                   preference={"request": request, "appointment": aid,
                               "unknown": ["whether an appointment that has begun can still be moved"]})


def _reschedule_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    base = _booking_base(ctx, same_day=False, specialties=NON_SPECIALISTS)
    if base is None:
        return None
    patient, provider, current, target = base
    done = 1 if kind == "reschedule_second" else 2
    held = _held_appointment(ctx, patient, provider, slot_id=current["slot_id"], reschedules=done)
    if held is None:
        return None
    aid, patches = held
    note = f"{aid} rescheduled {done} time(s) already"
    if kind == "reschedule_second":
        focus = _focus(patient, appointment_ids=[aid], move_slots=[target["slot_id"]],
                       want={"move": [aid, target["slot_id"]]})
        return Variant(kind, patches, focus, [rule], persona, note)
    focus = _focus(patient, appointment_ids=[aid], move_slots=[target["slot_id"]], slot_ids=[target["slot_id"]],
                   type_codes=["follow_up"], want={"cancel": aid, "book": target["slot_id"]})
    return Variant(kind, patches, focus, [rule], persona, note, preference={"wants_move": aid})


# -- prescription kinds -----------------------------------------------------------------------------


def _rx_kinds(ctx: _Ctx, kind: str, rule: str, persona: str) -> Variant | None:
    rows = kit.rows(ctx.conn, "SELECT * FROM prescriptions ORDER BY rx_id")
    if not rows:
        return None
    rx = ctx.rng.choice(rows)
    patient = kit.row(ctx.conn, "SELECT * FROM patients WHERE patient_id = ?", rx["patient_id"])
    assert patient is not None
    today = ctx.now.date()
    first_day = today - timedelta(days=rx["days_supply"] - 7)  # the last fill that makes today the first day
    refills, last_fill, expires = 2, first_day - timedelta(days=2), today + timedelta(days=120)
    if kind == "refill_last_one":
        refills = 1
    elif kind == "refill_none_left":
        refills = 0
    elif kind == "refill_first_day":
        last_fill = first_day
    elif kind == "refill_day_early":
        last_fill = first_day + timedelta(days=1)
    elif kind == "rx_expires_today":
        expires = today
    elif kind == "rx_expired_yesterday":
        expires = today - timedelta(days=1)
    patches = [f"UPDATE prescriptions SET refills_remaining = {refills}, last_fill_date = {kit.q(last_fill.isoformat())},"
               f" expires_on = {kit.q(expires.isoformat())} WHERE rx_id = {kit.q(rx['rx_id'])}"]
    others = [r["rx_id"] for r in kit.rows(ctx.conn, "SELECT rx_id FROM prescriptions WHERE patient_id = ?"
                                                  " ORDER BY rx_id", rx["patient_id"])]
    note = f"{rx['rx_id']}: {refills} refills, last fill {last_fill}, {rx['days_supply']} days, expires {expires}"
    focus = _focus(patient, rx_ids=others, target_rx=rx["rx_id"], want={"refill": rx["rx_id"]})
    if kind in ("refill_none_left", "refill_day_early", "rx_expired_yesterday"):
        focus["want"] = {}
        unknown = {"refill_none_left": "whether the prescription has refills left",
                   "refill_day_early": "when the next refill is allowed",
                   "rx_expired_yesterday": "whether the prescription is still valid"}[kind]
        return Variant(kind, patches, focus, [rule], persona, note, allow_no_change=True, preference={
            "request": f"refill your {rx['medication']} prescription", "unknown": [unknown]})
    return Variant(kind, patches, focus, [rule], persona, note)


BUILDERS: dict[str, Builder] = {}
for _kind, _rule, _ in KINDS:
    BUILDERS[_kind] = {
        "R01_SLOT_OPEN": _slot_kinds, "R02_IN_NETWORK": _network_kinds, "R03_REFERRAL": _referral_kinds,
        "R04_AGE_RANGE": _age_kinds, "R05_NO_OVERLAP": _overlap_kinds, "R06_ACTIVE_LIMIT": _active_kinds,
        "R07_BALANCE_HOLD": _balance_kinds, "R08_LATE_CANCEL": _cancel_kinds, "R09_LOCKED": _locked_kinds,
        "R10_RESCHEDULE": _reschedule_kinds, "R11_REFILLS_LEFT": _rx_kinds, "R12_REFILL_TOO_EARLY": _rx_kinds,
        "R13_RX_EXPIRED": _rx_kinds,
    }[_rule]


def variants(conn: sqlite3.Connection, rng: random.Random, n: int, kinds: list[str] | None = None) -> list[Variant]:
    """`n` boundary-adjacent variants, cycling through the kinds from a seeded offset
    (or through `kinds` only, in that order, when given)."""
    by_name = {k[0]: k for k in KINDS}
    chosen = KINDS if kinds is None else [by_name[k] for k in dict.fromkeys(kinds) if k in by_name]
    if kinds is not None and (len(chosen) != len(set(kinds)) or not chosen):
        raise ValueError(f"unknown kind(s) {sorted(set(kinds) - set(KIND_NAMES))}; kinds are {KIND_NAMES}")
    ctx = _Ctx(conn, rng, kit.now_dt(conn))
    start = rng.randrange(len(chosen))  # drawn either way: the stream stays the same
    if kinds is not None:
        start = 0
    out: list[Variant] = []
    attempts = 0
    while len(out) < n and attempts < 20 * max(n, 1):
        kind, rule, persona = chosen[(start + attempts) % len(chosen)]
        attempts += 1
        v = BUILDERS[kind](ctx, kind, rule, persona)
        if v is not None:
            out.append(v)
    return out


def self_play_templates() -> dict[str, Any]:
    """Self-play (Tool-R0) question templates per tool (see `envs/templating.py`); they
    live in `templates.py` beside this file."""
    from envs.worlds.clinic.templates import TEMPLATES

    return dict(TEMPLATES)
