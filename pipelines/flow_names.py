"""Flows by their function names, for the CLI and `trajforge serve`: those of
`pipelines.flows`, and `teach_flow` (`pipelines.teach`, which runs the run flow and so lives
apart from it)."""

from __future__ import annotations

from typing import Any


def flow_named(name: str) -> Any:
    """The flow whose function is called `name` (e.g. "run_flow", "teach_flow")."""
    if name == "teach_flow":
        from pipelines.teach import teach_flow

        return teach_flow
    from pipelines import flows

    return getattr(flows, name)
