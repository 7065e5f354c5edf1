"""What a world's self-play question templates are made of (Tool-R0, methods.md §3).

A world's ``design.py`` may offer ``self_play_templates() -> dict[str, Template]``: per
tool, a function that draws one *grounded* call from the database and states it as a
user would, i.e. `(arguments, a sentence in which every non-boolean argument value
appears)`, or None when the database has no suitable record. The scripted self-play
generator (`synthesis.self_play.ScriptedGenerator`) uses them; tools without a template
fall back to `synthesis.self_play.generic_template`.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from typing import Any

from envs.sql import rows

Template = Callable[[sqlite3.Connection, random.Random], tuple[dict[str, Any], str] | None]


def pick(conn: sqlite3.Connection, rng: random.Random, sql: str, *args: Any) -> dict[str, Any] | None:
    """One row of the query's result drawn with `rng` (None when it is empty)."""
    found = rows(conn, sql, *args)
    return rng.choice(found) if found else None
