"""Rule probes of the airline world: for every compiled rule a call that must be rejected with
exactly that rule id and a call one step away that must pass, on a small fixture state
(`envs.probes` runs them; the world's tests and `bench/synthesis_yield.py` use them)."""

from __future__ import annotations

from data.records import ToolCall

FIXTURE = """
INSERT INTO meta VALUES ('now', '2026-05-10 12:00:00');
INSERT INTO users VALUES ('u1', 'Uma One', 'u1@example.com', 'regular'), ('u2', 'Ugo Two', 'u2@example.com', 'gold');
INSERT INTO payment_methods VALUES ('cc1', 'u1', 'credit_card', '1111', NULL), ('gc1', 'u1', 'gift_card', NULL, 300),
                                   ('cc2', 'u2', 'credit_card', '2222', NULL);
INSERT INTO flights VALUES
 ('F0', 'HAT100', 'SFO', 'JFK', '2026-05-09', '07:30', 'scheduled', 10, 80, 100, 250),
 ('F1', 'HAT100', 'SFO', 'JFK', '2026-05-12', '07:30', 'scheduled', 2, 80, 100, 250),
 ('F2', 'HAT100', 'SFO', 'JFK', '2026-05-13', '07:30', 'scheduled', 10, 80, 100, 250),
 ('F3', 'HAT100', 'SFO', 'JFK', '2026-05-14', '07:30', 'cancelled', 10, 80, 100, 250),
 ('F4', 'HAT200', 'LAX', 'SEA', '2026-05-12', '12:15', 'scheduled', 10, 80, 100, 250),
 ('F5', 'HAT100', 'SFO', 'JFK', '2026-05-15', '07:30', 'scheduled', 10, 80, 120, 250);
INSERT INTO reservations VALUES
 ('RA', 'u1', 'F2', 'economy', 1, 'cc1', 0, 0, 100, 'active', '2026-05-10 00:00:00'),
 ('RB', 'u1', 'F4', 'economy', 1, 'cc1', 0, 0, 100, 'active', '2026-05-08 08:00:00'),
 ('RC', 'u1', 'F1', 'basic_economy', 1, 'cc1', 0, 0, 80, 'active', '2026-05-10 10:00:00'),
 ('RD', 'u1', 'F0', 'economy', 1, 'cc1', 1, 0, 130, 'active', '2026-05-07 10:00:00'),
 ('RE', 'u2', 'F2', 'economy', 1, 'cc2', 0, 0, 100, 'active', '2026-05-10 11:00:00');
UPDATE reservations SET status = 'cancelled' WHERE reservation_id = 'RE';
UPDATE flights SET status = 'departed' WHERE flight_id = 'F0';
"""


def book(user: str, flight: str, pax: int, pay: str, cabin: str = "economy") -> ToolCall:
    return ToolCall(name="book_reservation", arguments={
        "user_id": user, "flight_id": flight, "cabin": cabin, "passengers": pax, "payment_id": pay})


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, arguments=args)


# rule id -> (violating probe, valid probe)
PROBES = {
    "R01_FLIGHT_BOOKABLE": (book("u2", "F3", 1, "cc2"), book("u2", "F2", 1, "cc2")),
    "R02_SEATS": (book("u2", "F1", 2, "cc2"), book("u2", "F1", 1, "cc2")),  # 1 seat left
    "R03_PAYMENT_OWNER": (book("u2", "F2", 1, "cc1"), book("u2", "F2", 1, "cc2")),
    "R04_BALANCE": (book("u1", "F5", 3, "gc1"), book("u1", "F5", 2, "gc1")),
    "R05_PASSENGERS": (book("u2", "F2", 6, "cc2"), book("u2", "F2", 5, "cc2")),
    "R06_CANCEL_WINDOW": (call("cancel_reservation", reservation_id="RB"),
                          call("cancel_reservation", reservation_id="RA")),
    "R07_CANCELLED_FINAL": (call("update_baggage", reservation_id="RE", total_bags=1),
                            call("update_baggage", reservation_id="RA", total_bags=1)),
    "R08_BASIC_NO_CHANGE": (call("change_flight", reservation_id="RC", new_flight_id="F2"),
                            call("change_flight", reservation_id="RA", new_flight_id="F5")),
    "R09_SAME_ROUTE": (call("change_flight", reservation_id="RA", new_flight_id="F4"),
                       call("change_flight", reservation_id="RA", new_flight_id="F1")),
    "R10_BAG_LIMIT": (call("update_baggage", reservation_id="RA", total_bags=4),
                      call("update_baggage", reservation_id="RA", total_bags=3)),
    "R11_NO_DUPLICATE": (book("u1", "F2", 1, "cc1"), book("u1", "F5", 1, "cc1")),
    "R12_DEPARTED": (call("cancel_reservation", reservation_id="RD"),
                     call("cancel_reservation", reservation_id="RA")),
}
