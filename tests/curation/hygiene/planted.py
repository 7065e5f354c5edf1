"""What the hygiene tests plant: secret canaries, an evaluation text, a phone number in no
world's data, and the release rows of tasks made by the release code."""

from __future__ import annotations

import json
from typing import Any

from curation.base import RLPick, Selection
from data.records import Task, Trajectory
from pipelines.stages import release_rows
from verifiers.audit import build_dialogue
from verifiers.base import get_verifier

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


def secret_part(kind: str, text: str) -> str:
    """The secret itself (an AWS secret key canary carries its label)."""
    return text.split("=", 1)[1] if kind == "AWS_SECRET_KEY" else text


def row_with_canaries(in_arguments: bool = True) -> dict[str, Any]:
    """An sft row with every canary in a message, tool arguments (unless not `in_arguments`:
    release hygiene drops a row whose call arguments it would rewrite) and an observation."""
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
                            "arguments": json.dumps({"summary": all_text if in_arguments else "see above"}),
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


EVAL_TEXT = (
    "I need to change my flight from Boston to Denver next Tuesday because my meeting moved, and I "
    "want to keep the same cabin and use my travel certificate for any fare difference please"
)


PLANTED_PHONE = "+44 20 7946 " + "0958"  # real-looking, in no world's data


def released(tasks: list[Task], trajectories: list[Trajectory] | None = None) -> tuple[dict, Selection]:
    """The sft rows (of gold dialogues, or `trajectories`) and rl rows of `tasks`, made by the
    release code."""
    trajs = trajectories or [build_dialogue(t, t.dialogue) for t in tasks]
    by_id = {t.id: t for t in tasks}
    verdicts = [get_verifier("composite").verify(by_id[g.task_id], g) for g in trajs]
    assert all(v.passed for v in verdicts), [v.reasons for v in verdicts]
    selection = Selection(sft=list(zip(trajs, verdicts, strict=True)),
                          rl=[RLPick(t, 0.5, 2, "test") for t in tasks])
    return release_rows(selection, tasks), selection


def calls(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (name, arguments) of every tool call the assistant made in an sft row."""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in row["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
