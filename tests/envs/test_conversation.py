"""A world's conversation contract (`envs.conversation`): the contract with its fallbacks,
ids a user never says and how a user says them instead, identity lookups, and the
deterministic text checks the policy verifier uses."""

from __future__ import annotations

import json

from data.records import ToolCall
from envs.conversation import (
    DEFAULT_CLAUSES,
    amount_fact,
    asks_confirmation,
    claims_success,
    conversation,
    dates_in,
    grounded_params,
    identity_lookup,
    identity_values,
    is_affirmative,
    is_decline,
    is_error_result,
    leaked_ids,
    mentions_value,
    numbers_in,
    record_of,
    signals_refusal,
    user_words,
)
from envs.registry import get_world
from envs.world import Env, World


def test_the_airline_contract(airline: World) -> None:
    conv = conversation(airline)
    assert conv.identity.keys == [["user_id"]] and conv.clauses and set(conv.clauses) <= set(DEFAULT_CLAUSES) | {
        "confirm_identity"}
    assert conversation(airline) is conv and conv.user_facing_ids == ["user_id", "reservation_id"]
    assert identity_lookup(conv, ["user_id"], {"user_id": "u1"}) == ToolCall(name="get_user_details",
                                                                              arguments={"user_id": "u1"})
    assert identity_lookup(conv, ["user_id"], {}) is None
    assert identity_values(conv, ["user_id", "name"], {"user_id": "u1", "first_name": "Uma", "last_name": "One"},
                           "user_id") == {"user_id": "u1", "name": "Uma One"}
    assert identity_values(conv, ["zip"], {"user_id": "u1"}, "user_id") == {}


def test_internal_ids_are_found_and_said_in_a_users_words(airline: World, env: Env) -> None:
    # the payment id cc1 is internal (a user says "my credit card"); the reservation code is not
    assert leaked_ids(airline, env.conn, ["Pay RA with cc1 please"]) == ["cc1"]
    said = user_words(airline, env.conn, "charge cc1 for reservation RA")
    assert "cc1" not in said and "RA" in said and said != "charge cc1 for reservation RA"
    assert record_of(env.conn, "RA")[0] == "reservations" and record_of(env.conn, "nothing") is None
    assert leaked_ids(get_world("terminal"), env.conn, ["cc1"]) == []  # no USER_FACING_IDS: unchecked


def test_grounded_params_are_ids_free_text_and_amounts(airline: World) -> None:
    book = airline.tools["book_reservation"]
    grounded = grounded_params(book)
    assert {"user_id", "flight_id", "payment_id"} <= set(grounded)
    assert "cabin" not in grounded and "passengers" not in grounded and "insurance" not in grounded


def test_text_checks() -> None:
    assert numbers_in("pay $1,250.50 or 3 items") == frozenset({1250.5, 3.0})
    assert dates_in("on May 13, 2026 or 2026-06-01") >= {"05-13", "2026-05-13", "06-01", "2026-06-01"}
    assert mentions_value("That is $520.00 total", "520") and not mentions_value("That is 5200", "520")
    assert mentions_value("see you on the 13th of May", "2026-05-13")
    assert mentions_value("Reservation RA is booked", "ra") and not mentions_value("RAB", "RA")
    assert is_affirmative("Yes, please go ahead") and not is_affirmative("Yes... no, wait")
    assert is_decline("No, don't do that") and not is_decline("No problem, thanks")
    assert asks_confirmation("Shall I cancel it?") and not asks_confirmation("I will cancel it.")
    assert claims_success("I've cancelled your reservation.") and not claims_success("I cannot cancel it.")
    assert signals_refusal("Unfortunately that is not allowed.") and not signals_refusal("Done!")
    assert is_error_result(json.dumps({"error": "x", "code": "y"})) and not is_error_result("not json")
    assert amount_fact("refund", -45.0).any_of == ["45"] and amount_fact("fee", 12.5).any_of == ["12.50"]


def test_numeric_dates_are_read_both_ways_at_a_sentence_end() -> None:
    assert {"1962-04-09", "1962-09-04"} <= dates_in("I was born 4/9/1962.")
    assert "2000-04-24" in dates_in("born: 04/24/2000") and "1990-03-05" in dates_in("1990.03.05, yes")
    assert mentions_value("My birthday is 1/22/1951.", "1951-01-22")
