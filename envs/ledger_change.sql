-- The world kit's change log: a change of {{table}}.{{column}} appends a ledger row for the
-- record NEW.{{ref}}: the event (an SQL expression: a quoted name, or one on NEW), the money
-- it moved (amount, 0 unless given) and its detail (an SQL expression; unless given, 'old ->
-- new' in the form `format`, %s unless given). A schema takes it after `-- include: ledger`
-- with the line `-- include: ledger_change name=TRIGGER table=TABLE column=COLUMN
-- ref=ID_COLUMN event='EVENT' [amount="EXPR"] [format=%d | detail="EXPR"]`.
CREATE TRIGGER {{name}} AFTER UPDATE OF {{column}} ON {{table}}
WHEN NEW.{{column}} IS NOT OLD.{{column}}
BEGIN
    INSERT INTO ledger_append VALUES (NEW.{{ref}}, {{event}}, {{amount:0}},
        {{detail:printf('{{format:%s}} -> {{format:%s}}', OLD.{{column}}, NEW.{{column}})}});
END;
