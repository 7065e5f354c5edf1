"""Constraint sets (`envs.constraints`): constraints as JSON and back, fuzzy references and
their counts, and the world module that holds the hooks (a clear error without one)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from envs.constraints import (
    Constraint,
    Fuzzification,
    FuzzifyError,
    FuzzyRef,
    dump_constraints,
    load_constraints,
    record_key,
    world_constraints,
)
from envs.registry import get_world
from synthesis.base import SynthesisConfig


def test_constraints_round_trip_and_are_strict() -> None:
    cs = [Constraint(kind="book", fields={"flight_id": "F1", "passengers": 2}),
          Constraint(kind="bags", fields={"reservation_id": "RA", "total_bags": 1})]
    raw = dump_constraints(cs)
    assert raw[0] == {"kind": "book", "fields": {"flight_id": "F1", "passengers": 2}}
    assert load_constraints(raw) == cs and cs[0]["passengers"] == 2
    with pytest.raises(ValidationError):
        load_constraints([{"kind": "book", "fields": {}, "extra": 1}])
    with pytest.raises(ValidationError):
        cs[0].kind = "cancel"  # frozen
    assert record_key(["RA", 3]) == '["RA",3]'


def test_fuzzification_counts() -> None:
    fz = Fuzzification({
        "c0.flight_id": FuzzyRef("c0.flight_id", "flight", "F1", "the morning flight to JFK",
                                 {"destination": "JFK"}, level=0, first_matches=1),
        "c0.payment_id": FuzzyRef("c0.payment_id", "payment", "cc1", "your Visa",
                                  {"kind": "credit_card", "brand": "visa"}, level=2, first_matches=4)})
    assert fz.texts() == {"c0.flight_id": "the morning flight to JFK", "c0.payment_id": "your Visa"}
    assert fz.attributes()["c0.payment_id"] == {"entity": "payment", "where": {"kind": "credit_card", "brand": "visa"},
                                                "level": 2}
    assert fz.redraws == 2 and fz.first_draw_unique == 1
    err = FuzzifyError("payment", "cc1", 3)
    assert (err.entity, err.record_id, err.matches) == ("payment", "cc1", 3) and "3 records match" in str(err)


def test_the_worlds_constraints_module() -> None:
    airline = get_world("airline")
    module = world_constraints(airline)
    assert module is world_constraints(airline) and callable(module.sample_constraints)


def test_world_without_hooks_says_so(tmp_path: Any) -> None:
    import shutil

    from envs.world import World as WorldFolder
    from synthesis.base import get_method

    folder = tmp_path / "shop"
    shutil.copytree(get_world("retail").folder, folder, ignore=shutil.ignore_patterns("constraints.py", "__pycache__"))
    with pytest.raises(LookupError, match="shop.*no constraints.py"):
        get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", world="shop"),
                                        WorldFolder(name="shop", folder=folder))
