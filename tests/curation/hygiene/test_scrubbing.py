"""Scrubbing: planted secrets and PII become typed placeholders everywhere, one per value;
the values the world generated stay."""

from __future__ import annotations

import json
import re
from typing import Any

from curation.hygiene import (
    Synthetic,
    call_arguments,
    scrub_all,
    scrub_record,
    scrub_row,
    scrub_rows,
    scrub_text,
)
from data.records import Task, canonical_json
from envs.registry import get_world
from pipelines.config import RunConfig
from pipelines.stages import clean_rows
from tests.curation.hygiene.planted import (
    CANARIES,
    PLANTED_PHONE,
    calls,
    released,
    row_with_canaries,
    secret_part,
)
from verifiers.audit import build_trajectory


def test_every_planted_secret_is_caught_everywhere() -> None:
    row = row_with_canaries()
    clean, scrubber = scrub_row(row)  # one row, everything rewritten (the release drops it: below)
    dumped = json.dumps(clean)
    for kind, value in CANARIES.items():
        secret = secret_part(kind, value)
        for piece in (secret, secret.split("\n")[0][-12:]):
            assert piece not in dumped and json.dumps(piece)[1:-1] not in dumped, kind
        assert scrubber.counts.get(kind) == 3, (
            kind,
            scrubber.counts,
        )  # message, arguments, observation
        assert f"[REDACTED_{kind}]" in clean["messages"][1]["content"]
    assert scrubber.by_column == {"messages": 30} and sum(scrubber.counts.values()) == 30
    assert scrub_rows([row]) == ([], scrub_rows([row])[1]) and scrub_rows([row])[1].dropped_call_arguments == 1
    [kept], report = scrub_rows([row_with_canaries(in_arguments=False)])
    assert report.rows_changed == 1 and report.total == 20 and report.dropped_call_arguments == 0
    assert not any(piece in json.dumps(kept) for piece in CANARIES.values())
    args = json.loads(clean["messages"][2]["tool_calls"][0]["function"]["arguments"])
    obs = json.loads(clean["messages"][3]["content"])
    assert (
        "[REDACTED_PRIVATE_KEY]" in args["summary"] and "[REDACTED_JWT]" in obs["echo"]["notes"][0]
    )
    assert "aws_secret_access_key=[REDACTED_AWS_SECRET_KEY]" in args["summary"]
    assert clean["score"] == 1.0 and clean["task_id"] == "task-1"
    assert row["messages"][1]["content"].startswith(
        "Hi, my api_key is sk-"
    )  # input rows are not modified


def test_no_false_positives_on_real_trajectories(tasks: list[Task]) -> None:
    """Ids, dates, times, prices and hashes of the airline world survive; only e-mail
    addresses (user records the tools return) are PII there."""
    for task in tasks:
        traj = build_trajectory(task, task.reference_solution)
        row = {
            "messages": traj.messages,
            "task": json.dumps(task.model_dump()),
            "tools": json.dumps(traj.tools),
        }
        [clean], report = scrub_rows([row])
        assert set(report.replacements) <= {"EMAIL"}, report.replacements
        assert clean["task"] == row["task"]
        if not report.replacements:
            assert clean == row
        cleaned = scrub_record(traj)
        assert cleaned.steps[0].action == traj.steps[0].action
    assert (
        scrub_text(
            "Flight HAT012-2026-05-14 departs 2026-05-14 12:15, total 1,234.50 (R0300000), 4242"
        )
        == "Flight HAT012-2026-05-14 departs 2026-05-14 12:15, total 1,234.50 (R0300000), 4242"
    )


def test_world_synthetic_emails_stay_intact(world_tasks: dict[str, list[Task]], tmp_path: Any) -> None:
    tasks = world_tasks["retail"]
    rows, selection = released(tasks)
    emails = [a["email"] for r in rows["sft"] for n, a in calls(r) if n == "find_customer_by_email"]
    assert emails and all("@example." in e for e in emails)
    for name in ("sft", "rl"):
        [clean], report = clean_rows(RunConfig(), tmp_path, name, rows[name][:1], tasks, selection)
        assert clean == rows[name][0], name  # nothing rewritten: no placeholder, score as it was
        assert report["scrub"]["replacements"] == {} and report["scrub"]["synthetic_kept"]["EMAIL"] > 0
        assert report["replay"]["checked"] == 0
    # Without the world's values the same e-mail would be taken for the user's PII.
    blind, _ = scrub_row(rows["sft"][0])
    assert [a["email"] for n, a in calls(blind) if n == "find_customer_by_email"][0] == "[REDACTED_EMAIL]"
    # ... and release hygiene would not release that row rather than teach a redacted call
    assert scrub_rows(rows["sft"][:1])[0] == [] and scrub_rows(rows["sft"][:1])[1].dropped_call_arguments == 1


def test_world_phone_numbers_stay_intact(world_tasks: dict[str, list[Task]], tmp_path: Any) -> None:
    tasks = world_tasks["telecom"]
    task = next(t for t in tasks if "555-" in t.instruction)
    rows, selection = released([task])
    number = re.search(r"555-\d{3}-\d{4}", task.instruction).group(0)  # type: ignore[union-attr]
    for name, text_col in (("sft", "messages"), ("rl", "prompt")):
        [clean], report = clean_rows(RunConfig(), tmp_path, name, rows[name], [task], selection)
        assert clean == rows[name][0]
        assert report["scrub"]["replacements"] == {} and report["scrub"]["synthetic_kept"]["PHONE"] > 0
        assert number in json.dumps(clean[text_col])
    obs = [m["content"] for m in rows["sft"][0]["messages"] if m["role"] == "tool"]
    assert any('"phone_number"' in o for o in obs)  # the tool results list the lines, numbers intact
    assert number in json.loads(rows["rl"][0]["task"])["instruction"]


def test_minted_numbers_in_tool_results_are_the_worlds() -> None:
    """A phone number that first comes out of a tool result was minted by the world (a new
    line); one the user typed first is theirs, and stays scrubbed when a tool echoes it."""
    row = {"messages": [
        {"role": "user", "content": "Please add a line. My other number is " + PLANTED_PHONE},
        {"role": "tool", "content": json.dumps({"phone_number": "556-123-4567", "echo": PLANTED_PHONE})},
        {"role": "assistant", "content": "Your new line is 556-123-4567."},
    ]}
    [clean], report = scrub_rows([row])
    assert report.replacements == {"PHONE": 2} and report.synthetic_kept == {"PHONE": 2}
    assert clean["messages"][2]["content"] == "Your new line is 556-123-4567."
    assert json.loads(clean["messages"][1]["content"])["echo"] == "[REDACTED_PHONE]"
    # A token is the world's only if its initial state holds it (a tool could print the host's).
    key = CANARIES["HF_TOKEN"]
    [tok], _ = scrub_rows([{"messages": [{"role": "tool", "content": "HF_TOKEN=" + key}]}])
    assert key not in json.dumps(tok)
    [kept], _ = scrub_rows([{"messages": [{"role": "tool", "content": "HF_TOKEN=" + key}]}],
                           synthetic=Synthetic.of_texts(["seeded: " + key]))
    assert key in json.dumps(kept)


def test_planted_secret_gets_one_placeholder_everywhere() -> None:
    key, other = CANARIES["API_KEY"], CANARIES["API_KEY"][:-2] + "Yy"
    secret = secret_part("AWS_SECRET_KEY", CANARIES["AWS_SECRET_KEY"])
    task = {
        "id": "task-1", "world": "retail", "target_state_hash": "abc",
        "initial_state": {"world": "retail", "seed": 1, "scale": 30, "patches": [], "state_hash": "abc"},
        "instruction": f"Store my key {key} (not {other}); the AWS secret is {secret}.",
        "reference_solution": [{"name": "save_note", "arguments": {"note": key}}],
        "target_diff": [],
    }
    row = {
        "messages": [
            {"role": "user", "content": f"My key is {key}, the old one {other}. " + CANARIES["AWS_SECRET_KEY"]},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "save_note", "arguments": json.dumps({"note": key})}}]},
            {"role": "tool", "tool_call_id": "c0", "name": "save_note", "content": json.dumps({"saved": key})},
        ],
        "task": canonical_json(task),
        "task_id": "task-1",
    }
    clean, scrubber = scrub_row(row)
    dumped = json.dumps(clean)
    assert key not in dumped and other not in dumped and secret not in dumped
    user = clean["messages"][0]["content"]
    assert user.startswith("My key is [REDACTED_API_KEY], the old one [REDACTED_API_KEY_2]. aws_secret_access_key=")
    assert calls(clean) == [("save_note", {"note": "[REDACTED_API_KEY]"})]
    assert json.loads(clean["messages"][2]["content"]) == {"saved": "[REDACTED_API_KEY]"}
    scrubbed = json.loads(clean["task"])
    assert clean["task"] == canonical_json(scrubbed)  # still canonical JSON
    # the same placeholders in the task JSON, also where no pattern matches (a secret without its label)
    assert scrubbed["instruction"] == ("Store my key [REDACTED_API_KEY] (not [REDACTED_API_KEY_2]); "
                                       "the AWS secret is [REDACTED_AWS_SECRET_KEY].")
    assert scrubbed["reference_solution"][0]["arguments"] == {"note": "[REDACTED_API_KEY]"}
    assert {k: scrubbed[k] for k in ("id", "initial_state", "target_state_hash")} == {
        k: task[k] for k in ("id", "initial_state", "target_state_hash")}
    assert scrubber.counts == {"API_KEY": 7, "AWS_SECRET_KEY": 2}  # 4 + 3 and 1 + 1
    assert scrubber.by_column == {"messages": 5, "task": 4}
    # the key is a call's argument (in the messages and the task's reference solution): not released
    assert scrub_rows([row])[1].dropped_call_arguments == 1


def test_release_hygiene_never_writes_a_placeholder_into_a_call_argument() -> None:
    """A row whose scrubbing would change a tool call's arguments (an assistant call, an rl row's
    reference solution, the task's) is dropped and counted; PII outside calls is scrubbed and
    the row kept; the world's own values in a call keep the row as it is."""
    typo = "alice.chen@example.comX"  # a mistyped argument: no world made this address
    world = "alice.chen@example.com"

    def sft(rid: str, email: str, in_call: bool) -> dict[str, Any]:
        args = json.dumps({"email": email if in_call else world})
        return {"trajectory_id": rid, "messages": [
            {"role": "user", "content": f"I am {email}"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "find_user", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "c0", "name": "find_user", "content": '{"user_id": "u1"}'},
            {"role": "assistant", "content": "Found you."}]}

    rl = {"task_id": "t1", "prompt": [{"role": "user", "content": "hi"}],
          "reference_solution": json.dumps([{"name": "find_user", "arguments": {"email": typo}}]),
          "task": json.dumps({"instruction": "x", "reference_solution": [{"name": "find_user",
                                                                          "arguments": {"email": typo}}]})}
    known = Synthetic.of_texts([world])
    rows = [sft("typo-in-call", typo, True), sft("typo-in-text", typo, False), sft("world", world, True), rl]
    kept, report, scrubbers = scrub_all(rows, None, known)
    assert [r.get("trajectory_id") for r in kept] == ["typo-in-text", "world"]
    assert report.dropped_call_arguments == 2 and report.rows == 4 and report.rows_changed == 1
    assert len(scrubbers) == len(kept)  # aligned with the kept rows (replay reads them together)
    assert kept[0]["messages"][0]["content"] == "I am [REDACTED_EMAIL]" and kept[1] == rows[2]
    assert all("REDACTED" not in json.dumps(call_arguments(r)) for r in kept)
    assert call_arguments(rl) == [{"email": typo}, {"email": typo}]


def test_workspace_world_declares_its_files() -> None:
    """A workspace world's synthetic values are what its recipe writes (e.g. a contacts file)."""
    from data.records import StateRef
    from envs.workspace import recipe

    world = get_world("terminal")
    ref = StateRef(world="terminal", seed=0, scale=0, state_hash="-",
                   patches=recipe({"contacts.txt": "ana.li@uni.edu, +1 415 555 0199\n"}))
    known = Synthetic.of_texts(world.synthetic_values(ref))
    row = {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "run_shell", "arguments": json.dumps({"command": "grep ana.li@uni.edu x"})}}]}]}
    [clean], report = scrub_rows([row], synthetic=known)
    assert clean == row and report.synthetic_kept == {"EMAIL": 1}
