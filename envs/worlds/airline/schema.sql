-- Horizon Air Transit: tables, constraints and the policy's rules compiled as triggers.
-- BEFORE triggers check a rule and RAISE(ABORT, '<RULE_ID>: message'); AFTER triggers
-- apply side effects (seat counts, balances, fees). Named CHECKs carry rule ids too.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE users (
    user_id    TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    email      TEXT NOT NULL,
    membership TEXT NOT NULL CHECK (membership IN ('regular', 'silver', 'gold'))
);

-- include: payment_methods owner=user_id owners=users kinds="'credit_card', 'gift_card', 'certificate'" rule=R04_BALANCE checks="CHECK ((kind = 'credit_card') = (balance IS NULL))"

CREATE TABLE flights (
    flight_id       TEXT PRIMARY KEY,
    flight_number   TEXT NOT NULL,
    origin          TEXT NOT NULL,
    destination     TEXT NOT NULL,
    date            TEXT NOT NULL,
    departure       TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('scheduled', 'delayed', 'cancelled', 'departed')),
    seats_available INTEGER NOT NULL CONSTRAINT R02_SEATS CHECK (seats_available >= 0),
    price_basic     INTEGER NOT NULL CHECK (price_basic > 0),
    price_economy   INTEGER NOT NULL CHECK (price_economy >= price_basic),
    price_business  INTEGER NOT NULL CHECK (price_business >= price_economy),
    CHECK (origin <> destination)
);

CREATE TABLE reservations (
    reservation_id TEXT PRIMARY KEY,
    user_id        TEXT NOT NULL REFERENCES users(user_id),
    flight_id      TEXT NOT NULL REFERENCES flights(flight_id),
    cabin          TEXT NOT NULL CHECK (cabin IN ('basic_economy', 'economy', 'business')),
    passengers     INTEGER NOT NULL CONSTRAINT R05_PASSENGERS CHECK (passengers BETWEEN 1 AND 5),
    payment_id     TEXT NOT NULL REFERENCES payment_methods(payment_id),
    insurance      INTEGER NOT NULL DEFAULT 0 CHECK (insurance IN (0, 1)),
    bags           INTEGER NOT NULL DEFAULT 0 CHECK (bags >= 0),
    total_paid     INTEGER NOT NULL CHECK (total_paid >= 0),
    status         TEXT NOT NULL CHECK (status IN ('active', 'cancelled')),
    created_at     TEXT NOT NULL
);

CREATE INDEX reservations_user ON reservations(user_id);
CREATE INDEX flights_route ON flights(origin, destination, date);

-- Booking rules -----------------------------------------------------------------------

-- include: parent_status name=r01_bookable_insert event=INSERT table=reservations parent=flights key=flight_id is="<> 'scheduled'" message='R01_FLIGHT_BOOKABLE: only scheduled flights can be booked'

CREATE TRIGGER r02_seats_insert BEFORE INSERT ON reservations
WHEN (SELECT seats_available FROM flights WHERE flight_id = NEW.flight_id) < NEW.passengers
BEGIN SELECT RAISE(ABORT, 'R02_SEATS: not enough free seats on this flight'); END;

CREATE TRIGGER r03_payment_owner BEFORE INSERT ON reservations
WHEN (SELECT user_id FROM payment_methods WHERE payment_id = NEW.payment_id) IS NOT NEW.user_id
BEGIN SELECT RAISE(ABORT, 'R03_PAYMENT_OWNER: the payment method does not belong to this user'); END;

CREATE TRIGGER r04_balance_insert BEFORE INSERT ON reservations
WHEN (SELECT balance FROM payment_methods WHERE payment_id = NEW.payment_id) < NEW.total_paid
BEGIN SELECT RAISE(ABORT, 'R04_BALANCE: the gift card or certificate balance does not cover the amount'); END;

CREATE TRIGGER r11_no_duplicate BEFORE INSERT ON reservations
WHEN NEW.status = 'active' AND EXISTS (
    SELECT 1 FROM reservations
    WHERE user_id = NEW.user_id AND flight_id = NEW.flight_id AND status = 'active')
BEGIN SELECT RAISE(ABORT, 'R11_NO_DUPLICATE: the user already holds an active reservation on this flight'); END;

-- Change and cancellation rules --------------------------------------------------------

-- include: final_status name=r07_cancelled_final table=reservations status='cancelled' message='R07_CANCELLED_FINAL: a cancelled reservation cannot be changed'

-- include: parent_status name=r12_departed event=UPDATE table=reservations parent=flights key=flight_id row=OLD is="= 'departed'" message='R12_DEPARTED: the flight has departed; the reservation can no longer change'

CREATE TRIGGER r06_cancel_window BEFORE UPDATE OF status ON reservations
WHEN NEW.status = 'cancelled' AND OLD.status = 'active'
    AND (julianday((SELECT value FROM meta WHERE key = 'now')) - julianday(OLD.created_at)) * 24 > 24
    AND OLD.cabin <> 'business'
    AND OLD.insurance = 0
    AND (SELECT status FROM flights WHERE flight_id = OLD.flight_id) <> 'cancelled'
BEGIN SELECT RAISE(ABORT, 'R06_CANCEL_WINDOW: cancellation is only allowed within 24 hours of booking, for business cabin, with insurance, or when the airline cancelled the flight'); END;

CREATE TRIGGER r08_basic_no_change BEFORE UPDATE OF flight_id ON reservations
WHEN NEW.flight_id <> OLD.flight_id AND OLD.cabin = 'basic_economy'
BEGIN SELECT RAISE(ABORT, 'R08_BASIC_NO_CHANGE: basic economy reservations cannot change flights'); END;

CREATE TRIGGER r09_same_route BEFORE UPDATE OF flight_id ON reservations
WHEN NEW.flight_id <> OLD.flight_id AND (
    (SELECT origin || '>' || destination FROM flights WHERE flight_id = NEW.flight_id)
    IS NOT (SELECT origin || '>' || destination FROM flights WHERE flight_id = OLD.flight_id))
BEGIN SELECT RAISE(ABORT, 'R09_SAME_ROUTE: a flight change must keep the same origin and destination'); END;

CREATE TRIGGER r01_bookable_change BEFORE UPDATE OF flight_id ON reservations
WHEN NEW.flight_id <> OLD.flight_id
    AND (SELECT status FROM flights WHERE flight_id = NEW.flight_id) <> 'scheduled'
BEGIN SELECT RAISE(ABORT, 'R01_FLIGHT_BOOKABLE: only scheduled flights can be changed to'); END;

CREATE TRIGGER r02_seats_change BEFORE UPDATE OF flight_id ON reservations
WHEN NEW.flight_id <> OLD.flight_id
    AND (SELECT seats_available FROM flights WHERE flight_id = NEW.flight_id) < OLD.passengers
BEGIN SELECT RAISE(ABORT, 'R02_SEATS: not enough free seats on the new flight'); END;

CREATE TRIGGER r10_bag_limit BEFORE UPDATE OF bags ON reservations
WHEN NEW.bags > 3 * NEW.passengers
BEGIN SELECT RAISE(ABORT, 'R10_BAG_LIMIT: at most 3 checked bags per passenger'); END;

-- Side effects ---------------------------------------------------------------------------

CREATE TRIGGER fx_book AFTER INSERT ON reservations
BEGIN
    UPDATE flights SET seats_available = seats_available - NEW.passengers WHERE flight_id = NEW.flight_id;
    UPDATE payment_methods SET balance = balance - NEW.total_paid
        WHERE payment_id = NEW.payment_id AND balance IS NOT NULL;
END;

CREATE TRIGGER fx_cancel AFTER UPDATE OF status ON reservations
WHEN NEW.status = 'cancelled' AND OLD.status = 'active'
BEGIN
    UPDATE flights SET seats_available = seats_available + OLD.passengers WHERE flight_id = OLD.flight_id;
    UPDATE payment_methods SET balance = balance + OLD.total_paid
        WHERE payment_id = OLD.payment_id AND balance IS NOT NULL;
END;

CREATE TRIGGER fx_change AFTER UPDATE OF flight_id ON reservations
WHEN NEW.flight_id <> OLD.flight_id
BEGIN
    UPDATE flights SET seats_available = seats_available + OLD.passengers WHERE flight_id = OLD.flight_id;
    UPDATE flights SET seats_available = seats_available - NEW.passengers WHERE flight_id = NEW.flight_id;
END;

CREATE TRIGGER fx_payment_delta AFTER UPDATE OF total_paid ON reservations
WHEN NEW.total_paid <> OLD.total_paid AND NEW.status = 'active'
BEGIN
    UPDATE payment_methods SET balance = balance - (NEW.total_paid - OLD.total_paid)
        WHERE payment_id = NEW.payment_id AND balance IS NOT NULL;
END;

-- The ledger (the kit's: ref, event, amount, detail, n) ---------------------------------
-- Every booking, cancellation, flight change and baggage change appends a row for its
-- reservation, with the money it moved (amount > 0: charged to the customer, < 0: refunded).
-- A detour (bags 2 -> 0 -> 2, a flight changed away and back) leaves its rows.
-- include: ledger

-- include: ledger_insert name=log_book table=reservations ref=reservation_id event='booked' amount=NEW.total_paid detail="printf('%s %s x%d%s, %s', NEW.flight_id, NEW.cabin, NEW.passengers, CASE WHEN NEW.insurance THEN ' insured' ELSE '' END, NEW.payment_id)"

-- include: ledger_change name=log_cancel table=reservations column=status ref=reservation_id event=NEW.status amount="CASE WHEN NEW.status = 'cancelled' THEN -OLD.total_paid ELSE 0 END" detail=OLD.payment_id

-- include: ledger_change name=log_change table=reservations column=flight_id ref=reservation_id event='flight_changed' amount="NEW.total_paid - OLD.total_paid"
-- include: ledger_change name=log_bags table=reservations column=bags ref=reservation_id event='bags_changed' amount="NEW.total_paid - OLD.total_paid" format=%d
