"""Rule probes of the clinic world: for every compiled rule a call that must be rejected with
exactly that rule id and a call one step away that must pass, on a small fixture state
(`envs.probes` runs them; the world's tests and `bench/synthesis_yield.py` use them)."""

from __future__ import annotations

from data.records import ToolCall

FIXTURE = """
INSERT INTO meta VALUES ('now', '2026-05-10 09:00:00');
INSERT INTO insurance_plans VALUES ('hmo', 'Test HMO', 1, 15), ('ppo', 'Test PPO', 0, 40);
INSERT INTO appointment_types VALUES
 ('annual_physical', 'Annual physical', 'primary_care', 180, 50, 18, 150),
 ('sick_visit', 'Sick visit', 'primary_care', 120, 30, 0, 150),
 ('well_child', 'Well-child visit', 'pediatrics', 140, 40, 0, 17),
 ('consultation', 'Specialist consultation', 'specialist', 260, 75, 0, 150),
 ('follow_up', 'Follow-up visit', 'any', 90, 25, 0, 150);
INSERT INTO patients VALUES
 ('p_adult', 'Ada Adult', '1980-03-01', '555-0001', 'hmo', '1111', 0),
 ('p_self', 'Sam Self', '1990-01-01', '555-0002', NULL, '2222', 150),
 ('p_owes', 'Owen Owes', '1985-01-01', '555-0003', 'ppo', '3333', 151),
 ('p_teen', 'Tia Teen', '2008-05-14', '555-0004', 'hmo', '4444', 0),
 ('p_busy', 'Bea Busy', '1970-01-01', '555-0005', 'ppo', '5555', 0),
 ('p_hmo2', 'Hal Hmo', '1975-06-01', '555-0006', 'hmo', '6666', 0);
INSERT INTO providers VALUES
 ('dr_pc', 'Dr. Pat Care', 'primary_care', 'Main Street'),
 ('dr_pc2', 'Dr. Pia Care', 'primary_care', 'Riverside'),
 ('dr_card', 'Dr. Cora Heart', 'cardiology', 'Hillcrest'),
 ('dr_ped', 'Dr. Peter Kid', 'pediatrics', 'Main Street');
INSERT INTO provider_plans VALUES ('dr_pc', 'hmo'), ('dr_pc', 'ppo'), ('dr_pc2', 'ppo'),
 ('dr_card', 'hmo'), ('dr_card', 'ppo'), ('dr_ped', 'hmo'), ('dr_ped', 'ppo');
INSERT INTO slots VALUES
 ('S_PC_13_0900', 'dr_pc', '2026-05-13 09:00:00', 30, 'open'),
 ('S_PC_13_0930', 'dr_pc', '2026-05-13 09:30:00', 30, 'open'),
 ('S_PC_13_1000', 'dr_pc', '2026-05-13 10:00:00', 30, 'blocked'),
 ('S_PC_14_0850', 'dr_pc', '2026-05-14 08:50:00', 30, 'open'),
 ('S_PC_14_0900', 'dr_pc', '2026-05-14 09:00:00', 30, 'open'),
 ('S_PC_12_0800', 'dr_pc', '2026-05-12 08:00:00', 30, 'open'),
 ('S_PC_12_0900', 'dr_pc', '2026-05-12 09:00:00', 30, 'open'),
 ('S_PC_11_0830', 'dr_pc', '2026-05-11 08:30:00', 30, 'open'),
 ('S_PC_11_0930', 'dr_pc', '2026-05-11 09:30:00', 30, 'open'),
 ('S_PC_15_1400', 'dr_pc', '2026-05-15 14:00:00', 30, 'open'),
 ('S_PC2_13_0900', 'dr_pc2', '2026-05-13 09:00:00', 30, 'open'),
 ('S_PC2_14_0920', 'dr_pc2', '2026-05-14 09:20:00', 30, 'open'),
 ('S_PC2_15_0900', 'dr_pc2', '2026-05-15 09:00:00', 30, 'open'),
 ('S_PC2_18_0900', 'dr_pc2', '2026-05-18 09:00:00', 30, 'open'),
 ('S_PC2_19_0900', 'dr_pc2', '2026-05-19 09:00:00', 30, 'open'),
 ('S_PC2_20_0900', 'dr_pc2', '2026-05-20 09:00:00', 30, 'open'),
 ('S_CARD_15', 'dr_card', '2026-05-15 10:00:00', 45, 'open'),
 ('S_CARD_18', 'dr_card', '2026-05-18 10:00:00', 45, 'open'),
 ('S_PED_13', 'dr_ped', '2026-05-13 11:00:00', 30, 'open'),
 ('S_PED_14', 'dr_ped', '2026-05-14 11:00:00', 30, 'open');
INSERT INTO referrals VALUES
 ('REF_OK', 'p_adult', 'cardiology', '2026-04-01', '2026-05-15', 2, 0),
 ('REF_FULL', 'p_hmo2', 'cardiology', '2026-04-01', '2026-08-01', 1, 1);
INSERT INTO appointments (appointment_id, patient_id, slot_id, type_code, referral_id, status, fee, booked_at)
VALUES
 ('A23', 'p_adult', 'S_PC_12_0800', 'follow_up', NULL, 'scheduled', 15, '2026-05-01 10:00:00'),
 ('A24', 'p_adult', 'S_PC_12_0900', 'follow_up', NULL, 'scheduled', 15, '2026-05-01 10:00:00'),
 ('A_SELF', 'p_self', 'S_PC2_14_0920', 'follow_up', NULL, 'scheduled', 90, '2026-05-01 10:00:00'),
 ('A_STARTED', 'p_self', 'S_PC_11_0830', 'follow_up', NULL, 'scheduled', 90, '2026-05-01 10:00:00'),
 ('A_SOON', 'p_self', 'S_PC_11_0930', 'follow_up', NULL, 'scheduled', 90, '2026-05-01 10:00:00'),
 ('B1', 'p_busy', 'S_PC2_15_0900', 'follow_up', NULL, 'scheduled', 40, '2026-05-01 10:00:00'),
 ('B2', 'p_busy', 'S_PC2_18_0900', 'follow_up', NULL, 'scheduled', 40, '2026-05-01 10:00:00'),
 ('B3', 'p_busy', 'S_PC2_19_0900', 'follow_up', NULL, 'scheduled', 40, '2026-05-01 10:00:00'),
 ('A_CANC', 'p_hmo2', 'S_PC_15_1400', 'follow_up', NULL, 'scheduled', 15, '2026-05-01 10:00:00');
UPDATE appointments SET status = 'cancelled' WHERE appointment_id = 'A_CANC';
UPDATE appointments SET reschedule_count = 2 WHERE appointment_id = 'B1';
UPDATE appointments SET reschedule_count = 1 WHERE appointment_id = 'B2';
INSERT INTO prescriptions VALUES
 ('RX_OK', 'p_adult', 'dr_pc', 'lisinopril', '10 mg daily', 30, 2, '2026-04-01', '2026-12-31'),
 ('RX_NONE', 'p_adult', 'dr_pc', 'metformin', '500 mg', 30, 0, '2026-04-01', '2026-12-31'),
 ('RX_FIRST', 'p_adult', 'dr_pc', 'atorvastatin', '20 mg', 30, 2, '2026-04-18', '2026-12-31'),
 ('RX_EARLY', 'p_adult', 'dr_pc', 'amlodipine', '5 mg', 30, 2, '2026-04-19', '2026-12-31'),
 ('RX_TODAY', 'p_adult', 'dr_pc', 'sertraline', '50 mg', 30, 2, '2026-04-01', '2026-05-11'),
 ('RX_EXP', 'p_adult', 'dr_pc', 'omeprazole', '20 mg', 30, 2, '2026-04-01', '2026-05-10');
UPDATE meta SET value = '2026-05-11 09:00:00' WHERE key = 'now';
"""


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=args)


def book(patient: str, slot: str, kind: str = "follow_up", referral: str | None = None) -> ToolCall:
    args: dict[str, object] = {"patient_id": patient, "slot_id": slot, "appointment_type": kind}
    if referral is not None:
        args["referral_id"] = referral
    return call("book_appointment", **args)


def move(aid: str, slot: str) -> ToolCall:
    return call("reschedule_appointment", appointment_id=aid, new_slot_id=slot)


def refill(rx: str) -> ToolCall:
    return call("refill_prescription", rx_id=rx)


# rule id -> (violating probe, valid probe), each one step either side of the limit
PROBES = {
    "R01_SLOT_OPEN": (book("p_self", "S_PC_13_1000"), book("p_self", "S_PC_13_0900")),
    "R02_IN_NETWORK": (book("p_adult", "S_PC2_13_0900"), book("p_self", "S_PC2_13_0900")),
    "R03_REFERRAL": (book("p_adult", "S_CARD_18", "consultation", "REF_OK"),  # expired the day before
                     book("p_adult", "S_CARD_15", "consultation", "REF_OK")),  # on the expiry date
    "R04_AGE_RANGE": (book("p_teen", "S_PED_14", "well_child"),  # the 18th birthday
                      book("p_teen", "S_PED_13", "well_child")),  # the day before
    "R05_NO_OVERLAP": (book("p_self", "S_PC_14_0900"),  # 10 minutes into A_SELF
                       book("p_self", "S_PC_14_0850")),  # ends as A_SELF starts
    "R06_ACTIVE_LIMIT": (book("p_busy", "S_PC_13_0900"),  # holds 3
                         book("p_adult", "S_PC_13_0900")),  # holds 2
    "R07_BALANCE_HOLD": (book("p_owes", "S_PC_13_0900"),  # owes 151
                         book("p_self", "S_PC_13_0900")),  # owes 150
    "R08_LATE_CANCEL": (call("cancel_appointment", appointment_id="A23"),  # 23 hours ahead
                        call("cancel_appointment", appointment_id="A24")),  # 24 hours ahead
    "R09_LOCKED": (move("A_STARTED", "S_PC_13_0900"),  # started 30 minutes ago
                   move("A_SOON", "S_PC_13_0900")),  # starts in 30 minutes
    "R10_RESCHEDULE": (move("B1", "S_PC2_20_0900"),  # moved twice already
                       move("B2", "S_PC2_20_0900")),  # moved once
    "R11_REFILLS_LEFT": (refill("RX_NONE"), refill("RX_OK")),
    "R12_REFILL_TOO_EARLY": (refill("RX_EARLY"), refill("RX_FIRST")),
    "R13_RX_EXPIRED": (refill("RX_EXP"), refill("RX_TODAY")),
}
# Further branches of compound rules, each must be rejected with its rule id.
MORE_VIOLATIONS = [
    ("R03_REFERRAL", book("p_adult", "S_CARD_15", "consultation")),  # plan needs a referral
    ("R03_REFERRAL", book("p_hmo2", "S_CARD_15", "consultation", "REF_FULL")),  # no visits left
    ("R03_REFERRAL", book("p_hmo2", "S_CARD_15", "consultation", "REF_OK")),  # someone else's
    ("R04_AGE_RANGE", book("p_teen", "S_PC_13_0900", "annual_physical")),  # under 18
    ("R09_LOCKED", call("cancel_appointment", appointment_id="A_STARTED", accept_late_fee=True)),
    ("R09_LOCKED", call("cancel_appointment", appointment_id="A_CANC")),
    ("R10_RESCHEDULE", move("B2", "S_PC_13_0900")),  # another provider
    ("R01_SLOT_OPEN", move("B2", "S_PC2_14_0920")),  # booked by another patient
    ("R05_NO_OVERLAP", move("A_SOON", "S_PC_14_0900")),  # onto A_SELF's time
]
