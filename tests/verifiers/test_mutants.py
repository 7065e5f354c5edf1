"""Mutants and alternatives of a task's gold path: each mutation changes the final state; the
alternatives (reordered, extra reads, another identity) are good conversations."""

from __future__ import annotations

from data.records import Task
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from verifiers.audit import WRITE_KINDS, audit, build_dialogue, mutants, replay_hash
from verifiers.composite import CompositeVerifier


def test_each_mutation_kind_is_built_and_changes_the_state(tasks: list[Task]) -> None:
    tools = get_world("airline").tools
    for task in tasks:
        kinds = {m.kind for m in mutants(task)}
        has_writes = any(tools[c.name].write for c in task.reference_solution)
        # A task whose right answer is to refuse (no gold write) can only get extra writes.
        assert kinds >= (set(WRITE_KINDS) if has_writes else {"extra_write"}), (
            task.metadata["boundary"],
            kinds,
        )
        gold, _ = replay_hash(task, task.reference_solution)
        assert gold == task.target_state_hash
        for m in mutants(task):
            if m.kind in ("drop_write", "change_argument", "stop_early", "extra_write"):
                assert replay_hash(task, m.calls)[0] != gold, (m.kind, m.note)


def test_dialogue_alternatives_extra_reads_and_other_identity() -> None:
    """A retail customer identified by name and zip code instead of email, and reads made
    again, are good conversations: the composite passes them and the audit holds it to them.
    The same name-and-zip answer with the email lookup kept (an email never said) fails."""
    from verifiers.audit import dialogue_alternatives

    task = get_method("logic_driven")(SynthesisConfig(world="retail", n_tasks=1, seed=0),
                                      get_world("retail")).tasks[0]
    alts = {kind: turns for kind, _, turns in dialogue_alternatives(task)}
    assert {"extra_reads", "other_identity"} <= set(alts)
    c = CompositeVerifier()
    for kind in ("extra_reads", "other_identity"):
        assert c.verify(task, build_dialogue(task, alts[kind], kind)).passed, kind
    other = alts["other_identity"]
    calls = [x.name for t in other for x in t.tool_calls]
    assert "find_customer_by_name_zip" in calls and "find_customer_by_email" not in calls
    gold_lookup = next(t for t in task.dialogue if any(x.name == "find_customer_by_email" for x in t.tool_calls))
    wrong = [gold_lookup if any(x.name == "find_customer_by_name_zip" for x in t.tool_calls) else t for t in other]
    verdict = c.verify(task, build_dialogue(task, wrong, "unsaid-email"))
    assert not verdict.passed and any("identity" in r for r in verdict.reasons)
    a = audit([task], ["composite"]).verifiers["composite"]
    assert a.alternatives["other_identity"].passed == 1 and a.alternatives["extra_reads"].passed == 1
    # a world with one way to identify gets no other identity
    airline = get_method("logic_driven")(SynthesisConfig(n_tasks=1, seed=0), get_world("airline")).tasks[0]
    assert "other_identity" not in {k for k, _, _ in dialogue_alternatives(airline)}
    assert other[2].role == "user" and all(str(task.user.known_info[k]) in other[2].content
                                           for k in ("name", "zip code"))
