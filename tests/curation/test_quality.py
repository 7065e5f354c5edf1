"""The data-quality audit of a release's sft rows: per-clause policy compliance, informative
replies, explained refusals, reference share and recovery rows."""

from __future__ import annotations

import pytest

from curation.base import Selection
from curation.quality import quality_figures, row_quality, sft_quality
from data.records import Task, Trajectory, Turn, Verdict
from envs.registry import get_world
from tests.curation.rollouts import ERR_U2, OK_U1, traj
from verifiers.audit import build_dialogue


def test_quality_figures_from_counts() -> None:
    counts = {"rows": 4, "judged": 3, "reference": 1, "recovery": 2,
              "clauses": {"identity": {"n": 4, "bad": 1}, "grounded_arguments": {"n": 5, "bad": 0},
                          "no_write_after_decline": {"n": 0, "bad": 0}},
              "informative": {"n": 2, "ok": 1}, "refusal": {"n": 0, "ok": 0}}
    assert quality_figures(counts) == {
        "rows": 4, "rows_judged_by_policy": 3,
        "clause_compliance": {"grounded_arguments": 1.0, "identity": 0.75, "no_write_after_decline": None},
        "clause_compliance_min": 0.75, "grounded_args_rate": 1.0, "informative_reply_rate": 0.5,
        "refusal_explained_rate": None, "reference_share": 0.25, "recovery_rows": 2,
    }
    nothing = quality_figures({})
    assert nothing["rows"] == 0 and nothing["clause_compliance_min"] is None and nothing["reference_share"] is None


def _selection(rows: list[Trajectory]) -> Selection:
    return Selection(sft=[(t, Verdict(trajectory_id=t.id, task_id=t.task_id, verifier="v", verifier_version="1",
                                      passed=True, score=1.0)) for t in rows])


def test_sft_quality_finds_the_faulty_rows(tasks: list[Task]) -> None:
    """Gold dialogues comply with every clause and tell what they must; a write without the
    user's yes breaks announce-and-confirm once, a silent ending is no informative reply, and
    a row of a task not given is counted but not judged."""
    by_id = {t.id: t for t in tasks}
    gold = [build_dialogue(t, t.dialogue) for t in tasks]
    gold[0] = gold[0].model_copy(update={"reference": True})
    clean = sft_quality(_selection(gold), by_id)
    assert clean["rows"] == clean["rows_judged_by_policy"] == len(tasks) and clean["reference_share"] == round(1 / 7, 4)
    assert set(clean["clause_compliance"]) >= {"identity", "grounded_arguments", "announce_and_confirm"}
    assert set(clean["clause_compliance"].values()) == {1.0} and clean["recovery_rows"] == 0
    assert clean["informative_reply_rate"] == 1.0 and clean["refusal_explained_rate"] == 1.0

    task = tasks[0]
    world = get_world(task.world)
    turns = list(task.dialogue)
    first = next(i for i, t in enumerate(turns) if any(world.tools[c.name].write for c in t.tool_calls))
    assert turns[first - 1].role == "user"
    no_yes = build_dialogue(task, turns[: first - 1] + turns[first:], "no-yes")
    silent = build_dialogue(task, [*turns[:-1], Turn(role="assistant", content="Your request is complete.")], "silent")
    stray = traj("not-given", 0, [ERR_U2, OK_U1])
    assert row_quality(stray, None) == {"rows": 1, "reference": 0, "recovery": 1, "judged": 0, "clauses": {},
                                        "informative": {"n": 0, "ok": 0}, "refusal": {"n": 0, "ok": 0}}
    writes = sum(row_quality(t, by_id[t.task_id])["clauses"].get("announce_and_confirm", {"n": 0})["n"] for t in gold)
    informative = sum(1 for t in tasks if t.verification.outcome != "refusal" and t.verification.communicate)
    faulty = sft_quality(_selection([*gold, no_yes, silent, stray]), by_id)
    n = writes + 2 * row_quality(no_yes, task)["clauses"]["announce_and_confirm"]["n"]  # the two rows' writes
    assert faulty["clause_compliance"]["announce_and_confirm"] == pytest.approx(round((n - 1) / n, 4))
    assert faulty["clause_compliance_min"] == faulty["clause_compliance"]["announce_and_confirm"] < 1.0
    assert faulty["grounded_args_rate"] == 1.0 and faulty["refusal_explained_rate"] == 1.0
    assert faulty["informative_reply_rate"] == round((informative + 1) / (informative + 2), 4)
    assert (faulty["rows"], faulty["rows_judged_by_policy"], faulty["recovery_rows"]) == (len(tasks) + 3,
                                                                                         len(tasks) + 2, 1)
