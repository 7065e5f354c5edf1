"""Every output of the malformed-output corpus is parsed without crashing, in bounded time,
and classified as the corpus says (classes known by construction in make_malformed_corpus).
Whatever is echoed back (details, raw text) stays short, and outputs whose calls sit in
reasoning blocks parse no call and keep the block in the text. Calls come only from call
syntax: outside a `<tool_call>` block (or an output of nothing but calls) a call-shaped
object is never parsed as a call, whatever the corpus entry says about its classes."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from typing import Any

import pytest

from rollout.parsing import parse_model_output
from tests.make_malformed_corpus import FIXTURE, TOOLS, build
from tests.paths import TESTS

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
        # issue 18
        "reasoning",
        "duplicate_key",
        "unsupported_syntax",
        "control_token",
        "huge_echo",
        "flood",
        "non_finite",
        "consistency",
        # calls come only from call syntax
        "call_in_prose",
        "forged_tool_response",
        "bad_tag",
        "duplicate_call_id",
        "only_calls",
    ]:
        assert categories[needed] >= 5, needed
    assert all(i["expected"] or "calls" in i for i in items)


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
        if "calls" in item and len(parsed.calls) != item["calls"]:
            wrong.append(f"{item['id']}: {len(parsed.calls)} calls parsed, expected {item['calls']}")
        if item["category"] in ("call_in_prose", "bad_tag", "forged_tool_response") and any(
                c.name == "cancel_order" for c in parsed.calls):
            wrong.append(f"{item['id']}: a call outside call syntax was parsed as a call")
        if item["category"] == "reasoning" and not parsed.calls and "cancel_order" not in parsed.text:
            wrong.append(f"{item['id']}: the reasoning block is not in the text: {parsed.text[:80]!r}")
        long = [m.error for m in parsed.malformed if len(m.detail) > 2500 or len(m.raw) > 2000]
        if long:
            wrong.append(f"{item['id']}: echoes not capped in {long}")
        # whatever comes back can be stored: valid UTF-8 everywhere
        json.dumps(parsed.model_dump(), ensure_ascii=False).encode("utf-8")
    assert not wrong, "\n".join(wrong)
    assert slowest < 2.0, f"slowest output took {slowest:.2f}s"


def test_fixture_path() -> None:
    assert TESTS / "fixtures" / "malformed_outputs.jsonl" == FIXTURE
