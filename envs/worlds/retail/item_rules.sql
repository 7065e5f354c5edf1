-- Northwind Goods: the rules an item's return and its exchange share (R06 delivered orders
-- only, R05 the 30-day window, R07 no more units than were bought and are still kept), and
-- their shared effect: the units are counted on the order line and go back in stock
-- (fx_return and fx_exchange do the rest).
-- schema.sql takes them once per table with `-- include: item_rules table=TABLE kind=KIND
-- done=PAST` (returns, return, returned; exchanges, exchange, exchanged).

CREATE TRIGGER r06_delivered_{{kind}} BEFORE INSERT ON {{table}}
WHEN (SELECT status FROM orders WHERE order_id = NEW.order_id) IS NOT 'delivered'
BEGIN SELECT RAISE(ABORT, 'R06_DELIVERED_ONLY: only items of delivered orders can be {{done}}'); END;

CREATE TRIGGER r05_window_{{kind}} BEFORE INSERT ON {{table}}
WHEN (SELECT CAST(strftime('%s', (SELECT value FROM meta WHERE key = 'now')) AS INTEGER)
           - CAST(strftime('%s', delivered_at) AS INTEGER)
      FROM orders WHERE order_id = NEW.order_id AND status = 'delivered') > 30 * 86400
BEGIN SELECT RAISE(ABORT, 'R05_RETURN_WINDOW: {{table}} are accepted up to 30 days after delivery'); END;

CREATE TRIGGER r07_quantity_{{kind}} BEFORE INSERT ON {{table}}
WHEN NEW.quantity > (SELECT quantity - returned - exchanged FROM order_items
                     WHERE order_id = NEW.order_id AND variant_id = NEW.variant_id)
BEGIN SELECT RAISE(ABORT, 'R07_ITEM_QUANTITY: more units than were bought and not yet returned or exchanged'); END;

CREATE TRIGGER fx_{{kind}}_units AFTER INSERT ON {{table}}
BEGIN
    UPDATE order_items SET {{done}} = {{done}} + NEW.quantity
        WHERE order_id = NEW.order_id AND variant_id = NEW.variant_id;
    UPDATE variants SET stock = stock + NEW.quantity WHERE variant_id = NEW.variant_id;
END;
