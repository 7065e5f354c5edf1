"""What self-play conversations rest on (issue 16 §3), in `envs`: whose records a call touches
(on the database), one user's view for drawing, and the user's own words for records. The
rest moved to tests/synthesis/self_play/ (test_coherence.py, test_method.py); the figures over
40 tasks per world are in `test_self_play_worlds.py`."""

from __future__ import annotations

import sqlite3

from data.records import ToolCall
from envs.conversation import leaked_ids, user_words
from envs.ownership import call_owners, ownable, owners, scoped
from envs.registry import get_world


def _one(conn: sqlite3.Connection, sql: str, *args: object) -> tuple:
    row = conn.execute(sql, args).fetchone()
    assert row is not None, sql
    return row


def test_owners_follow_foreign_keys() -> None:
    airline, telecom = get_world("airline"), get_world("telecom")
    conn = airline.build_state(0, 30)
    rid, uid = _one(conn, "SELECT reservation_id, user_id FROM reservations LIMIT 1")
    pid, other = _one(conn, "SELECT payment_id, user_id FROM payment_methods WHERE user_id <> ? LIMIT 1", uid)
    (fid,) = _one(conn, "SELECT flight_id FROM flights LIMIT 1")
    assert ownable(conn) == ["payment_methods", "reservations", "users"]
    assert call_owners(conn, [ToolCall(name="get_reservation_details", arguments={"reservation_id": rid})]) == {uid}
    assert call_owners(conn, [ToolCall(name="get_flight_details", arguments={"flight_id": fid})]) == set()  # shared
    assert call_owners(conn, [ToolCall(name="transfer_to_human_agents",  # ids inside free text count
                                       arguments={"summary": f"User {other} disputes {rid}"})]) == {uid, other}
    view = scoped(conn, uid)
    assert {r[0] for r in view.execute("SELECT user_id FROM reservations")} == {uid}
    assert view.execute("SELECT COUNT(*) FROM flights").fetchone() == conn.execute("SELECT COUNT(*) FROM flights"
                                                                                   ).fetchone()
    assert view.execute("SELECT 1 FROM payment_methods WHERE payment_id = ?", (pid,)).fetchone() is None
    view.close()
    conn.close()
    conn = telecom.build_state(0, 30)
    bill, cid = _one(conn, "SELECT bill_id, customer_id FROM bills WHERE status = 'open' LIMIT 1")
    method, other = _one(conn, "SELECT method_id, customer_id FROM payment_methods WHERE customer_id <> ? LIMIT 1", cid)
    pay = ToolCall(name="pay_bill", arguments={"bill_id": bill, "method_id": method, "amount": 1})
    assert call_owners(conn, [pay]) == {cid, other}  # a bill paid with another account's card
    (phone,) = _one(conn, "SELECT phone_number FROM lines WHERE customer_id = ? LIMIT 1", cid)
    assert call_owners(conn, [ToolCall(name="find_line_by_number", arguments={"phone_number": phone})]) == {cid}
    row = dict(zip(["line_id", "addon_id"], _one(conn, "SELECT line_id, addon_id FROM line_addons LIMIT 1"),
                   strict=True))
    (holder,) = _one(conn, "SELECT customer_id FROM lines WHERE line_id = ?", row["line_id"])
    assert owners(conn, "line_addons", row) == {holder}
    conn.close()


def test_the_user_says_records_in_their_own_words() -> None:
    airline = get_world("airline")
    conn = airline.build_state(0, 30)
    pid, last4 = _one(conn, "SELECT payment_id, last4 FROM payment_methods WHERE kind = 'credit_card' LIMIT 1")
    fid, number = _one(conn, "SELECT flight_id, flight_number FROM flights LIMIT 1")
    text = user_words(airline, conn, f"Book {fid} for me and charge {pid}.")
    assert leaked_ids(airline, conn, [text]) == [] and last4 in text and f"flight {number} on " in text
    conn.close()
    clinic = get_world("clinic")
    conn = clinic.build_state(0, 30)
    slot, name = _one(conn, "SELECT s.slot_id, p.name FROM slots s JOIN providers p USING (provider_id) LIMIT 1")
    text = user_words(clinic, conn, f"Please book {slot}.")
    assert slot not in text and name in text
    conn.close()
