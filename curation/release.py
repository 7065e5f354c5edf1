"""Rows of the released datasets, built from curated records (pure functions, no I/O).

`sft` rows are TRL's conversational format (`messages` + `tools`, ending at the agent's last
reply) with metadata columns (whether the row is the reference dialogue, whether it recovers
from a failed call, why curation kept it);
`rl` rows hold the `prompt` (system + opening user turn), `tools`, the full task, and what
names and judges its environment without trajforge's internals: `environment` (the world,
TRL's `environment_factory` key), the world and verifier versions, and the reference
solution with the world's state-changing tools (the portable action-match reward's input).

JSON-typed columns (`data.schema`: `tools`, tool-call `arguments`, `task`,
`reference_solution`) are given here as JSON text.

Chat-template control tokens in the text a template renders (`messages`: content, tool calls'
names and arguments, tool results; the rl `prompt`) are escaped here (`released_messages`:
`rollout.control_tokens.escape_released_message`, a U+200B after the token's first
character; `rollout.control_tokens.unescape` reverses it), since plain TRL renders rows with
no escape of its own. `tools` (the world's schemas), `task` and `reference_solution` are kept
as they are: no template renders the task, and the environment replays it.
"""

from __future__ import annotations

import json
from typing import Any

from curation.base import Selection, failed_calls
from data.records import canonical_json
from data.schema import release_message
from rollout.control_tokens import escape_released_message
from rollout.user import MARKERS


def conversation_for_training(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` up to the agent's last reply: what the user says after it (the closing,
    with the simulator's end marker) is not the agent's to learn, and no marker is left in a
    released row. A conversation that never replies in text keeps every message."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"
                and (m.get("content") or "").strip() and not m.get("tool_calls")), default=len(messages) - 1)
    out = []
    for m in messages[: last + 1]:
        if m.get("role") == "user" and isinstance(m.get("content"), str) and any(k in m["content"] for k in MARKERS):
            text = m["content"]
            for k in MARKERS:
                text = text.replace(k, "")
            m = {**m, "content": text.strip()}
        out.append(m)
    return out


def released_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages in the release's shape (`release_message`) with their control tokens escaped
    (`escape_released_message`): each renders as one turn in any chat template."""
    return [escape_released_message(release_message(m)) for m in messages]


def sft_rows(selection: Selection, split_of: dict[str, str], method_of: dict[str, str], world_of: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for traj, verdict in selection.sft:
        rows.append({
            "messages": released_messages(conversation_for_training(traj.messages)),
            "tools": json.dumps(traj.tools, ensure_ascii=False),
            "task_id": traj.task_id,
            "trajectory_id": traj.id,
            "world": world_of.get(traj.task_id, ""),
            "method": method_of.get(traj.task_id, ""),
            "model": traj.model,
            "trial": traj.trial,
            "score": verdict.score,
            "split": split_of.get(traj.task_id, "train"),
            "reference": bool(traj.reference),
            "recovery": failed_calls(traj) > 0,
            "selection_reason": selection.sft_reasons.get(traj.id, ""),
        })
    return rows


def rl_rows(selection: Selection, prompts: dict[str, list[dict[str, Any]]], tools: dict[str, list[dict[str, Any]]],
            environments: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """`environments[task_id]`: `world_version`, `verifier`, `verifier_version` and
    `write_tools` (names of the world's tools that change its state) of the task."""
    rows = []
    for pick in selection.rl:
        task = pick.task
        env = (environments or {}).get(task.id, {})
        writes = set(env.get("write_tools") or [])
        rows.append({
            "prompt": released_messages(prompts[task.id]),
            "tools": json.dumps(tools[task.id], ensure_ascii=False),
            "task_id": task.id,
            "world": task.world,
            "method": task.method,
            "task": canonical_json(task.model_dump()),
            "pass_rate": pick.pass_rate,
            "n_trials": pick.n_trials,
            "selection_reason": pick.reason,
            "split": task.split,
            "environment": task.world,
            "world_version": env.get("world_version"),
            "verifier": env.get("verifier"),
            "verifier_version": env.get("verifier_version"),
            "reference_solution": json.dumps(
                [{"name": c.name, "arguments": c.arguments, "write": c.name in writes} for c in task.reference_solution],
                ensure_ascii=False),
            "write_tools": sorted(writes),
        })
    return rows
