-- Northwind Goods: tables, constraints and the policy's rules compiled as triggers.
-- BEFORE triggers check a rule and RAISE(ABORT, '<RULE_ID>: message'); AFTER triggers
-- apply side effects (stock, gift-card balances, the money ledger). Named CHECKs carry
-- rule ids too. Times are compared in whole seconds so that limits are exact.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE customers (
    customer_id TEXT PRIMARY KEY,
    first_name  TEXT NOT NULL,
    last_name   TEXT NOT NULL,
    email       TEXT NOT NULL UNIQUE,
    zip         TEXT NOT NULL CHECK (length(zip) = 5),
    address     TEXT NOT NULL
);

-- include: payment_methods owner=customer_id owners=customers kinds="'credit_card', 'gift_card', 'paypal'" rule=R04_GIFT_BALANCE checks="CHECK ((kind = 'gift_card') = (balance IS NOT NULL)), CHECK ((kind = 'credit_card') = (last4 IS NOT NULL))"

CREATE TABLE products (
    product_id TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    category   TEXT NOT NULL
);

CREATE TABLE variants (
    variant_id TEXT PRIMARY KEY,
    product_id TEXT NOT NULL REFERENCES products(product_id),
    options    TEXT NOT NULL,  -- JSON object, e.g. {"color": "blue", "size": "M"}
    price      INTEGER NOT NULL CHECK (price > 0),
    stock      INTEGER NOT NULL CONSTRAINT R02_STOCK CHECK (stock >= 0),
    UNIQUE (product_id, options)
);

CREATE TABLE orders (
    order_id      TEXT PRIMARY KEY,
    customer_id   TEXT NOT NULL REFERENCES customers(customer_id),
    payment_id    TEXT NOT NULL REFERENCES payment_methods(payment_id),
    status        TEXT NOT NULL
                  CHECK (status IN ('pending', 'processed', 'shipped', 'delivered', 'cancelled')),
    address       TEXT NOT NULL,
    total         INTEGER NOT NULL CHECK (total >= 0),
    created_at    TEXT NOT NULL,
    delivered_at  TEXT,
    cancel_reason TEXT CHECK (cancel_reason IN ('no longer needed', 'ordered by mistake')),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK ((status = 'cancelled') = (cancel_reason IS NOT NULL))
);

CREATE TABLE order_items (
    order_id   TEXT NOT NULL REFERENCES orders(order_id),
    variant_id TEXT NOT NULL REFERENCES variants(variant_id),
    quantity   INTEGER NOT NULL CONSTRAINT R10_LINE_QUANTITY CHECK (quantity BETWEEN 1 AND 5),
    unit_price INTEGER NOT NULL CHECK (unit_price > 0),
    returned   INTEGER NOT NULL DEFAULT 0 CHECK (returned >= 0),
    exchanged  INTEGER NOT NULL DEFAULT 0 CHECK (exchanged >= 0),
    CONSTRAINT R07_ITEM_QUANTITY CHECK (returned + exchanged <= quantity),
    PRIMARY KEY (order_id, variant_id)
);

CREATE TABLE returns (
    return_id         TEXT PRIMARY KEY,
    order_id          TEXT NOT NULL,
    variant_id        TEXT NOT NULL,
    quantity          INTEGER NOT NULL CHECK (quantity >= 1),
    refund_payment_id TEXT NOT NULL REFERENCES payment_methods(payment_id),
    amount            INTEGER NOT NULL CHECK (amount >= 0),
    created_at        TEXT NOT NULL,
    FOREIGN KEY (order_id, variant_id) REFERENCES order_items(order_id, variant_id)
);

CREATE TABLE exchanges (
    exchange_id      TEXT PRIMARY KEY,
    order_id         TEXT NOT NULL,
    variant_id       TEXT NOT NULL,
    new_variant_id   TEXT NOT NULL REFERENCES variants(variant_id),
    quantity         INTEGER NOT NULL CHECK (quantity >= 1),
    payment_id       TEXT NOT NULL REFERENCES payment_methods(payment_id),
    price_difference INTEGER NOT NULL,  -- (new price - price paid) x quantity; > 0 is charged
    created_at       TEXT NOT NULL,
    FOREIGN KEY (order_id, variant_id) REFERENCES order_items(order_id, variant_id)
);

-- The money ledger: one row per charge or refund, keyed by what caused it.
CREATE TABLE transactions (
    order_id   TEXT NOT NULL REFERENCES orders(order_id),
    source     TEXT NOT NULL,  -- 'order', 'cancel', a return id or an exchange id
    payment_id TEXT NOT NULL REFERENCES payment_methods(payment_id),
    kind       TEXT NOT NULL CHECK (kind IN ('charge', 'refund')),
    amount     INTEGER NOT NULL CHECK (amount >= 0),
    created_at TEXT NOT NULL,
    PRIMARY KEY (order_id, source)
);

CREATE INDEX customers_name ON customers(last_name, first_name, zip);
CREATE INDEX payment_methods_customer ON payment_methods(customer_id);
CREATE INDEX orders_customer ON orders(customer_id);
CREATE INDEX order_items_variant ON order_items(variant_id);
CREATE INDEX returns_line ON returns(order_id, variant_id);
CREATE INDEX exchanges_line ON exchanges(order_id, variant_id);

-- Placing orders ------------------------------------------------------------------------

CREATE TRIGGER r03_payment_owner_order BEFORE INSERT ON orders
WHEN (SELECT customer_id FROM payment_methods WHERE payment_id = NEW.payment_id) IS NOT NEW.customer_id
BEGIN SELECT RAISE(ABORT, 'R03_PAYMENT_OWNER: the payment method does not belong to this customer'); END;

CREATE TRIGGER r04_balance_order BEFORE INSERT ON orders
WHEN (SELECT customer_id FROM payment_methods WHERE payment_id = NEW.payment_id) IS NEW.customer_id
    AND (SELECT balance FROM payment_methods WHERE payment_id = NEW.payment_id) < NEW.total
BEGIN SELECT RAISE(ABORT, 'R04_GIFT_BALANCE: the gift card balance does not cover the order total'); END;

CREATE TRIGGER r10_line_quantity BEFORE INSERT ON order_items
WHEN NEW.quantity NOT BETWEEN 1 AND 5
BEGIN SELECT RAISE(ABORT, 'R10_LINE_QUANTITY: an order holds between 1 and 5 units of each variant'); END;

CREATE TRIGGER r02_stock_order BEFORE INSERT ON order_items
WHEN NEW.quantity BETWEEN 1 AND 5
    AND (SELECT stock FROM variants WHERE variant_id = NEW.variant_id) < NEW.quantity
BEGIN SELECT RAISE(ABORT, 'R02_STOCK: not enough units of this variant in stock'); END;

-- Cancelling and changing orders ----------------------------------------------------------

-- include: final_status name=r12_cancelled_final table=orders status='cancelled' message='R12_CANCELLED_FINAL: a cancelled order cannot be changed'

CREATE TRIGGER r01_cancel_pending BEFORE UPDATE OF status ON orders
WHEN NEW.status = 'cancelled' AND OLD.status NOT IN ('pending', 'cancelled')
BEGIN SELECT RAISE(ABORT, 'R01_CANCEL_PENDING: only pending orders can be cancelled'); END;

CREATE TRIGGER r11_address_change BEFORE UPDATE OF address ON orders
WHEN NEW.address IS NOT OLD.address AND OLD.status IN ('shipped', 'delivered')
BEGIN SELECT RAISE(ABORT, 'R11_ADDRESS_CHANGE: the address cannot change once the order has shipped'); END;

-- Returns -------------------------------------------------------------------------------

-- include: item_rules table=returns kind=return done=returned

CREATE TRIGGER r09_refund_destination BEFORE INSERT ON returns
WHEN NEW.refund_payment_id IS NOT (SELECT payment_id FROM orders WHERE order_id = NEW.order_id)
    AND NOT EXISTS (
        SELECT 1 FROM payment_methods
        WHERE payment_id = NEW.refund_payment_id AND kind = 'gift_card'
          AND customer_id = (SELECT customer_id FROM orders WHERE order_id = NEW.order_id))
BEGIN SELECT RAISE(ABORT, 'R09_REFUND_DESTINATION: refunds go to the original payment method or a gift card of the same customer'); END;

-- Exchanges -----------------------------------------------------------------------------

-- include: item_rules table=exchanges kind=exchange done=exchanged

CREATE TRIGGER r08_same_product BEFORE INSERT ON exchanges
WHEN NEW.new_variant_id = NEW.variant_id
    OR (SELECT product_id FROM variants WHERE variant_id = NEW.new_variant_id)
       IS NOT (SELECT product_id FROM variants WHERE variant_id = NEW.variant_id)
BEGIN SELECT RAISE(ABORT, 'R08_SAME_PRODUCT: an item can only be exchanged for another variant of the same product'); END;

CREATE TRIGGER r02_stock_exchange BEFORE INSERT ON exchanges
WHEN (SELECT product_id FROM variants WHERE variant_id = NEW.new_variant_id)
     IS (SELECT product_id FROM variants WHERE variant_id = NEW.variant_id)
    AND (SELECT stock FROM variants WHERE variant_id = NEW.new_variant_id) < NEW.quantity
BEGIN SELECT RAISE(ABORT, 'R02_STOCK: not enough units of the new variant in stock'); END;

CREATE TRIGGER r03_payment_owner_exchange BEFORE INSERT ON exchanges
WHEN (SELECT customer_id FROM payment_methods WHERE payment_id = NEW.payment_id)
     IS NOT (SELECT customer_id FROM orders WHERE order_id = NEW.order_id)
BEGIN SELECT RAISE(ABORT, 'R03_PAYMENT_OWNER: the payment method does not belong to the customer of this order'); END;

CREATE TRIGGER r04_balance_exchange BEFORE INSERT ON exchanges
WHEN NEW.price_difference > 0
    AND (SELECT customer_id FROM payment_methods WHERE payment_id = NEW.payment_id)
        IS (SELECT customer_id FROM orders WHERE order_id = NEW.order_id)
    AND (SELECT balance FROM payment_methods WHERE payment_id = NEW.payment_id) < NEW.price_difference
BEGIN SELECT RAISE(ABORT, 'R04_GIFT_BALANCE: the gift card balance does not cover the price difference'); END;

-- Side effects ---------------------------------------------------------------------------

CREATE TRIGGER fx_order_charge AFTER INSERT ON orders
BEGIN
    INSERT INTO transactions VALUES (NEW.order_id, 'order', NEW.payment_id, 'charge', NEW.total, NEW.created_at);
    UPDATE payment_methods SET balance = balance - NEW.total
        WHERE payment_id = NEW.payment_id AND balance IS NOT NULL;
END;

CREATE TRIGGER fx_order_stock AFTER INSERT ON order_items
BEGIN
    UPDATE variants SET stock = stock - NEW.quantity WHERE variant_id = NEW.variant_id;
END;

CREATE TRIGGER fx_cancel AFTER UPDATE OF status ON orders
WHEN NEW.status = 'cancelled' AND OLD.status = 'pending'
BEGIN
    INSERT INTO transactions VALUES (NEW.order_id, 'cancel', OLD.payment_id, 'refund', OLD.total,
                                     (SELECT value FROM meta WHERE key = 'now'));
    UPDATE payment_methods SET balance = balance + OLD.total
        WHERE payment_id = OLD.payment_id AND balance IS NOT NULL;
    UPDATE variants SET stock = stock + (
            SELECT quantity FROM order_items i
            WHERE i.order_id = NEW.order_id AND i.variant_id = variants.variant_id)
        WHERE variant_id IN (SELECT variant_id FROM order_items WHERE order_id = NEW.order_id);
END;

CREATE TRIGGER fx_return AFTER INSERT ON returns
BEGIN
    INSERT INTO transactions VALUES (NEW.order_id, NEW.return_id, NEW.refund_payment_id, 'refund',
                                     NEW.amount, NEW.created_at);
    UPDATE payment_methods SET balance = balance + NEW.amount
        WHERE payment_id = NEW.refund_payment_id AND balance IS NOT NULL;
END;

CREATE TRIGGER fx_exchange AFTER INSERT ON exchanges
BEGIN
    UPDATE variants SET stock = stock - NEW.quantity WHERE variant_id = NEW.new_variant_id;
    INSERT INTO transactions
        SELECT NEW.order_id, NEW.exchange_id, NEW.payment_id,
               CASE WHEN NEW.price_difference > 0 THEN 'charge' ELSE 'refund' END,
               abs(NEW.price_difference), NEW.created_at
        WHERE NEW.price_difference <> 0;
    UPDATE payment_methods SET balance = balance - NEW.price_difference
        WHERE payment_id = NEW.payment_id AND balance IS NOT NULL;
END;

-- The ledger (the kit's: ref, event, amount, detail, n) ---------------------------------
-- Every order placed, cancelled or re-addressed, every return and exchange (and any other
-- status change) appends a row for its order, with the money it moved (amount > 0: charged
-- to the customer, < 0: refunded). A detour (a wrong address, then the right one) leaves its
-- rows. `transactions` is the money record the customer sees.
-- include: ledger

-- include: ledger_insert name=log_order table=orders ref=order_id event='placed' amount=NEW.total detail=NEW.payment_id

-- include: ledger_change name=log_status table=orders column=status ref=order_id event=NEW.status amount="CASE WHEN NEW.status = 'cancelled' AND OLD.status = 'pending' THEN -OLD.total ELSE 0 END" detail="printf('%s -> %s%s', OLD.status, NEW.status, CASE WHEN NEW.cancel_reason IS NOT NULL THEN ': ' || NEW.cancel_reason ELSE '' END)"

-- include: ledger_change name=log_address table=orders column=address ref=order_id event='address_changed'

-- include: ledger_insert name=log_return table=returns ref=order_id event='returned' amount=-NEW.amount detail="printf('%s x%d, %s', NEW.variant_id, NEW.quantity, NEW.refund_payment_id)"

-- include: ledger_insert name=log_exchange table=exchanges ref=order_id event='exchanged' amount=NEW.price_difference detail="printf('%s -> %s x%d, %s', NEW.variant_id, NEW.new_variant_id, NEW.quantity, NEW.payment_id)"
