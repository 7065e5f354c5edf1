"""bench/verdict_quality.py on one task per method × world: the figures' keys, the gold passes,
and no bad conversation passes nor good one fails."""

from __future__ import annotations

import json

from bench.verdict_quality import METHODS, WORLDS, run
from verifiers.base import MUTATION_KINDS


def test_verdict_quality_figures() -> None:
    figures = run(n=1, seed=0, per_class=1, window=0.05)
    json.dumps(figures)  # the bench prints it as its last line
    for key in ("false_pass_rate", "false_fail_rate", "kill_rate_by_class", "bad_by_class", "good_by_class",
                "by_method_world", "verifications_per_s_per_core", "state_verifications_per_s_per_core",
                "classes_missing_from_audit", "not_counted", "good", "bad", "tasks"):
        assert key in figures, key
    assert set(figures["by_method_world"]) == {f"{m}/{w}" for m in METHODS for w in WORLDS}
    assert figures["tasks"] == len(METHODS) * len(WORLDS)
    for key, part in figures["by_method_world"].items():
        assert part["tasks"] == 1 and part["gold_passed"] == 1, key
    assert figures["gold_pass_rate"] == 1.0
    assert set(figures["kill_rate_by_class"]) >= set(MUTATION_KINDS)
    assert figures["bad"] > figures["good"] > figures["tasks"]  # alternatives besides the gold
    assert figures["false_pass_rate"] == 0.0 and figures["false_fail_rate"] == 0.0, (
        figures["false_pass_examples"], figures["false_fail_examples"])
    assert figures["classes_missing_from_audit"] == {}
    assert figures["verifications_per_s_per_core"] > 0 and figures["state_verifications_per_s_per_core"] > 0
