-- The world kit's record log: a new row of {{table}} appends a ledger row for the record
-- NEW.{{ref}}: the event {{event}} (a quoted name), the money it moved (amount, an SQL
-- expression on NEW; 0 unless given) and its detail (an SQL expression; '' unless given). A
-- schema takes it after `-- include: ledger` with the line `-- include: ledger_insert
-- name=TRIGGER table=TABLE ref=ID_COLUMN event='EVENT' [amount=EXPR] [detail="EXPR"]`.
CREATE TRIGGER {{name}} AFTER INSERT ON {{table}}
BEGIN
    INSERT INTO ledger_append VALUES (NEW.{{ref}}, {{event}}, {{amount:0}}, {{detail:''}});
END;
