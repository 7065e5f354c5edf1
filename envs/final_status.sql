-- The world kit's final status: once a row of {{table}} has the status {{status}}, it cannot
-- change at all (the rule's message, an SQL string, says why). A schema takes it with the
-- line `-- include: final_status name=TRIGGER table=TABLE status='STATUS' message='RULE: ...'`.
CREATE TRIGGER {{name}} BEFORE UPDATE ON {{table}}
WHEN OLD.status = {{status}}
BEGIN SELECT RAISE(ABORT, {{message}}); END;
