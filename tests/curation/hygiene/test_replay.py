"""Re-judging scrubbed rows: a row that scrubbing changed is judged again and dropped,
counted, if it no longer passes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from curation.hygiene import Scrubber, replay_scrubbed, scrub_all
from data.card import run_sections
from data.records import Task, ToolCall, Verdict
from envs.registry import get_world
from pipelines.config import RunConfig
from pipelines.stages import clean_rows
from tests.curation.hygiene.planted import PLANTED_PHONE, released
from verifiers.audit import build_dialogue, build_trajectory, replay_hash


def test_scrubbed_row_that_fails_its_verifier_is_dropped_and_counted(
    world_tasks: dict[str, list[Task]], tmp_path: Any
) -> None:
    base = world_tasks["retail"][1]
    world = get_world("retail")
    env = world.env(base.initial_state)
    order = env.conn.execute("SELECT order_id FROM orders WHERE status = 'pending' LIMIT 1").fetchone()[0]
    env.close()
    # A write that stores a planted phone number: scrubbed, it no longer reaches the target.
    write = [ToolCall(name="modify_order_address",
                      arguments={"order_id": order, "address": "12 Elm Street, call " + PLANTED_PHONE})]
    task = base.model_copy(update={"reference_solution": write, "dialogue": [], "target_diff": [],
                                   "verification": base.verification.model_copy(update={"basis": ["DB"]})})
    task = task.model_copy(update={"target_state_hash": replay_hash(task, write)[0]}).with_id()
    # The planted number only in what the user says: scrubbed, the row still passes.
    chatty = base.model_copy(update={"instruction": base.instruction + " Or call me: " + PLANTED_PHONE}).with_id()
    turns = [base.dialogue[0].model_copy(update={"content": base.dialogue[0].content + " " + PLANTED_PHONE}),
             *base.dialogue[1:]]
    trajs = [build_trajectory(task, write), build_dialogue(chatty, turns)]
    rows, selection = released([task, chatty], trajs)
    figures: dict[str, Any] = {}
    for name in ("sft", "rl"):
        clean, report = clean_rows(RunConfig(), tmp_path, name, rows[name], [task, chatty], selection)
        assert [r["task_id"] for r in clean] == [chatty.id], name
        assert PLANTED_PHONE not in json.dumps(clean)
        # the number sits in the write's arguments: the row is dropped before any replay, since a
        # placeholder there would teach (or reward) a call that cannot work
        assert report["scrub"]["dropped_call_arguments"] == 1
        replay = report["replay"]
        assert (replay["checked"], replay["passed"], replay["dropped"]) == (1, 1, 0), replay
        figures[name] = report
    card = run_sections({"hygiene": figures})
    assert card.count("1 dropped (a placeholder in a call's arguments); 1 re-judged, 0 dropped") == 2


def _verdict(row: dict[str, Any], passed: bool, score: float, reason: str = "") -> Verdict:
    return Verdict(trajectory_id=row["trajectory_id"], task_id="t", verifier="fake", verifier_version="1",
                   passed=passed, score=score, reasons=[reason] if reason else [])


def test_replay_judges_only_changed_rows_and_drops_the_failing() -> None:
    """Rows scrubbing left alone are not judged; of the changed ones a pass keeps the row with the
    new score, a failure or an unjudgeable row (None) drops it with its counted reason."""
    email = "jane.doe@" + "example-mail.co.uk"
    rows = [{"trajectory_id": f"r{i}", "score": 1.0, "messages": [{"role": "user", "content": text}]}
            for i, text in enumerate(["write to " + email, "nothing secret", "mail " + email, "cc " + email])]
    scrubbed, _, scrubbers = scrub_all(rows, None, None)
    seen: list[str] = []

    def replay(batch: list[tuple[dict[str, Any], Scrubber]]) -> list[Verdict | None]:
        seen.extend(row["trajectory_id"] for row, _ in batch)
        assert all("[REDACTED_EMAIL]" in row["messages"][0]["content"] for row, _ in batch)  # the scrubbed text
        return [_verdict(batch[0][0], True, 0.5), _verdict(batch[1][0], False, 0.0, "DB: wrong address"), None]

    kept, report = replay_scrubbed(scrubbed, scrubbers, replay)
    assert seen == ["r0", "r2", "r3"]
    assert [(r["trajectory_id"], r["score"]) for r in kept] == [("r0", 0.5), ("r1", 1.0)]
    assert (report.enabled, report.checked, report.passed, report.dropped) == (True, 3, 1, 2)
    assert report.reasons == {"DB: wrong address": 1, "cannot be judged": 1}
    assert [e["row"] for e in report.examples] == ["r2", "r3"]
    unjudged, off = replay_scrubbed(scrubbed, scrubbers, None)
    assert unjudged == scrubbed and not off.enabled and off.checked == 0
    with pytest.raises(ValueError, match="judged 1 rows, not the 3"):
        replay_scrubbed(scrubbed, scrubbers, lambda batch: [None])
