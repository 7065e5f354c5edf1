"""Decontamination: n-gram overlap with registered evaluation sets, on instructions and
tool-call sequences."""

from __future__ import annotations

import pytest

from curation.hygiene import decontaminate
from data.records import Task
from envs.registry import get_world
from tests.curation.hygiene.planted import EVAL_TEXT


def test_decontamination_flags_planted_overlap(eval_set: str, many_tasks: list[Task]) -> None:
    words = EVAL_TEXT.split()
    contaminated = {
        "id": "dirty",
        "instruction": "Hello. " + " ".join(words[2:20]) + ". Thanks!",
        "tool_calls": [],
    }
    nine = {
        "id": "nine",
        "instruction": "Well " + " ".join(words[5:14]) + " ok",
        "tool_calls": [],
    }  # 9 tokens
    tools_dirty = {
        "id": "dirty-tools",
        "instruction": "please add bags",
        "tool_calls": [
            {"name": "update_baggage", "arguments": {"reservation_id": "RZZ1", "total_bags": 3}}
        ],
    }
    clean = [
        {
            "id": t.id,
            "instruction": t.instruction,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments} for c in t.reference_solution
            ],
        }
        for t in many_tasks
    ]
    kept, report = decontaminate([contaminated, nine, tools_dirty, *clean], [eval_set])
    r = report.eval_sets[eval_set]
    assert r.checked == 3 + len(clean)
    assert r.flagged == {"instruction@8": 2, "instruction@13": 1, "tool_calls@8": 1}
    assert r.flagged_any == 3 and r.longest_match == 18 and r.removed == 1
    assert [x["id"] for x in kept] == ["nine", "dirty-tools", *[c["id"] for c in clean]]
    ex = next(e for e in r.examples if e["row"] == "dirty" and e["n"] == 13)
    assert ex["longest_match"] == 18 and ex["match"].startswith("to change my flight")
    kept8, report8 = decontaminate([contaminated, nine, tools_dirty, *clean], [eval_set], drop_n=8)
    assert [x["id"] for x in kept8] == [c["id"] for c in clean]
    with pytest.raises(KeyError, match="unknown eval set"):
        decontaminate(clean, ["nope"])
    with pytest.raises(ValueError, match="drop_n"):
        decontaminate(clean, [eval_set], drop_n=5)


def test_instruction_similarity_drops_a_close_paraphrase(eval_set: str, many_tasks: list[Task]) -> None:
    """A reworded copy of an evaluation text shares no 13-gram but is as good as the same task:
    with `similarity` it is dropped (and the score reported); without it, only n-grams count."""
    import json

    from curation.hygiene.decontamination import task_text

    paraphrase = {"id": "para", "tool_calls": [], "instruction": (
        "I need to change my flight from Boston to Denver next Tuesday since my meeting moved; I "
        "want to keep the same cabin and to use my travel certificate for any fare difference, please")}
    clean = [{"id": t.id, "instruction": t.instruction, "tool_calls": []} for t in many_tasks]
    kept, report = decontaminate([paraphrase, *clean], [eval_set])
    assert len(kept) == 1 + len(clean) and report.similarity is None
    kept, report = decontaminate([paraphrase, *clean], [eval_set], similarity=0.5)
    r = report.eval_sets[eval_set]
    assert [x["id"] for x in kept] == [c["id"] for c in clean]
    assert r.flagged["instruction~0.5"] == 1 and r.removed == 1 and r.max_similarity >= 0.5
    assert next(e for e in r.examples if e["row"] == "para" and "similarity" in e)["similarity"] >= 0.5
    # an rl row is checked on its task's scenario too, not only on the prompt's user turn
    task = many_tasks[0]
    user = task.user.model_copy(update={"task_instructions": EVAL_TEXT})
    dirty = task.model_copy(update={"user": user})
    row = {"trajectory_id": "rl-1", "prompt": [{"role": "user", "content": "hello"}],
           "task": json.dumps(dirty.model_dump(mode="json"))}
    assert EVAL_TEXT in task_text(dirty)
    kept, report = decontaminate([row], [eval_set])
    assert kept == [] and report.eval_sets[eval_set].flagged.get("instruction@13") == 1


def test_tau2_test_split_is_an_evaluation_set(many_tasks: list[Task]) -> None:
    """τ²'s test tasks (airline, retail, telecom) are evaluation sets; an imported τ² test task
    lies at similarity 1.0 of one, trajforge's own tasks far from all (`tau2_test_proximity`)."""
    pytest.importorskip("tau2")
    from curation.hygiene import EVAL_SETS
    from curation.hygiene.decontamination import task_text, tau2_eval_sets, tau2_test_proximity
    from envs.tau2_world import task_from_tau2, tau2_task_text, tau2_tasks

    sets = tau2_eval_sets()
    assert [s.name for s in sets] == ["tau2_airline_test", "tau2_retail_test", "tau2_telecom_test"]
    assert all(s.texts for s in sets) and {s.name for s in sets} <= set(EVAL_SETS)
    assert len(sets[0].texts) == len(tau2_tasks("airline", "test"))
    t2 = tau2_tasks("airline", "test")[3]
    test_task = task_from_tau2(get_world("tau2_airline"), t2, split="test")
    assert task_text(test_task) == tau2_task_text(t2)
    train_task = task_from_tau2(get_world("tau2_airline"), tau2_tasks("airline", "train")[0])
    fig = tau2_test_proximity([test_task, train_task, *many_tasks[:6]])
    assert fig["tasks"] == 8 and fig["within"] >= 1 and fig["max_similarity"] == 1.0
    assert fig["by_world"]["airline"] == {"tasks": 6, "within": 0}
    assert fig["closest"][0]["task"] == test_task.id and fig["closest"][0]["tau2_id"] == str(t2.id)
    kept, report = decontaminate([test_task, *many_tasks[:6]], sets, similarity=0.5)
    assert [t.id for t in kept] == [t.id for t in many_tasks[:6]]
    assert report.eval_sets["tau2_airline_test"].removed == 1


def test_without_the_extra_there_is_no_tau2_evaluation_set(monkeypatch: pytest.MonkeyPatch,
                                                          many_tasks: list[Task]) -> None:
    import envs.tau2_world
    from curation.hygiene.decontamination import tau2_eval_sets, tau2_test_proximity

    monkeypatch.setattr(envs.tau2_world, "available", lambda: False)
    assert tau2_eval_sets() == [] and tau2_test_proximity(many_tasks) == {"available": False}


def _longest_brute_force(docs: list[list[str]], n: int, toks: list[str]) -> tuple[int, int, str] | None:
    """Every start in `toks` against every start in every doc: the longest shared run of at
    least `n` tokens, the first found on ties (by position in `toks`, then doc, then doc position)."""
    best = None
    for i in range(len(toks) - n + 1):
        for j, doc in enumerate(docs):
            for p in range(len(doc) - n + 1):
                k = 0
                while i + k < len(toks) and p + k < len(doc) and toks[i + k] == doc[p + k]:
                    k += 1
                if k >= n and (best is None or k > best[0]):
                    best = (k, j, " ".join(toks[i:i + k]))
    return best


def test_longest_match_equals_a_brute_force_search_on_repetitive_text() -> None:
    import random

    from curation.hygiene.decontamination import _NgramIndex

    rng = random.Random(3)
    words = ["a", "b", "c"]  # three words: shared runs everywhere, as in templated text
    docs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) for _ in range(12)]
    docs += docs[2:6]  # repeated docs, as a test split's rows repeat their task's text
    for n in (2, 3, 5):
        index = _NgramIndex(docs, n)
        for _ in range(150):
            toks = [rng.choice([*words, "x", "y"]) for _ in range(rng.randint(0, 25))]  # x, y: in no doc
            assert index.longest(toks) == _longest_brute_force(index.docs, n, toks), (n, toks)
            assert index.longest(toks) == index.longest(list(toks))  # asked again: the kept answer
