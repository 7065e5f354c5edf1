"""Release hygiene: scrubbing planted secrets, dedup, decontamination."""

from __future__ import annotations

import json
from typing import Any

import pytest

from curation.hygiene import (
    EVAL_SETS,
    clean_release,
    decontaminate,
    dedup,
    item_of,
    register_eval_set,
    scrub_record,
    scrub_rows,
    scrub_text,
)
from data.records import Task
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from verifiers.audit import build_trajectory

# Canaries, assembled at run time so that no real-looking secret sits in the source.
A = "Zq7"  # filler
CANARIES: dict[str, str] = {
    "API_KEY": "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7" + "zZ",
    "AWS_ACCESS_KEY": "AKIA" + "IOSFODNN7" + "EXAMPL2",
    "AWS_SECRET_KEY": "aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY",
    "GITHUB_TOKEN": "ghp_" + "a1B2c3D4e5F6g7H8i9J0" + "k1L2m3N4o5P6q7R8",
    "SLACK_TOKEN": "xoxb-" + "123456789012-" + "1234567890123-" + A * 8,
    "HF_TOKEN": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz" + "012345",
    "JWT": "eyJhbGciOiJIUzI1NiJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA"
    + A * 10
    + "\n"
    + A * 12
    + "\n-----END RSA PRIVATE KEY-----",
    "EMAIL": "jane.doe+travel@" + "example-mail.co.uk",
    "PHONE": "+1 (415) 555-" + "0132",
}


def _secret_part(kind: str, text: str) -> str:
    return text.split("=", 1)[1] if kind == "AWS_SECRET_KEY" else text


def _row_with_canaries() -> dict[str, Any]:
    all_text = "; ".join(f"my {k.lower()} is {v} ok" for k, v in CANARIES.items())
    return {
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Hi, " + all_text},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {
                            "name": "transfer_to_human_agents",
                            "arguments": json.dumps({"summary": all_text}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c0",
                "name": "transfer_to_human_agents",
                "content": json.dumps({"status": "ok", "echo": {"notes": [all_text]}}),
            },
        ],
        "tools": "[]",
        "task_id": "task-1",
        "trajectory_id": "traj-1",
        "score": 1.0,
    }


def test_every_planted_secret_is_caught_everywhere() -> None:
    row = _row_with_canaries()
    [clean], report = scrub_rows([row])
    dumped = json.dumps(clean)
    for kind, value in CANARIES.items():
        secret = _secret_part(kind, value)
        for piece in (secret, secret.split("\n")[0][-12:]):
            assert piece not in dumped and json.dumps(piece)[1:-1] not in dumped, kind
        assert report.replacements.get(kind) == 3, (
            kind,
            report.replacements,
        )  # message, arguments, observation
        assert f"[REDACTED_{kind}]" in clean["messages"][1]["content"]
    assert report.rows_changed == 1 and report.by_column == {"messages": 30} and report.total == 30
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


@pytest.fixture(scope="module")
def many_tasks() -> list[Task]:
    world = get_world("airline")
    out: list[Task] = []
    for method in ("logic_driven", "constraint_guided"):
        for seed in (0, 1):
            out += get_method(method)(
                SynthesisConfig(method=method, n_tasks=7, seed=seed), world
            ).tasks
    assert len({t.id for t in out}) == len(out)
    return out


def _edits(text: str) -> list[str]:
    words = text.split()
    return [
        text.upper(),  # case
        "  " + text.replace(" ", "   ") + " ",  # whitespace
        text.rstrip(".") + "!",  # punctuation
        " ".join(words[:3] + ["really"] + words[3:]),  # one word inserted
        " ".join(
            w if i != len(words) // 2 else w + "s" for i, w in enumerate(words)
        ),  # one word changed
    ]


def test_dedup_removes_small_edits_and_keeps_distinct_tasks(many_tasks: list[Task]) -> None:
    rows = [
        {
            "id": t.id,
            "instruction": t.instruction,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments} for c in t.reference_solution
            ],
        }
        for t in many_tasks
    ]
    variants = []
    for r in rows[::3]:
        for j, text in enumerate(_edits(r["instruction"])):
            variants.append({**r, "id": f"{r['id']}-edit{j}", "instruction": text})
    exact = [{**r, "id": r["id"] + "-copy"} for r in rows[:2]]
    kept, report = dedup(rows + variants + exact)
    assert [r["id"] for r in kept] == [r["id"] for r in rows]
    assert report.exact_duplicates == len(exact) + 2 * len(
        rows[::3]
    )  # case and whitespace edits normalize away
    assert report.near_duplicates == 3 * len(rows[::3])
    assert report.removed == len(variants) + len(exact)
    # Against an earlier release: its items (rows, records or texts) knock out their repeats.
    kept2, report2 = dedup(rows[:5] + variants[:5], earlier=[many_tasks[0], rows[1]])
    assert (
        report2.exact_vs_earlier == 2 + 2 and report2.near_vs_earlier == 3
    )  # rows 0-1, then row 0's edits
    assert {e["duplicate_of"] for e in report2.examples} == {many_tasks[0].id, rows[1]["id"]}
    assert [r["id"] for r in kept2] == [r["id"] for r in rows[2:5]]
    with pytest.raises(ValueError, match="threshold"):
        dedup(rows, threshold=0)


def test_dedup_reads_release_rows(tasks: list[Task]) -> None:
    trajs = [build_trajectory(t, t.reference_solution) for t in tasks[:3]]
    sft = [{"messages": t.messages, "tools": "[]", "trajectory_id": t.id} for t in trajs]
    kept, report = dedup(sft + [dict(sft[0], trajectory_id="again")])
    assert len(kept) == 3 and report.exact_duplicates == 1
    item = item_of(sft[0])
    assert item.instruction == tasks[0].instruction
    assert [n for n, _ in item.tool_calls] == [c.name for c in tasks[0].reference_solution]
    with pytest.raises(ValueError, match="no messages, prompt or instruction"):
        item_of({"foo": 1})


EVAL_TEXT = (
    "I need to change my flight from Boston to Denver next Tuesday because my meeting moved, and I "
    "want to keep the same cabin and use my travel certificate for any fare difference please"
)


@pytest.fixture()
def eval_set() -> Any:
    register_eval_set(
        "toy_eval",
        [EVAL_TEXT, "What is the baggage allowance for a gold member?"],
        tool_sequences=['update_baggage({"reservation_id":"RZZ1","total_bags":3})'],
    )
    yield "toy_eval"
    EVAL_SETS.pop("toy_eval", None)


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


def test_clean_release_runs_all_three(eval_set: str) -> None:
    rows = [
        _row_with_canaries(),
        dict(_row_with_canaries(), trajectory_id="traj-2"),
        {"messages": [{"role": "user", "content": EVAL_TEXT}], "trajectory_id": "leak"},
    ]
    out, report = clean_release(rows, eval_sets=[eval_set])
    assert [r["trajectory_id"] for r in out] == ["traj-1"]
    assert report.scrub.total == 60 and report.dedup.exact_duplicates == 1
    assert report.contamination.eval_sets[eval_set].removed == 1
    json.dumps(report.card())
