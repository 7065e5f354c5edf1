"""Every output of the malformed-output corpus is parsed without crashing, in bounded time,
and classified as the corpus says (classes known by construction in make_malformed_corpus)."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rollout.parsing import parse_model_output
from tests.make_malformed_corpus import FIXTURE, TOOLS, build

pytestmark = pytest.mark.timeout(60)


def _load() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line]


def _output(item: dict[str, Any]) -> str | bytes:
    if "output_b64" in item:
        return base64.b64decode(item["output_b64"])
    if "output_spec" in item:
        spec = item["output_spec"]
        return spec["prefix"] + spec["repeat"] * spec["times"] + spec["suffix"]
    return item.get("output", "")


def test_fixture_is_current_and_large_enough() -> None:
    items = _load()
    assert items == json.loads(json.dumps(build())), (
        "regenerate: python tests/make_malformed_corpus.py"
    )
    assert len(items) >= 200
    categories = Counter(i["category"] for i in items)
    for needed in [
        "bad_json",
        "missing_name",
        "arguments_not_object",
        "unknown_tool",
        "wrong_type",
        "unclosed_tag",
        "huge",
        "invalid_utf8",
        "truncated",
        "repeated_call",
    ]:
        assert categories[needed] >= 5, needed
    assert all(i["expected"] for i in items)


def test_every_output_is_classified_as_expected() -> None:
    wrong: list[str] = []
    slowest = 0.0
    for item in _load():
        t0 = time.perf_counter()
        parsed = parse_model_output(
            _output(item),
            tools=TOOLS,
            finish_reason=item.get("finish_reason"),
            native=item.get("native"),
        )
        slowest = max(slowest, time.perf_counter() - t0)
        if parsed.error_classes != item["expected"]:
            wrong.append(f"{item['id']}: got {parsed.error_classes}, expected {item['expected']}")
        # whatever comes back can be stored: valid UTF-8 everywhere
        json.dumps(parsed.model_dump(), ensure_ascii=False).encode("utf-8")
    assert not wrong, "\n".join(wrong)
    assert slowest < 2.0, f"slowest output took {slowest:.2f}s"


def test_valid_calls_next_to_malformed_ones_survive() -> None:
    parsed = parse_model_output(
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>'
        "<tool_call>{oops}</tool_call>",
        tools=TOOLS,
    )
    assert [c.name for c in parsed.calls] == ["get_order"] and parsed.error_classes == ["bad_json"]


def test_fixture_path() -> None:
    assert Path(__file__).parent / "fixtures" / "malformed_outputs.jsonl" == FIXTURE
