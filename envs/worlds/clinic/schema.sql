-- Riverbend Family Clinic: tables, constraints and the policy's rules compiled as triggers.
-- BEFORE triggers check a rule and RAISE(ABORT, '<RULE_ID>: message'); AFTER triggers apply
-- side effects (slot status, referral visits, late fees, refill counts, balances). Named
-- CHECKs carry rule ids too. Times are 'YYYY-MM-DD HH:MM:SS' text; meta 'now' is the clock.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE insurance_plans (
    plan_id           TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    requires_referral INTEGER NOT NULL CHECK (requires_referral IN (0, 1)),
    copay             INTEGER NOT NULL CHECK (copay >= 0)
);

CREATE TABLE patients (
    patient_id    TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    date_of_birth TEXT NOT NULL CHECK (date(date_of_birth) IS date_of_birth),
    phone         TEXT NOT NULL,
    plan_id       TEXT REFERENCES insurance_plans(plan_id),  -- NULL: self-pay
    card_last4    TEXT NOT NULL,
    balance_due   INTEGER NOT NULL DEFAULT 0 CHECK (balance_due >= 0)
);

CREATE TABLE providers (
    provider_id TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    specialty   TEXT NOT NULL CHECK (specialty IN
        ('primary_care', 'pediatrics', 'cardiology', 'dermatology', 'orthopedics')),
    location    TEXT NOT NULL
);

CREATE TABLE provider_plans (
    provider_id TEXT NOT NULL REFERENCES providers(provider_id),
    plan_id     TEXT NOT NULL REFERENCES insurance_plans(plan_id),
    PRIMARY KEY (provider_id, plan_id)
);

CREATE TABLE appointment_types (
    type_code       TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    offered_by      TEXT NOT NULL,  -- a specialty, 'specialist' or 'any'
    fee             INTEGER NOT NULL CHECK (fee > 0),
    late_cancel_fee INTEGER NOT NULL CHECK (late_cancel_fee >= 0),
    min_age         INTEGER NOT NULL DEFAULT 0,
    max_age         INTEGER NOT NULL DEFAULT 150,
    CHECK (min_age <= max_age)
);

CREATE TABLE slots (
    slot_id      TEXT PRIMARY KEY,
    provider_id  TEXT NOT NULL REFERENCES providers(provider_id),
    start_at     TEXT NOT NULL CHECK (datetime(start_at) IS start_at),
    duration_min INTEGER NOT NULL CHECK (duration_min > 0),
    status       TEXT NOT NULL CHECK (status IN ('open', 'booked', 'blocked'))
);

-- Each slot's start and end in whole seconds (R05 compares them).
CREATE VIEW slot_spans AS
SELECT slot_id, CAST(strftime('%s', start_at) AS INTEGER) AS start_s,
       CAST(strftime('%s', start_at) AS INTEGER) + 60 * duration_min AS end_s
FROM slots;

CREATE TABLE referrals (
    referral_id    TEXT PRIMARY KEY,
    patient_id     TEXT NOT NULL REFERENCES patients(patient_id),
    specialty      TEXT NOT NULL CHECK (specialty IN ('cardiology', 'dermatology', 'orthopedics')),
    issued_on      TEXT NOT NULL,
    expires_on     TEXT NOT NULL CHECK (expires_on >= issued_on),
    visits_allowed INTEGER NOT NULL CHECK (visits_allowed > 0),
    visits_used    INTEGER NOT NULL DEFAULT 0
        CONSTRAINT R03_REFERRAL CHECK (visits_used BETWEEN 0 AND visits_allowed)
);

CREATE TABLE appointments (
    appointment_id   TEXT PRIMARY KEY,
    patient_id       TEXT NOT NULL REFERENCES patients(patient_id),
    slot_id          TEXT NOT NULL REFERENCES slots(slot_id),
    type_code        TEXT NOT NULL REFERENCES appointment_types(type_code),
    referral_id      TEXT REFERENCES referrals(referral_id),
    status           TEXT NOT NULL CHECK (status IN ('scheduled', 'completed', 'no_show', 'cancelled')),
    fee              INTEGER NOT NULL CHECK (fee >= 0),
    reschedule_count INTEGER NOT NULL DEFAULT 0
        CONSTRAINT R10_RESCHEDULE CHECK (reschedule_count BETWEEN 0 AND 2),
    fee_accepted     INTEGER NOT NULL DEFAULT 0 CHECK (fee_accepted IN (0, 1)),  -- a request flag
    late_fee         INTEGER NOT NULL DEFAULT 0 CHECK (late_fee >= 0),
    booked_at        TEXT NOT NULL
);

CREATE TABLE prescriptions (
    rx_id             TEXT PRIMARY KEY,
    patient_id        TEXT NOT NULL REFERENCES patients(patient_id),
    provider_id       TEXT NOT NULL REFERENCES providers(provider_id),
    medication        TEXT NOT NULL,
    dosage            TEXT NOT NULL,
    days_supply       INTEGER NOT NULL CHECK (days_supply BETWEEN 7 AND 90),
    refills_remaining INTEGER NOT NULL CONSTRAINT R11_REFILLS_LEFT CHECK (refills_remaining >= 0),
    last_fill_date    TEXT NOT NULL CHECK (date(last_fill_date) IS last_fill_date),
    expires_on        TEXT NOT NULL CHECK (date(expires_on) IS expires_on),
    UNIQUE (patient_id, medication)
);

CREATE TABLE fills (
    fill_id   TEXT PRIMARY KEY,
    rx_id     TEXT NOT NULL REFERENCES prescriptions(rx_id),
    filled_on TEXT NOT NULL CHECK (date(filled_on) IS filled_on)
);

CREATE TABLE payments (
    payment_id TEXT PRIMARY KEY,
    patient_id TEXT NOT NULL REFERENCES patients(patient_id),
    amount     INTEGER NOT NULL CHECK (amount > 0),
    paid_at    TEXT NOT NULL
);

CREATE INDEX appointments_patient ON appointments(patient_id, status);
CREATE INDEX appointments_slot ON appointments(slot_id);
CREATE INDEX slots_provider ON slots(provider_id, start_at);
CREATE INDEX referrals_patient ON referrals(patient_id);
CREATE INDEX prescriptions_patient ON prescriptions(patient_id);

-- Booking rules ------------------------------------------------------------------------

CREATE TRIGGER r01_slot_open_insert BEFORE INSERT ON appointments
WHEN (SELECT status FROM slots WHERE slot_id = NEW.slot_id) IS NOT 'open'
  OR (SELECT start_at FROM slots WHERE slot_id = NEW.slot_id) <= (SELECT value FROM meta WHERE key = 'now')
BEGIN SELECT RAISE(ABORT, 'R01_SLOT_OPEN: the slot is not open or has already started'); END;

CREATE TRIGGER r02_in_network BEFORE INSERT ON appointments
WHEN (SELECT plan_id FROM patients WHERE patient_id = NEW.patient_id) IS NOT NULL
  AND NOT EXISTS (
    SELECT 1 FROM slots s JOIN provider_plans pp ON pp.provider_id = s.provider_id
    WHERE s.slot_id = NEW.slot_id
      AND pp.plan_id = (SELECT plan_id FROM patients WHERE patient_id = NEW.patient_id))
BEGIN SELECT RAISE(ABORT, 'R02_IN_NETWORK: the provider does not accept the patient''s insurance plan'); END;

CREATE TRIGGER r03_referral_required BEFORE INSERT ON appointments
WHEN NEW.referral_id IS NULL
  AND (SELECT i.requires_referral FROM patients p JOIN insurance_plans i ON i.plan_id = p.plan_id
       WHERE p.patient_id = NEW.patient_id) = 1
  AND (SELECT pr.specialty FROM slots s JOIN providers pr ON pr.provider_id = s.provider_id
       WHERE s.slot_id = NEW.slot_id) NOT IN ('primary_care', 'pediatrics')
BEGIN SELECT RAISE(ABORT, 'R03_REFERRAL: the patient''s plan requires a referral for a specialist visit'); END;

CREATE TRIGGER r03_referral_matches BEFORE INSERT ON appointments
WHEN NEW.referral_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM referrals r
    WHERE r.referral_id = NEW.referral_id AND r.patient_id = NEW.patient_id
      AND r.specialty = (SELECT pr.specialty FROM slots s JOIN providers pr ON pr.provider_id = s.provider_id
                         WHERE s.slot_id = NEW.slot_id))
BEGIN SELECT RAISE(ABORT, 'R03_REFERRAL: the referral is not the patient''s referral for this provider''s specialty'); END;

CREATE TRIGGER r03_referral_expired_insert BEFORE INSERT ON appointments
WHEN NEW.referral_id IS NOT NULL
  AND (SELECT expires_on FROM referrals WHERE referral_id = NEW.referral_id)
      < date((SELECT start_at FROM slots WHERE slot_id = NEW.slot_id))
BEGIN SELECT RAISE(ABORT, 'R03_REFERRAL: the referral expires before the appointment date'); END;

CREATE TRIGGER r03_referral_used_up BEFORE INSERT ON appointments
WHEN NEW.referral_id IS NOT NULL
  AND (SELECT visits_used >= visits_allowed FROM referrals WHERE referral_id = NEW.referral_id)
BEGIN SELECT RAISE(ABORT, 'R03_REFERRAL: the referral has no visits left'); END;

CREATE TRIGGER r04_age_range_insert BEFORE INSERT ON appointments
WHEN EXISTS (
    SELECT 1 FROM patients p, appointment_types t, slots s
    WHERE p.patient_id = NEW.patient_id AND t.type_code = NEW.type_code AND s.slot_id = NEW.slot_id
      AND (date(p.date_of_birth, '+' || t.min_age || ' years') > date(s.start_at)
           OR date(p.date_of_birth, '+' || (t.max_age + 1) || ' years') <= date(s.start_at)))
BEGIN SELECT RAISE(ABORT, 'R04_AGE_RANGE: the patient''s age on the visit date is outside this appointment type''s range'); END;

CREATE TRIGGER r05_no_overlap_insert BEFORE INSERT ON appointments
WHEN EXISTS (
    SELECT 1 FROM appointments a JOIN slot_spans s ON s.slot_id = a.slot_id, slot_spans n
    WHERE n.slot_id = NEW.slot_id AND a.patient_id = NEW.patient_id AND a.status = 'scheduled'
      AND s.start_s < n.end_s AND n.start_s < s.end_s)
BEGIN SELECT RAISE(ABORT, 'R05_NO_OVERLAP: the patient already has a scheduled appointment at an overlapping time'); END;

CREATE TRIGGER r06_active_limit BEFORE INSERT ON appointments
WHEN (SELECT COUNT(*) FROM appointments a JOIN slots s ON s.slot_id = a.slot_id
      WHERE a.patient_id = NEW.patient_id AND a.status = 'scheduled'
        AND s.start_at > (SELECT value FROM meta WHERE key = 'now')) >= 3
BEGIN SELECT RAISE(ABORT, 'R06_ACTIVE_LIMIT: the patient already holds 3 upcoming scheduled appointments'); END;

CREATE TRIGGER r07_balance_hold BEFORE INSERT ON appointments
WHEN (SELECT balance_due FROM patients WHERE patient_id = NEW.patient_id) > 150
BEGIN SELECT RAISE(ABORT, 'R07_BALANCE_HOLD: the patient''s unpaid balance is over 150; it must be paid before booking'); END;

-- Change and cancellation rules ---------------------------------------------------------

CREATE TRIGGER r09_locked BEFORE UPDATE OF status, slot_id ON appointments
WHEN OLD.status <> 'scheduled'
  OR (SELECT start_at FROM slots WHERE slot_id = OLD.slot_id) <= (SELECT value FROM meta WHERE key = 'now')
BEGIN SELECT RAISE(ABORT, 'R09_LOCKED: the appointment is no longer scheduled or has already started'); END;

CREATE TRIGGER r08_late_cancel BEFORE UPDATE OF status ON appointments
WHEN NEW.status = 'cancelled' AND OLD.status = 'scheduled' AND NEW.fee_accepted = 0
  AND CAST(strftime('%s', (SELECT start_at FROM slots WHERE slot_id = OLD.slot_id)) AS INTEGER)
      - CAST(strftime('%s', (SELECT value FROM meta WHERE key = 'now')) AS INTEGER) BETWEEN 1 AND 86399
BEGIN SELECT RAISE(ABORT, 'R08_LATE_CANCEL: cancelling less than 24 hours before the start costs the late-cancellation fee; the patient must accept it'); END;

CREATE TRIGGER r10_reschedule_limit BEFORE UPDATE OF slot_id ON appointments
WHEN NEW.slot_id IS NOT OLD.slot_id AND OLD.status = 'scheduled' AND OLD.reschedule_count >= 2
BEGIN SELECT RAISE(ABORT, 'R10_RESCHEDULE: the appointment has already been rescheduled twice'); END;

CREATE TRIGGER r10_same_provider BEFORE UPDATE OF slot_id ON appointments
WHEN NEW.slot_id IS NOT OLD.slot_id
  AND (SELECT provider_id FROM slots WHERE slot_id = NEW.slot_id)
      IS NOT (SELECT provider_id FROM slots WHERE slot_id = OLD.slot_id)
BEGIN SELECT RAISE(ABORT, 'R10_RESCHEDULE: an appointment can only move to another slot of the same provider'); END;

CREATE TRIGGER r01_slot_open_reschedule BEFORE UPDATE OF slot_id ON appointments
WHEN NEW.slot_id IS NOT OLD.slot_id
  AND ((SELECT status FROM slots WHERE slot_id = NEW.slot_id) IS NOT 'open'
       OR (SELECT start_at FROM slots WHERE slot_id = NEW.slot_id) <= (SELECT value FROM meta WHERE key = 'now'))
BEGIN SELECT RAISE(ABORT, 'R01_SLOT_OPEN: the new slot is not open or has already started'); END;

CREATE TRIGGER r03_referral_expired_reschedule BEFORE UPDATE OF slot_id ON appointments
WHEN NEW.slot_id IS NOT OLD.slot_id AND OLD.referral_id IS NOT NULL
  AND (SELECT expires_on FROM referrals WHERE referral_id = OLD.referral_id)
      < date((SELECT start_at FROM slots WHERE slot_id = NEW.slot_id))
BEGIN SELECT RAISE(ABORT, 'R03_REFERRAL: the referral expires before the new appointment date'); END;

CREATE TRIGGER r04_age_range_reschedule BEFORE UPDATE OF slot_id ON appointments
WHEN NEW.slot_id IS NOT OLD.slot_id AND EXISTS (
    SELECT 1 FROM patients p, appointment_types t, slots s
    WHERE p.patient_id = OLD.patient_id AND t.type_code = OLD.type_code AND s.slot_id = NEW.slot_id
      AND (date(p.date_of_birth, '+' || t.min_age || ' years') > date(s.start_at)
           OR date(p.date_of_birth, '+' || (t.max_age + 1) || ' years') <= date(s.start_at)))
BEGIN SELECT RAISE(ABORT, 'R04_AGE_RANGE: the patient''s age on the new date is outside this appointment type''s range'); END;

CREATE TRIGGER r05_no_overlap_reschedule BEFORE UPDATE OF slot_id ON appointments
WHEN NEW.slot_id IS NOT OLD.slot_id AND EXISTS (
    SELECT 1 FROM appointments a JOIN slot_spans s ON s.slot_id = a.slot_id, slot_spans n
    WHERE n.slot_id = NEW.slot_id AND a.patient_id = OLD.patient_id AND a.status = 'scheduled'
      AND a.appointment_id <> OLD.appointment_id
      AND s.start_s < n.end_s AND n.start_s < s.end_s)
BEGIN SELECT RAISE(ABORT, 'R05_NO_OVERLAP: the new time overlaps another scheduled appointment of the patient'); END;

-- Prescription rules --------------------------------------------------------------------

CREATE TRIGGER r11_refills_left BEFORE INSERT ON fills
WHEN (SELECT refills_remaining FROM prescriptions WHERE rx_id = NEW.rx_id) < 1
BEGIN SELECT RAISE(ABORT, 'R11_REFILLS_LEFT: the prescription has no refills left'); END;

CREATE TRIGGER r12_refill_too_early BEFORE INSERT ON fills
WHEN NEW.filled_on < (SELECT date(last_fill_date, '+' || (days_supply - 7) || ' days')
                      FROM prescriptions WHERE rx_id = NEW.rx_id)
BEGIN SELECT RAISE(ABORT, 'R12_REFILL_TOO_EARLY: a refill is possible only from 7 days before the current supply runs out'); END;

CREATE TRIGGER r13_rx_expired BEFORE INSERT ON fills
WHEN NEW.filled_on > (SELECT expires_on FROM prescriptions WHERE rx_id = NEW.rx_id)
BEGIN SELECT RAISE(ABORT, 'R13_RX_EXPIRED: the prescription has expired'); END;

-- Side effects ---------------------------------------------------------------------------

CREATE TRIGGER fx_book AFTER INSERT ON appointments
WHEN NEW.status = 'scheduled'
BEGIN
    UPDATE slots SET status = 'booked' WHERE slot_id = NEW.slot_id;
    UPDATE referrals SET visits_used = visits_used + 1 WHERE referral_id = NEW.referral_id;
END;

CREATE TRIGGER fx_cancel AFTER UPDATE OF status ON appointments
WHEN NEW.status = 'cancelled' AND OLD.status = 'scheduled'
BEGIN
    UPDATE slots SET status = 'open' WHERE slot_id = OLD.slot_id;
    UPDATE referrals SET visits_used = visits_used - 1 WHERE referral_id = OLD.referral_id;
    -- The late fee (R08) applies under 24 hours before the start; the request flag is cleared.
    UPDATE appointments SET fee_accepted = 0, late_fee = CASE
        WHEN CAST(strftime('%s', (SELECT start_at FROM slots WHERE slot_id = OLD.slot_id)) AS INTEGER)
             - CAST(strftime('%s', (SELECT value FROM meta WHERE key = 'now')) AS INTEGER) < 86400
        THEN (SELECT late_cancel_fee FROM appointment_types WHERE type_code = OLD.type_code) ELSE 0 END
    WHERE appointment_id = NEW.appointment_id;
    UPDATE patients SET balance_due = balance_due
        + (SELECT late_fee FROM appointments WHERE appointment_id = NEW.appointment_id)
    WHERE patient_id = OLD.patient_id;
END;

CREATE TRIGGER fx_reschedule AFTER UPDATE OF slot_id ON appointments
WHEN NEW.slot_id IS NOT OLD.slot_id
BEGIN
    UPDATE slots SET status = 'open' WHERE slot_id = OLD.slot_id;
    UPDATE slots SET status = 'booked' WHERE slot_id = NEW.slot_id;
    UPDATE appointments SET reschedule_count = OLD.reschedule_count + 1
    WHERE appointment_id = NEW.appointment_id;
END;

CREATE TRIGGER fx_fill AFTER INSERT ON fills
BEGIN
    UPDATE prescriptions SET refills_remaining = refills_remaining - 1, last_fill_date = NEW.filled_on
    WHERE rx_id = NEW.rx_id;
END;

CREATE TRIGGER fx_payment AFTER INSERT ON payments
BEGIN
    UPDATE patients SET balance_due = balance_due - NEW.amount WHERE patient_id = NEW.patient_id;
END;

-- The ledger (the kit's: ref, event, amount, detail, n) ---------------------------------
-- Every appointment booked, cancelled (or closed), rescheduled, every late-cancellation fee,
-- refill and payment appends a row for its appointment, rx or patient, with the money it
-- moved (amount > 0: a fee charged to the patient or a payment made by them). A detour
-- (cancelled and booked again) leaves its rows.
-- include: ledger

-- include: ledger_insert name=log_book table=appointments ref=appointment_id event='booked' detail="printf('%s %s, %s', NEW.slot_id, NEW.type_code, NEW.patient_id)"

-- include: ledger_change name=log_appointment_status table=appointments column=status ref=appointment_id event=NEW.status

-- include: ledger_change name=log_late_fee table=appointments column=late_fee ref=appointment_id event='late_fee' amount="NEW.late_fee - OLD.late_fee" detail=NEW.patient_id

-- include: ledger_change name=log_reschedule table=appointments column=slot_id ref=appointment_id event='rescheduled'

-- include: ledger_insert name=log_fill table=fills ref=rx_id event='refilled' detail=NEW.filled_on

-- include: ledger_insert name=log_payment table=payments ref=patient_id event='paid' amount=NEW.amount
