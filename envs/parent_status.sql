-- The world kit's parent guard: a write ({{event}}: INSERT or UPDATE) to a row of {{table}}
-- is refused while the row of {{parent}} it names ({{row:NEW}}.{{key}}) has a status that
-- meets {{is}} (an SQL test: "= 'suspended'", "IS NOT 'open'"); the rule's message, an SQL
-- string, says why. A schema takes it with the line `-- include: parent_status name=TRIGGER
-- event=INSERT table=TABLE parent=PARENT key=KEY [row=OLD] is="TEST" message='RULE: ...'`.
CREATE TRIGGER {{name}} BEFORE {{event}} ON {{table}}
WHEN (SELECT status FROM {{parent}} WHERE {{key}} = {{row:NEW}}.{{key}}) {{is}}
BEGIN SELECT RAISE(ABORT, {{message}}); END;
