"""Tools every customer-service world offers (`envs.stock_tools`): `calculate` evaluates
arithmetic only, `transfer_to_human_agents` names the world's user."""

from __future__ import annotations

import pytest

from envs.stock_tools import TRANSFER_TOOL, calculate_tool, transfer_tool
from envs.tools import ToolError, build_spec


def test_calculate_does_arithmetic_and_nothing_else() -> None:
    calculate = calculate_tool()
    assert calculate(None, "2 * (180 + 30)") == {"result": 420}
    assert calculate(None, "-10 / 4") == {"result": -2.5} and calculate(None, "1/3") == {"result": 0.33}
    for bad in ("__import__('os')", "2 ** 10", "x + 1", "1 / 0", "True + 1", "1 +", "9" * 501):
        with pytest.raises(ToolError) as info:
            calculate(None, bad)
        assert info.value.code == "BAD_EXPRESSION", bad
    spec = build_spec(calculate)
    assert spec.name == "calculate" and not spec.write and spec.parameters["required"] == ["expression"]


def test_transfer_names_who_is_transferred() -> None:
    transfer = transfer_tool("patient")
    assert transfer.__name__ == TRANSFER_TOOL
    assert transfer(None, "wants a refund") == {"transferred": True, "summary": "wants a refund"}
    spec = build_spec(transfer)
    assert "Transfer the patient to a human agent" in spec.description
    assert "What the patient needs" in spec.parameters["properties"]["summary"]["description"]
    assert "customer" in build_spec(transfer_tool("customer")).description
