"""Values that may arrive as JSON text: a tool call's arguments, a stored column (every
layer reads them, so the one reading lives here, at the bottom)."""

from __future__ import annotations

import json
from typing import Any


def maybe_json(value: Any) -> Any:
    """The value a JSON string holds; a string that is not JSON, or any other value, as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
