"""Rows of the released datasets, built from curated records (pure functions, no I/O).

`sft` rows are TRL's conversational format (`messages` + `tools`) with metadata columns;
`rl` rows hold the `prompt` (system + opening user turn), `tools`, and the full task as
JSON so a reward function can rebuild the world and verify a completion.
"""

from __future__ import annotations

import json
from typing import Any

from curation.base import Selection
from data.records import canonical_json
from data.schema import normalize_message


def sft_rows(selection: Selection, split_of: dict[str, str], method_of: dict[str, str], world_of: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for traj, verdict in selection.sft:
        rows.append({
            "messages": [normalize_message(m) for m in traj.messages],
            "tools": json.dumps(traj.tools, ensure_ascii=False),
            "task_id": traj.task_id,
            "trajectory_id": traj.id,
            "world": world_of.get(traj.task_id, ""),
            "method": method_of.get(traj.task_id, ""),
            "model": traj.model,
            "trial": traj.trial,
            "score": verdict.score,
            "split": split_of.get(traj.task_id, "train"),
        })
    return rows


def rl_rows(selection: Selection, prompts: dict[str, list[dict[str, Any]]], tools: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for pick in selection.rl:
        task = pick.task
        rows.append({
            "prompt": [normalize_message(m) for m in prompts[task.id]],
            "tools": json.dumps(tools[task.id], ensure_ascii=False),
            "task_id": task.id,
            "world": task.world,
            "method": task.method,
            "task": canonical_json(task.model_dump()),
            "pass_rate": pick.pass_rate,
            "n_trials": pick.n_trials,
            "selection_reason": pick.reason,
            "split": task.split,
        })
    return rows
