-- The world kit's stored payment methods: each belongs to one {{owner}} of {{owners}}, is of
-- one of the kinds {{kinds}}, and may hold a balance (gift cards, certificates) that never
-- goes below zero (the rule {{rule}}); `checks` says which kinds have a balance and a last4.
-- A schema takes it with the line `-- include: payment_methods owner=ID_COLUMN owners=TABLE
-- kinds="'KIND', ..." rule=RULE checks="CHECK (...), ..."`.
CREATE TABLE payment_methods (
    payment_id TEXT PRIMARY KEY,
    {{owner}} TEXT NOT NULL REFERENCES {{owners}}({{owner}}),
    kind       TEXT NOT NULL CHECK (kind IN ({{kinds}})),
    last4      TEXT,
    balance    INTEGER CONSTRAINT {{rule}} CHECK (balance IS NULL OR balance >= 0),
    {{checks}}
);
