-- The world kit's change log: a change of {{table}}.{{column}} appends a ledger row for the
-- record NEW.{{ref}}: the event {{event}} (an SQL expression: a quoted name, or a column of
-- NEW), the money it moved (amount, 0 unless given) and 'old -> new' in the detail. A schema takes it
-- after `-- include: ledger` with the line `-- include: ledger_change name=TRIGGER
-- table=TABLE column=COLUMN ref=ID_COLUMN event='EVENT' [amount="EXPR"] [format=%d]`.
CREATE TRIGGER {{name}} AFTER UPDATE OF {{column}} ON {{table}}
WHEN NEW.{{column}} IS NOT OLD.{{column}}
BEGIN
    INSERT INTO ledger_append VALUES (NEW.{{ref}}, {{event}}, {{amount:0}},
        printf('{{format:%s}} -> {{format:%s}}', OLD.{{column}}, NEW.{{column}}));
END;
