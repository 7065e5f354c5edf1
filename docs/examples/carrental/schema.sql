-- Carrental: tables, then each rule compiled where SQLite enforces it.
-- BEFORE triggers raise '<RULE_ID>: message'; a named CHECK carries its rule id;
-- AFTER triggers apply side effects.

CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE customers (
    customer_id     TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    license_expires TEXT NOT NULL
);

CREATE TABLE cars (
    car_id     TEXT PRIMARY KEY,
    model      TEXT NOT NULL,
    daily_rate INTEGER NOT NULL CHECK (daily_rate > 0),
    status     TEXT NOT NULL CHECK (status IN ('available', 'rented', 'maintenance'))
);

CREATE TABLE rentals (
    rental_id   TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(customer_id),
    car_id      TEXT NOT NULL REFERENCES cars(car_id),
    start_date  TEXT NOT NULL,
    days        INTEGER NOT NULL CONSTRAINT R03_MAX_DAYS CHECK (days BETWEEN 1 AND 14),
    total       INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('active', 'returned'))
);

CREATE TRIGGER r01_car_available BEFORE INSERT ON rentals
WHEN (SELECT status FROM cars WHERE car_id = NEW.car_id) IS NOT 'available'
BEGIN SELECT RAISE(ABORT, 'R01_CAR_AVAILABLE: the car is not available'); END;

CREATE TRIGGER r02_license_valid BEFORE INSERT ON rentals
WHEN (SELECT license_expires FROM customers WHERE customer_id = NEW.customer_id)
     < date(NEW.start_date, '+' || NEW.days || ' days')
BEGIN SELECT RAISE(ABORT, 'R02_LICENSE_VALID: the licence expires before the return date'); END;

CREATE TRIGGER r02_license_valid_extend BEFORE UPDATE OF days ON rentals
WHEN (SELECT license_expires FROM customers WHERE customer_id = NEW.customer_id)
     < date(NEW.start_date, '+' || NEW.days || ' days')
BEGIN SELECT RAISE(ABORT, 'R02_LICENSE_VALID: the licence expires before the new return date'); END;

CREATE TRIGGER r04_one_active BEFORE INSERT ON rentals
WHEN EXISTS (SELECT 1 FROM rentals WHERE customer_id = NEW.customer_id AND status = 'active')
BEGIN SELECT RAISE(ABORT, 'R04_ONE_ACTIVE: the customer already has an active rental'); END;

CREATE TRIGGER r05_closed_final BEFORE UPDATE ON rentals
WHEN OLD.status = 'returned'
BEGIN SELECT RAISE(ABORT, 'R05_CLOSED_FINAL: a returned rental cannot change'); END;

CREATE TRIGGER fx_rent AFTER INSERT ON rentals
BEGIN UPDATE cars SET status = 'rented' WHERE car_id = NEW.car_id; END;

CREATE TRIGGER fx_return AFTER UPDATE OF status ON rentals
WHEN NEW.status = 'returned' AND OLD.status = 'active'
BEGIN UPDATE cars SET status = 'available' WHERE car_id = NEW.car_id; END;

-- The ledger: what happened. One row per rental, extension and return, with the money it
-- moved; `n` counts identical earlier rows (no sequence number, so independent writes give
-- the same rows in either order). No tool reads or writes it.
CREATE TABLE ledger (
    ref    TEXT NOT NULL,               -- the rental
    event  TEXT NOT NULL,               -- rented, extended, returned
    amount INTEGER NOT NULL DEFAULT 0,  -- money charged (> 0) or refunded (< 0)
    detail TEXT NOT NULL DEFAULT '',
    n      INTEGER NOT NULL,
    PRIMARY KEY (ref, event, amount, detail, n)
);

CREATE VIEW ledger_append AS SELECT ref, event, amount, detail FROM ledger;

CREATE TRIGGER ledger_number INSTEAD OF INSERT ON ledger_append
BEGIN
    INSERT INTO ledger (ref, event, amount, detail, n)
    SELECT NEW.ref, NEW.event, NEW.amount, NEW.detail, COUNT(*) FROM ledger
        WHERE ref = NEW.ref AND event = NEW.event AND amount = NEW.amount AND detail = NEW.detail;
END;

CREATE TRIGGER log_rent AFTER INSERT ON rentals
BEGIN
    INSERT INTO ledger_append VALUES (NEW.rental_id, 'rented', NEW.total, printf('%s x%d days', NEW.car_id, NEW.days));
END;

CREATE TRIGGER log_extend AFTER UPDATE OF days ON rentals
WHEN NEW.days <> OLD.days
BEGIN
    INSERT INTO ledger_append VALUES (NEW.rental_id, 'extended', NEW.total - OLD.total,
                                      printf('%d -> %d days', OLD.days, NEW.days));
END;

CREATE TRIGGER log_return AFTER UPDATE OF status ON rentals
WHEN NEW.status <> OLD.status
BEGIN
    INSERT INTO ledger_append VALUES (NEW.rental_id, NEW.status, 0, '');
END;
