-- Nimbus Mobile: tables, constraints and the policy's rules compiled as triggers.
-- BEFORE triggers check a rule and RAISE(ABORT, '<RULE_ID>: message'); AFTER triggers
-- apply side effects (bill balances, automatic reconnection, suspension counters, early
-- termination fees, roaming switched off with its pass). Named CHECKs carry rule ids too.
-- Money is in whole currency units; data in MB (1 GB = 1024 MB); dates are YYYY-MM-DD
-- and compared with the world clock, meta 'now'.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE plans (
    plan_id          TEXT PRIMARY KEY,
    name             TEXT NOT NULL UNIQUE,
    monthly_fee      INTEGER NOT NULL CHECK (monthly_fee > 0),
    data_gb          INTEGER NOT NULL CHECK (data_gb > 0),
    roaming_included INTEGER NOT NULL DEFAULT 0 CHECK (roaming_included IN (0, 1)),
    contract_months  INTEGER NOT NULL DEFAULT 0 CHECK (contract_months IN (0, 12, 24)),
    status           TEXT NOT NULL CHECK (status IN ('available', 'retired'))
);

CREATE TABLE addons (
    addon_id    TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL CHECK (kind IN ('data', 'roaming', 'calls', 'insurance')),
    monthly_fee INTEGER NOT NULL CHECK (monthly_fee >= 0),
    data_gb     INTEGER NOT NULL DEFAULT 0 CHECK (data_gb >= 0)
);

CREATE TABLE customers (
    customer_id TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    email       TEXT NOT NULL,
    segment     TEXT NOT NULL CHECK (segment IN ('consumer', 'business')),
    since       TEXT NOT NULL
);

CREATE TABLE payment_methods (
    method_id   TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(customer_id),
    kind        TEXT NOT NULL CHECK (kind IN ('card', 'bank_account')),
    last4       TEXT NOT NULL,
    expires     TEXT,  -- YYYY-MM for cards (valid through that month), NULL for bank accounts
    CHECK ((kind = 'card') = (expires IS NOT NULL))
);

CREATE TABLE lines (
    line_id         TEXT PRIMARY KEY,
    customer_id     TEXT NOT NULL REFERENCES customers(customer_id),
    phone_number    TEXT NOT NULL UNIQUE,
    plan_id         TEXT NOT NULL REFERENCES plans(plan_id),
    status          TEXT NOT NULL CHECK (status IN ('active', 'suspended', 'terminated')),
    suspend_reason  TEXT CHECK (suspend_reason IN ('lost_or_stolen', 'travel', 'non_payment')),
    suspensions_ytd INTEGER NOT NULL DEFAULT 0
        CONSTRAINT R08_SUSPENSION_LIMIT CHECK (suspensions_ytd BETWEEN 0 AND 2),
    roaming_enabled INTEGER NOT NULL DEFAULT 0 CHECK (roaming_enabled IN (0, 1)),
    data_used_mb    INTEGER NOT NULL DEFAULT 0 CHECK (data_used_mb >= 0),
    contract_end    TEXT,  -- under contract while contract_end > today
    activated_at    TEXT NOT NULL,
    CHECK ((status = 'suspended') = (suspend_reason IS NOT NULL))
);

CREATE TABLE line_addons (
    line_id  TEXT NOT NULL REFERENCES lines(line_id),
    addon_id TEXT NOT NULL REFERENCES addons(addon_id),
    added_at TEXT NOT NULL,
    PRIMARY KEY (line_id, addon_id)
);

CREATE TABLE usage_records (
    line_id TEXT NOT NULL REFERENCES lines(line_id),
    day     TEXT NOT NULL,
    mb      INTEGER NOT NULL CHECK (mb >= 0),
    PRIMARY KEY (line_id, day)
);

CREATE TABLE bills (
    bill_id     TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(customer_id),
    period      TEXT NOT NULL,  -- YYYY-MM
    kind        TEXT NOT NULL CHECK (kind IN ('monthly', 'early_termination')),
    amount      INTEGER NOT NULL CHECK (amount > 0),
    amount_paid INTEGER NOT NULL DEFAULT 0 CHECK (amount_paid BETWEEN 0 AND amount),
    due_date    TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('open', 'paid')),
    CHECK ((status = 'paid') = (amount_paid = amount))
);

CREATE TABLE payments (
    payment_id TEXT PRIMARY KEY,
    bill_id    TEXT NOT NULL REFERENCES bills(bill_id),
    method_id  TEXT NOT NULL REFERENCES payment_methods(method_id),
    amount     INTEGER NOT NULL CONSTRAINT R04_PAYMENT_AMOUNT CHECK (amount > 0),
    paid_at    TEXT NOT NULL
);

CREATE INDEX lines_customer ON lines(customer_id, status);
CREATE INDEX bills_customer ON bills(customer_id, status, due_date);
CREATE INDEX methods_customer ON payment_methods(customer_id);
CREATE INDEX payments_bill ON payments(bill_id);

-- Lines and plans ------------------------------------------------------------------------

-- include: parent_status name=r01_plan_available_new event=INSERT table=lines parent=plans key=plan_id is="IS NOT 'available'" message='R01_PLAN_AVAILABLE: only plans currently offered can be chosen'

CREATE TRIGGER r01_plan_available_change BEFORE UPDATE OF plan_id ON lines
WHEN NEW.plan_id <> OLD.plan_id AND (SELECT status FROM plans WHERE plan_id = NEW.plan_id) IS NOT 'available'
BEGIN SELECT RAISE(ABORT, 'R01_PLAN_AVAILABLE: only plans currently offered can be chosen'); END;

CREATE TRIGGER r02_line_limit BEFORE INSERT ON lines
WHEN (SELECT COUNT(*) FROM lines WHERE customer_id = NEW.customer_id AND status <> 'terminated')
    >= (SELECT CASE segment WHEN 'business' THEN 8 ELSE 4 END FROM customers WHERE customer_id = NEW.customer_id)
BEGIN SELECT RAISE(ABORT, 'R02_LINE_LIMIT: the account already has the most lines its segment allows (consumer 4, business 8)'); END;

CREATE TRIGGER r11_contract_downgrade BEFORE UPDATE OF plan_id ON lines
WHEN NEW.plan_id <> OLD.plan_id
    AND OLD.contract_end > date((SELECT value FROM meta WHERE key = 'now'))
    AND (SELECT monthly_fee FROM plans WHERE plan_id = NEW.plan_id)
        < (SELECT monthly_fee FROM plans WHERE plan_id = OLD.plan_id)
BEGIN SELECT RAISE(ABORT, 'R11_CONTRACT_DOWNGRADE: a line under contract cannot move to a cheaper plan before its contract end date'); END;

CREATE TRIGGER r12_data_usage BEFORE UPDATE OF plan_id ON lines
WHEN NEW.plan_id <> OLD.plan_id
    AND OLD.data_used_mb > 1024 * ((SELECT data_gb FROM plans WHERE plan_id = NEW.plan_id)
        + (SELECT COALESCE(SUM(a.data_gb), 0) FROM line_addons la JOIN addons a USING (addon_id)
           WHERE la.line_id = OLD.line_id))
BEGIN SELECT RAISE(ABORT, 'R12_DATA_USAGE: data already used this cycle exceeds the new plan''s allowance'); END;

-- Suspended and terminated lines ------------------------------------------------------------

-- include: final_status name=r13_terminated_final table=lines status='terminated' message='R13_TERMINATED_FINAL: a terminated line cannot be changed or reactivated'

-- include: parent_status name=r13_terminated_addon event=INSERT table=line_addons parent=lines key=line_id is="= 'terminated'" message='R13_TERMINATED_FINAL: a terminated line cannot be changed or reactivated'

CREATE TRIGGER r07_suspended_plan BEFORE UPDATE OF plan_id ON lines
WHEN NEW.plan_id <> OLD.plan_id AND OLD.status = 'suspended'
BEGIN SELECT RAISE(ABORT, 'R07_LINE_SUSPENDED: a suspended line must be resumed before plans, add-ons or roaming change'); END;

CREATE TRIGGER r07_suspended_roaming BEFORE UPDATE OF roaming_enabled ON lines
WHEN NEW.roaming_enabled = 1 AND OLD.roaming_enabled = 0 AND OLD.status = 'suspended'
BEGIN SELECT RAISE(ABORT, 'R07_LINE_SUSPENDED: a suspended line must be resumed before plans, add-ons or roaming change'); END;

-- include: parent_status name=r07_suspended_addon event=INSERT table=line_addons parent=lines key=line_id is="= 'suspended'" message='R07_LINE_SUSPENDED: a suspended line must be resumed before plans, add-ons or roaming change'

CREATE TRIGGER r08_suspension_limit BEFORE UPDATE OF status ON lines
WHEN NEW.status = 'suspended' AND OLD.status = 'active'
    AND NEW.suspend_reason IS NOT 'non_payment' AND OLD.suspensions_ytd >= 2
BEGIN SELECT RAISE(ABORT, 'R08_SUSPENSION_LIMIT: a line can be suspended on request at most twice a calendar year'); END;

-- Add-ons and roaming ---------------------------------------------------------------------

CREATE TRIGGER r10_addon_limit BEFORE INSERT ON line_addons
WHEN (SELECT COUNT(*) FROM line_addons WHERE line_id = NEW.line_id) >= 3
BEGIN SELECT RAISE(ABORT, 'R10_ADDON_LIMIT: a line can carry at most 3 add-ons'); END;

CREATE TRIGGER r09_roaming_pass BEFORE UPDATE OF roaming_enabled ON lines
WHEN NEW.roaming_enabled = 1 AND OLD.roaming_enabled = 0
    AND (SELECT roaming_included FROM plans WHERE plan_id = NEW.plan_id) = 0
    AND NOT EXISTS (SELECT 1 FROM line_addons la JOIN addons a USING (addon_id)
                    WHERE la.line_id = NEW.line_id AND a.kind = 'roaming')
BEGIN SELECT RAISE(ABORT, 'R09_ROAMING_PASS: roaming needs a plan that includes it or a roaming pass on the line'); END;

-- Overdue balance: no new lines, add-ons, plan changes, roaming or reconnection ----------------

CREATE TRIGGER r03_overdue_new_line BEFORE INSERT ON lines
WHEN EXISTS (SELECT 1 FROM bills WHERE customer_id = NEW.customer_id AND status = 'open'
             AND due_date < date((SELECT value FROM meta WHERE key = 'now')))
BEGIN SELECT RAISE(ABORT, 'R03_OVERDUE_BALANCE: the account has an overdue bill; it must be paid first'); END;

CREATE TRIGGER r03_overdue_addon BEFORE INSERT ON line_addons
WHEN EXISTS (SELECT 1 FROM bills WHERE status = 'open'
             AND customer_id = (SELECT customer_id FROM lines WHERE line_id = NEW.line_id)
             AND due_date < date((SELECT value FROM meta WHERE key = 'now')))
BEGIN SELECT RAISE(ABORT, 'R03_OVERDUE_BALANCE: the account has an overdue bill; it must be paid first'); END;

CREATE TRIGGER r03_overdue_plan BEFORE UPDATE OF plan_id ON lines
WHEN NEW.plan_id <> OLD.plan_id
    AND EXISTS (SELECT 1 FROM bills WHERE customer_id = OLD.customer_id AND status = 'open'
                AND due_date < date((SELECT value FROM meta WHERE key = 'now')))
BEGIN SELECT RAISE(ABORT, 'R03_OVERDUE_BALANCE: the account has an overdue bill; it must be paid first'); END;

CREATE TRIGGER r03_overdue_roaming BEFORE UPDATE OF roaming_enabled ON lines
WHEN NEW.roaming_enabled = 1 AND OLD.roaming_enabled = 0
    AND EXISTS (SELECT 1 FROM bills WHERE customer_id = OLD.customer_id AND status = 'open'
                AND due_date < date((SELECT value FROM meta WHERE key = 'now')))
BEGIN SELECT RAISE(ABORT, 'R03_OVERDUE_BALANCE: the account has an overdue bill; it must be paid first'); END;

CREATE TRIGGER r03_overdue_resume BEFORE UPDATE OF status ON lines
WHEN OLD.status = 'suspended' AND NEW.status = 'active'
    AND EXISTS (SELECT 1 FROM bills WHERE customer_id = OLD.customer_id AND status = 'open'
                AND due_date < date((SELECT value FROM meta WHERE key = 'now')))
BEGIN SELECT RAISE(ABORT, 'R03_OVERDUE_BALANCE: the account has an overdue bill; it must be paid first'); END;

-- Payments ----------------------------------------------------------------------------------

CREATE TRIGGER r04_payment_amount BEFORE INSERT ON payments
WHEN NEW.amount > (SELECT amount - amount_paid FROM bills WHERE bill_id = NEW.bill_id)
BEGIN SELECT RAISE(ABORT, 'R04_PAYMENT_AMOUNT: a payment cannot exceed what is still owed on the bill'); END;

CREATE TRIGGER r05_method_owner BEFORE INSERT ON payments
WHEN (SELECT customer_id FROM payment_methods WHERE method_id = NEW.method_id)
    IS NOT (SELECT customer_id FROM bills WHERE bill_id = NEW.bill_id)
BEGIN SELECT RAISE(ABORT, 'R05_METHOD_OWNER: the payment method does not belong to the bill''s account'); END;

CREATE TRIGGER r06_card_expired BEFORE INSERT ON payments
WHEN (SELECT expires FROM payment_methods WHERE method_id = NEW.method_id)
    < strftime('%Y-%m', (SELECT value FROM meta WHERE key = 'now'))
BEGIN SELECT RAISE(ABORT, 'R06_CARD_EXPIRED: the card has expired'); END;

-- Side effects --------------------------------------------------------------------------------

-- A payment reduces the bill; once nothing is overdue, lines cut off for non-payment reconnect.
CREATE TRIGGER fx_payment AFTER INSERT ON payments
BEGIN
    UPDATE bills SET amount_paid = amount_paid + NEW.amount,
                     status = CASE WHEN amount_paid + NEW.amount = amount THEN 'paid' ELSE 'open' END
        WHERE bill_id = NEW.bill_id;
    UPDATE lines SET status = 'active', suspend_reason = NULL
        WHERE customer_id = (SELECT customer_id FROM bills WHERE bill_id = NEW.bill_id)
          AND status = 'suspended' AND suspend_reason = 'non_payment'
          AND NOT EXISTS (SELECT 1 FROM bills b WHERE b.customer_id = lines.customer_id AND b.status = 'open'
                          AND b.due_date < date((SELECT value FROM meta WHERE key = 'now')));
END;

-- A suspension on request counts towards the yearly limit.
CREATE TRIGGER fx_suspend AFTER UPDATE OF status ON lines
WHEN NEW.status = 'suspended' AND OLD.status = 'active' AND NEW.suspend_reason IS NOT 'non_payment'
BEGIN
    UPDATE lines SET suspensions_ytd = suspensions_ytd + 1 WHERE line_id = NEW.line_id;
END;

-- Terminating a line drops its add-ons and, under contract, bills an early termination fee of
-- 20 per remaining month or part of a month, due in 14 days.
CREATE TRIGGER fx_terminate AFTER UPDATE OF status ON lines
WHEN NEW.status = 'terminated' AND OLD.status <> 'terminated'
BEGIN
    DELETE FROM line_addons WHERE line_id = NEW.line_id;
    INSERT INTO bills (bill_id, customer_id, period, kind, amount, amount_paid, due_date, status)
    SELECT 'etf_' || NEW.line_id, NEW.customer_id, strftime('%Y-%m', (SELECT value FROM meta WHERE key = 'now')),
           'early_termination',
           20 * CAST((julianday(NEW.contract_end) - julianday(date((SELECT value FROM meta WHERE key = 'now'))) + 29)
                     / 30 AS INTEGER),
           0, date((SELECT value FROM meta WHERE key = 'now'), '+14 days'), 'open'
    WHERE NEW.contract_end > date((SELECT value FROM meta WHERE key = 'now'));
END;

-- Moving to a contract plan starts (or extends) a contract of that plan's length from today.
CREATE TRIGGER fx_plan_contract AFTER UPDATE OF plan_id ON lines
WHEN NEW.plan_id <> OLD.plan_id AND (SELECT contract_months FROM plans WHERE plan_id = NEW.plan_id) > 0
BEGIN
    UPDATE lines SET contract_end = MAX(COALESCE(OLD.contract_end, ''),
        date((SELECT value FROM meta WHERE key = 'now'),
             '+' || (SELECT contract_months FROM plans WHERE plan_id = NEW.plan_id) || ' months'))
        WHERE line_id = NEW.line_id;
END;

-- Roaming switches off when the line loses what allowed it (its pass, or a plan that included it).
CREATE TRIGGER fx_pass_removed AFTER DELETE ON line_addons
WHEN (SELECT kind FROM addons WHERE addon_id = OLD.addon_id) = 'roaming'
BEGIN
    UPDATE lines SET roaming_enabled = 0
        WHERE line_id = OLD.line_id AND roaming_enabled = 1 AND status <> 'terminated'
          AND (SELECT roaming_included FROM plans WHERE plan_id = lines.plan_id) = 0
          AND NOT EXISTS (SELECT 1 FROM line_addons la JOIN addons a USING (addon_id)
                          WHERE la.line_id = lines.line_id AND a.kind = 'roaming');
END;

CREATE TRIGGER fx_plan_roaming AFTER UPDATE OF plan_id ON lines
WHEN NEW.roaming_enabled = 1 AND (SELECT roaming_included FROM plans WHERE plan_id = NEW.plan_id) = 0
    AND NOT EXISTS (SELECT 1 FROM line_addons la JOIN addons a USING (addon_id)
                    WHERE la.line_id = NEW.line_id AND a.kind = 'roaming')
BEGIN
    UPDATE lines SET roaming_enabled = 0 WHERE line_id = NEW.line_id;
END;

-- Usage records add up to the line's data used this billing cycle.
CREATE TRIGGER fx_usage AFTER INSERT ON usage_records
BEGIN
    UPDATE lines SET data_used_mb = data_used_mb + NEW.mb WHERE line_id = NEW.line_id;
END;

-- The ledger (the kit's: ref, event, amount, detail, n) ---------------------------------
-- Every line added, plan change, add-on added or removed, roaming switch, suspension,
-- resumption (reconnections included) and termination appends a row for its line, and so
-- does every bill issued (early termination fees included) and every payment, with its
-- amount (bills and payments: the amount billed or paid; 0 for changes without money).
-- A detour (an add-on added and removed, roaming on and off again) leaves its rows.
-- include: ledger

-- include: ledger_insert name=log_line table=lines ref=line_id event='line_added' detail="printf('%s %s, %s', NEW.phone_number, NEW.plan_id, NEW.customer_id)"

-- include: ledger_change name=log_plan table=lines column=plan_id ref=line_id event='plan_changed'

-- include: ledger_change name=log_line_status table=lines column=status ref=line_id event="CASE NEW.status WHEN 'suspended' THEN 'suspended' WHEN 'active' THEN 'resumed' ELSE 'terminated' END" detail="printf('%s -> %s%s', OLD.status, NEW.status, CASE WHEN ifnull(NEW.suspend_reason, OLD.suspend_reason) IS NOT NULL THEN ': ' || ifnull(NEW.suspend_reason, OLD.suspend_reason) ELSE '' END)"

CREATE TRIGGER log_roaming AFTER UPDATE OF roaming_enabled ON lines
WHEN NEW.roaming_enabled <> OLD.roaming_enabled
BEGIN
    INSERT INTO ledger_append VALUES (NEW.line_id,
        CASE WHEN NEW.roaming_enabled = 1 THEN 'roaming_on' ELSE 'roaming_off' END, 0, '');
END;

-- include: ledger_insert name=log_addon_added table=line_addons ref=line_id event='addon_added' detail=NEW.addon_id

CREATE TRIGGER log_addon_removed AFTER DELETE ON line_addons
BEGIN
    INSERT INTO ledger_append VALUES (OLD.line_id, 'addon_removed', 0, OLD.addon_id);
END;

-- include: ledger_insert name=log_bill table=bills ref=bill_id event='billed' amount=NEW.amount detail="printf('%s %s, %s', NEW.kind, NEW.period, NEW.customer_id)"

-- include: ledger_insert name=log_payment table=payments ref=bill_id event='paid' amount=NEW.amount detail=NEW.method_id
