-- The world kit's ledger: what happened, one row per event. A world's schema.sql takes it
-- with the line `-- include: ledger` (the loader puts this file there) and then declares
-- the AFTER triggers that append its events, with the money each moved, through the
-- `ledger_append` view. A detour that ends where it started leaves its rows, so it no longer
-- reaches the target's state hash. Rows have no sequence number: `n` counts the identical
-- rows before it, so independent writes in either order give the same rows, and the same
-- event twice gives two. No tool reads or writes the ledger.

CREATE TABLE ledger (
    ref    TEXT NOT NULL,               -- the record the event is about (the world's id)
    event  TEXT NOT NULL,               -- what happened: booked, cancelled, paid, ...
    amount INTEGER NOT NULL DEFAULT 0,  -- money moved (the world's triggers say which sign is which)
    detail TEXT NOT NULL DEFAULT '',
    n      INTEGER NOT NULL,            -- identical rows before this one
    PRIMARY KEY (ref, event, amount, detail, n)
);

CREATE VIEW ledger_append AS SELECT ref, event, amount, detail FROM ledger;

CREATE TRIGGER ledger_number INSTEAD OF INSERT ON ledger_append
BEGIN
    INSERT INTO ledger (ref, event, amount, detail, n)
    SELECT NEW.ref, NEW.event, ifnull(NEW.amount, 0), ifnull(NEW.detail, ''), COUNT(*) FROM ledger
        WHERE ref = NEW.ref AND event = NEW.event AND amount = ifnull(NEW.amount, 0)
          AND detail = ifnull(NEW.detail, '');
END;
