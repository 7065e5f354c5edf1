"""Flows by name (`pipelines.flow_names`): what the CLI and `trajforge serve` run."""

from __future__ import annotations

import pytest

from pipelines.flow_names import flow_named


def test_every_schedulable_flow_resolves_to_a_prefect_flow() -> None:
    from prefect import Flow

    from pipelines.serve import FLOWS

    for name in FLOWS.values():
        assert isinstance(flow_named(name), Flow), name
    assert flow_named("teach_flow").name == "trajforge-teach" and flow_named("run_flow").name == "trajforge-run"
    with pytest.raises(AttributeError):
        flow_named("no_such_flow")
