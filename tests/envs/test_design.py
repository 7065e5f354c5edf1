"""The types a world's `design.py` returns (`envs.design`): `Variant` and `Goal`, and what
the airline world's design hooks build with them."""

from __future__ import annotations

import random
import re

from envs.design import Goal, Variant
from envs.world import World


def test_defaults_are_independent() -> None:
    a = Variant(kind="seats_exact", patches=[], focus={"user_id": "u1"}, rules=["R02_SEATS"])
    b = Variant(kind="seats_exact", patches=[], focus={}, rules=[])
    a.preference["cabin"] = "business"
    assert b.preference == {} and a.persona == "novice" and not a.allow_no_change
    g = Goal(instruction="Book me a seat.", reason="a trip", known_info={"user_id": "u1"})
    assert g.unknown_info == [] and g.known_info == {"user_id": "u1"}


def test_a_worlds_variants_sit_on_its_rules(airline: World) -> None:
    conn = airline.build_state(3, 30)
    variants = airline.design.variants(conn, random.Random(0), 5)
    assert variants and all(isinstance(v, Variant) for v in variants)
    rules = set(airline.compiled_rules())
    for v in variants:
        assert v.kind and v.focus and all(isinstance(p, str) for p in v.patches)
        assert v.rules and all(re.fullmatch(r"R\d+_[A-Z0-9_]+", r) for r in v.rules), v.rules
        patched = airline.build_state(3, 30, v.patches)  # the patches apply to the seeded state
        patched.close()
    assert any(set(v.rules) & rules for v in variants)  # next to a rule the schema enforces
