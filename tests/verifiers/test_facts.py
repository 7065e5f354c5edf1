"""Stated facts (`verifiers.facts`): what the agent tells the user must have been shown."""

from __future__ import annotations

from verifiers.facts import Support, stated, unsupported


def _msgs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in pairs]


def test_facts_are_found_and_dates_times_and_ids_kept_apart() -> None:
    kinds = {(f.kind, f.value) for f in stated("Reservation HAT123X on May 13, 2026 at 10:30: $250 total, 2 bags.")}
    assert ("id", "hat123x") in kinds and ("date", "2026-05-13") in kinds and ("amount", "250") in kinds
    assert ("amount", "2") not in kinds and ("amount", "10") not in kinds and ("amount", "30") not in kinds
    assert ("amount", "5") in {(f.kind, f.value) for f in stated("a 5 dollar fee")}  # small, but money


def test_an_invented_fee_id_or_date_is_unsupported() -> None:
    convo = _msgs(("user", "Cancel reservation RA1234 please."),
                  ("tool", '{"reservation_id": "RA1234", "total_paid": 300, "date": "2026-05-13"}'))
    good = convo + _msgs(("assistant", "RA1234 on May 13 is refunded: 300 back to your card."))
    assert unsupported(good) == []
    for bad, kind in [("RA1234 is refunded: 300 back, less a 25 processing fee.", "amount"),
                      ("RA1234 is refunded; your refund reference is RF99812.", "id"),
                      ("RA1234 is refunded; it reaches you on June 2.", "date")]:
        got = unsupported(convo + _msgs(("assistant", bad)))
        assert [f.kind for _, f in got] == [kind], (bad, got)


def test_amounts_moved_and_simple_arithmetic_are_supported() -> None:
    convo = _msgs(("tool", '{"balance": 670, "price": 120}'), ("user", "I have 2 coupons of 15 and 20."))
    assert unsupported(convo + _msgs(("assistant", "528 charged; the gift card keeps 142.")), amounts=[528]) == []
    assert unsupported(convo + _msgs(("assistant", "Two items: 528 and 40, 568 in all.")), amounts=[528, 40]) == []
    assert unsupported(convo + _msgs(("assistant", "That leaves 91.")), amounts=[528]) != []
    # a fee that happens to be a shown price plus the charge is still invented
    assert unsupported(convo + _msgs(("assistant", "528 charged, with a 648 fee.")), amounts=[528]) != []
    # nor are the user's figures added up for the agent
    assert unsupported(convo + _msgs(("assistant", "Your coupons make 35 off.")), amounts=[]) != []
    # the agent's own words are not support for what it says next
    s = Support(["policy: bags cost 50 each"])
    assert s.supports(stated("50 per bag")[0]) and not s.supports(stated("55 per bag")[0])


def test_a_date_without_its_year_is_this_years() -> None:
    convo = _msgs(("tool", '{"since": "2021-08-07", "due": "2026-05-25"}'))
    assert unsupported(convo + _msgs(("assistant", "It is due on May 25.")), amounts=[]) == []
    assert unsupported(convo + _msgs(("assistant", "A customer since August 7, 2021.")), amounts=[]) == []
    got = unsupported(convo + _msgs(("assistant", "The refund arrives on August 7.")), amounts=[])
    assert [f.kind for _, f in got] == ["date"]
