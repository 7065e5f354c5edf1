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


def test_verdict_quality_corpus_section() -> None:
    """The corpus section's counts add up per class, and a case labelled against its verdict
    is counted as the error it is (a good case relabelled bad is a false pass)."""
    from dataclasses import replace

    from bench.verdict_corpus import load
    from bench.verdict_quality import corpus_section, stratified

    items = stratified(load())
    assert len({(c.cls, c.method, c.world) for c in items}) == len(items)
    sample = [c for c in items if c.world == "retail"][:24]
    gold_like = next(c for c in sample if c.cls == "plan_paraphrase")
    relabelled = replace(gold_like, id=gold_like.id + ":relabelled", cls="relabelled", expected_pass=False,
                         must_fail=["POLICY"], safety=True)
    part = corpus_section([*sample, relabelled], window=0.05)
    json.dumps(part)
    assert part["cases"] == len(sample) + 1 and part["good"] + part["bad"] == part["cases"]
    for cls, row in part["by_class"].items():
        if row["expected_pass"]:
            assert 0 <= row["false_fails"] <= row["cases"], cls
        else:
            assert row["false_passes"] + row["failed_wrong_part"] + row["caught"] == row["cases"], cls
    assert sum(r.get("false_passes", 0) for r in part["by_class"].values()) == part["false_passes"]
    assert sum(r.get("false_fails", 0) for r in part["by_class"].values()) == part["false_fails"]
    # relabelled, a good case the composite passes is a false pass (one it fails is caught)
    from bench.verdict_corpus import trajectory
    from verifiers.base import get_verifier

    passes = get_verifier("composite").verify(gold_like.task, trajectory(gold_like)).passed
    assert part["by_class"]["relabelled"]["false_passes"] == int(passes)
    assert part["safety_false_passes"] >= part["by_class"]["relabelled"]["false_passes"]
    assert part["verifications_per_s_per_core"] > 0


class _Judge:
    """A judge model that answers the same word to every reply."""

    def __init__(self, word: str) -> None:
        self.word = word

    async def chat(self, messages: list, tools: list, sampling: object) -> object:
        return type("Reply", (), {"text": self.word})()


def test_act_agreement_rules_and_a_judge() -> None:
    """The rules' reading of the edited replies agrees with most labels and never reads a
    yes the label denies; a judge only settles what the rules find unsure, so a judge that
    says yes to everything adds false yeses there and nowhere else."""
    from bench.verdict_corpus import load
    from bench.verdict_quality import act_agreement, stratified

    items = stratified(load())
    plain = act_agreement(items)
    assert plain["replies"] >= 50 and plain["rules"]["agreement"] >= 0.9 and plain["rules"]["false_yes"] == 0
    assert "judge" not in plain
    yes = act_agreement(items, _Judge("yes"))
    assert yes["judge"]["false_yes"] > 0 and yes["rules_then_judge"]["false_yes"] > 0
    assert yes["rules_then_judge"]["missed_yes"] <= plain["rules"]["missed_yes"]
    unsure = act_agreement(items, _Judge("unsure"))
    assert unsure["rules_then_judge"] == {**plain["rules"]}
