"""Rows of the released datasets, built from curated records (pure functions, no I/O).

`sft` rows are TRL's conversational format (`messages` + `tools`, ending at the agent's last
reply) with metadata columns (whether the row is the reference dialogue, whether it recovers
from a failed call, why curation kept it). A selected conversation goes to one of two configs
(`sft_configs`), so that no released row trains a mistake:

- `sft` (the default): conversations without any failed assistant turn;
- `sft_recovery`: conversations with a failed assistant turn the agent recovered from (a
  reflective recovery is worth learning). Each failed assistant turn is marked
  ``"train": false`` on its message (`data.schema.SFT_RECOVERY_SCHEMA`), the others
  ``"train": true``; the project's chat templates leave a marked turn outside their
  ``{% generation %}`` blocks, so TRL's assistant-only loss gives it no token, while its
  error result stays in the context the recovery learns from.

A failed turn is read from the trajectory's own records (`curation.base.failed_turns`): its
failed steps (tool errors, rule violations, unknown tools, rejected arguments, calls the
parser could not read) and its tool results that are the world's error object. A
conversation whose failed step cannot be located in its messages is released in neither.
`trained_failures` counts, over released rows, those that still give loss to a failed turn
(0 is the target for every config).

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
from collections.abc import Iterable, Mapping
from typing import Any

from curation.base import Selection, failed_message_turns, failed_turns
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


def marked_messages(messages: list[dict[str, Any]], failed: set[int]) -> list[dict[str, Any]]:
    """`released_messages` with the loss mark of the `sft_recovery` config: ``train`` False on
    the assistant messages at indices `failed`, True on the other assistant messages, None on
    the rest (no loss ever falls on them)."""
    out = released_messages(messages)
    for i, m in enumerate(out):
        m["train"] = (i not in failed) if m["role"] == "assistant" else None
    return out


def sft_configs(selection: Selection, split_of: dict[str, str], method_of: dict[str, str],
                world_of: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """The rows of both sft configs (module docstring): ``{"sft": [...], "sft_recovery": [...]}``,
    in selection order. A trajectory whose failed step has no assistant message to mark is
    left out of both."""
    out: dict[str, list[dict[str, Any]]] = {"sft": [], "sft_recovery": []}
    for traj, verdict in selection.sft:
        messages = conversation_for_training(traj.messages)
        try:
            failed = {i for i in failed_turns(traj) if i < len(messages)}
        except ValueError:
            continue
        row = {
            "messages": marked_messages(messages, failed) if failed else released_messages(messages),
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
            "recovery": bool(failed),
            "selection_reason": selection.sft_reasons.get(traj.id, ""),
        }
        out["sft_recovery" if failed else "sft"].append(row)
    return out


def sft_rows(selection: Selection, split_of: dict[str, str], method_of: dict[str, str],
             world_of: dict[str, str]) -> list[dict[str, Any]]:
    """The default `sft` config's rows: selected conversations without a failed assistant turn."""
    return sft_configs(selection, split_of, method_of, world_of)["sft"]


def sft_recovery_rows(selection: Selection, split_of: dict[str, str], method_of: dict[str, str],
                      world_of: dict[str, str]) -> list[dict[str, Any]]:
    """The `sft_recovery` config's rows: conversations that recover from a failed assistant
    turn, each failed turn marked ``train: false`` (`marked_messages`)."""
    return sft_configs(selection, split_of, method_of, world_of)["sft_recovery"]


def _decoded(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(m) for m in messages]


def trained_failures(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many released sft rows (any config; as pyarrow or `datasets` gives them) hold a failed
    assistant turn that carries loss: one `curation.base.failed_message_turns` finds (a call
    the parser could not read, a call to a tool the row does not offer, an error result)
    whose message is not marked ``train: false``. 0 is the target of every config."""
    n = 0
    for row in rows:
        messages = _decoded(row.get("messages") or [])
        tools = row.get("tools")
        schemas = json.loads(tools) if isinstance(tools, str) else tools
        names = [(t.get("function") or t).get("name") for t in schemas or [] if isinstance(t, dict)] or None
        failed = failed_message_turns(messages, names)
        n += any(messages[i].get("train") is not False for i in failed)
    return n


def release_trained_failures(path: Any) -> int:
    """`trained_failures` over a committed release (`<out>/releases/<config>/<version>`), read
    batch by batch with its checksums checked."""
    from data.store import iter_batches

    return sum(trained_failures(batch.to_pylist()) for batch in iter_batches(path, verify=True))


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
