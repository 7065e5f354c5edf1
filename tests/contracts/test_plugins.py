"""A verifier is one typed object: its options are one pydantic model (`options_model`) and
it is built from an instance of it; registration refuses audit and alternative kinds the
self-audit does not know, naming the kind and the nearest known one."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from data.records import Sampling, Step, Task, Trajectory
from data.registry import PluginOptionsError
from verifiers.base import (
    ALTERNATIVE_KINDS,
    MUTATION_KINDS,
    VERIFIERS,
    BaseVerifier,
    UnknownKindError,
    VerifierOptions,
    check_kinds,
    get_verifier,
    register,
    takes_options_object,
)
from verifiers.constraints import ConstraintOptions, ConstraintVerifier
from verifiers.state import StateVerifier

BUILT_FROM_OPTIONS = {"state_equivalence", "constraint_satisfaction", "communicate", "action_match",
                      "llm_judge", "composite", "tests_pass"}


def _verifier(**attrs: Any) -> type[BaseVerifier]:
    return type("Probe", (BaseVerifier,), {"name": "probe", **attrs})


def test_a_misspelled_audit_kind_is_an_error_naming_it_with_a_suggestion() -> None:
    probe = _verifier(audit_kinds=frozenset({"drop_write", "chnage_argument"}))
    with pytest.raises(UnknownKindError,
                       match=r"'probe': unknown audit kind 'chnage_argument' \(did you mean 'change_argument'\?\)"):
        register("probe")(probe)
    assert "probe" not in VERIFIERS.names()  # nothing was registered


def test_a_misspelled_alternative_kind_or_a_bare_string_is_an_error() -> None:
    with pytest.raises(UnknownKindError, match=r"alternative kind 'reorder_write' \(did you mean 'reorder_writes'\?\)"):
        register("probe")(_verifier(alternative_kinds=frozenset({"reorder_write"})))
    with pytest.raises(UnknownKindError, match="must be a set of kinds, not the string 'detour'"):
        register("probe")(_verifier(audit_kinds="detour"))
    with pytest.raises(UnknownKindError, match="unknown audit kind 'vibes'; known: drop_write"):
        register("probe")(_verifier(audit_kinds=frozenset({"vibes"})))  # nothing near: no suggestion
    assert "probe" not in VERIFIERS.names()


def test_every_registered_verifier_declares_known_kinds() -> None:
    for name in VERIFIERS.names():
        check_kinds(name, VERIFIERS.get(name))
    assert set(MUTATION_KINDS) >= {"drop_write", "detour", "skip_confirmation"}
    assert "reorder_writes" in ALTERNATIVE_KINDS


def test_a_verifier_is_built_from_its_options_object() -> None:
    v = get_verifier("constraint_satisfaction", {"redundancy_weight": 0.25})
    assert isinstance(v, ConstraintVerifier) and v.options == ConstraintOptions(redundancy_weight=0.25)
    direct = ConstraintVerifier(ConstraintOptions(redundancy_weight=0.25, require_clean_termination=False))
    assert direct.options.redundancy_weight == 0.25 and not direct.options.require_clean_termination
    assert StateVerifier().options == VerifierOptions()  # no options: the model's defaults
    # code written before options objects gives the fields as keywords: the same model checks them
    assert ConstraintVerifier(redundancy_weight=0.25).options == ConstraintOptions(redundancy_weight=0.25)
    with pytest.raises(TypeError, match="not both"):
        ConstraintVerifier(ConstraintOptions(), redundancy_weight=0.25)
    composite = get_verifier("composite", {"components": {"constraint_satisfaction": {"redundancy_weight": 0.5}}})
    assert composite.component("CONSTRAINTS").options.redundancy_weight == 0.5
    judge = get_verifier("llm_judge", {"sampling": {"max_tokens": 7}}, model=object())
    assert judge.options.sampling == Sampling(max_tokens=7) and judge.model is not None


def test_options_are_declared_once_and_checked_where_the_verifier_is_built() -> None:
    for name in BUILT_FROM_OPTIONS:
        cls = VERIFIERS.get(name)
        assert takes_options_object(cls), name
        assert VERIFIERS.options_model(name) is cls.options_model, name
    with pytest.raises(PluginOptionsError, match="(?s)'constraint_satisfaction'.*redundancy_wieght"):
        get_verifier("constraint_satisfaction", {"redundancy_wieght": 1.0})
    with pytest.raises(PluginOptionsError, match="(?s)'constraint_satisfaction'.*redundancy_wieght"):
        ConstraintVerifier({"redundancy_wieght": 1.0})  # type: ignore[arg-type]

    class Other(BaseModel):
        model_config = ConfigDict(extra="forbid")

    with pytest.raises(TypeError, match="options declared twice"):
        register("probe", options=Other)(_verifier(options_model=VerifierOptions))
    assert "probe" not in VERIFIERS.names()


def test_the_options_object_decides_the_verdict(tasks: list[Task]) -> None:
    task = tasks[0]
    steps = [Step(index=i, turn=i + 1, action=c) for i, c in enumerate(task.reference_solution)]
    cut = Trajectory(id="t", task_id=task.id, trial=0, model="test", steps=steps, termination="max_turns")
    assert not get_verifier("state_equivalence").verify(task, cut).passed
    lenient = get_verifier("state_equivalence", VerifierOptions(require_clean_termination=False))
    assert lenient.verify(task, cut).passed
