"""Set Designer: boundary-adjacent initial states (LOGIGEN §1).

The world's `variants` hook proposes patches to a seeded base state that put a value one
step from a compiled rule's limit (one seat left, a balance one unit short, a booking 23
or 25 hours old). The designer applies them, checks they hold, and returns each variant
with a `StateRef` that rebuilds it exactly.
"""

from __future__ import annotations

import random
import sqlite3

from data.records import StateRef
from envs.design import Variant
from envs.world import World


def design_states(world: World, seed: int, scale: int, n: int) -> list[tuple[Variant, StateRef]]:
    """`n` boundary-adjacent variants of the world's base state for `seed`."""
    rng = random.Random(seed)
    base = world.build_state(seed, scale)
    out: list[tuple[Variant, StateRef]] = []
    for variant in world.design.variants(base, rng, n):
        try:
            ref = world.state_ref(seed, scale, variant.patches)
        except sqlite3.DatabaseError:
            continue  # a patch that breaks a constraint is not a valid initial state
        out.append((variant, ref))
    base.close()
    return out
