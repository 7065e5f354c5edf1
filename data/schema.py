"""Explicit Arrow schemas for every record kind and released dataset, and the row codecs.

Nested values whose shape varies per row (tool schemas, tool-call arguments, metadata)
must never become Arrow structs: their schemas would be merged across rows and `"a": null`
fields would leak into prompts. Record datasets store them as JSON strings. Released
datasets (`SFT_SCHEMA`, `RL_SCHEMA`, release schema version 2) store them as Arrow's
canonical JSON extension type (`arrow.json`, `pa.json_()`; Parquet's JSON logical type):
the bytes are the same JSON text, pyarrow still reads it as `str` and DuckDB as `JSON`,
and `datasets` decodes it into objects (its `Json` feature), so a chat template that
applies `| tojson` to `arguments` renders the object once, with only its own keys.
Messages are real Arrow structs so that TRL and DuckDB can read them directly.

pyarrow cannot build an extension-typed column from Python objects: build tables with
`table_from_rows` (and empty ones with `empty_table`), which go through the storage type.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from data.records import (
    Step,
    Task,
    ToolCall,
    Trajectory,
    Verdict,
    canonical_json,
)

JSON = pa.json_()  # Arrow's canonical JSON extension type (storage: utf8)


def _messages_type(arguments: pa.DataType, train: bool = False) -> pa.ListType:
    """A list of OpenAI-format messages whose tool calls hold their `arguments` as `arguments`
    (with `train`: a per-message loss mark, `train: false` on an assistant turn not to learn)."""
    function = pa.struct([("name", pa.string()), ("arguments", arguments)])
    tool_call = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", function)])
    return pa.list_(pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.list_(tool_call)),
            ("tool_call_id", pa.string()),
            ("name", pa.string()),
            *([("train", pa.bool_())] if train else []),
        ]
    ))


MESSAGES_TYPE = _messages_type(pa.string())
MESSAGE_TYPE = MESSAGES_TYPE.value_type
# Released rows: the same message shape with tool-call `arguments` as JSON (see above).
RELEASE_MESSAGES_TYPE = _messages_type(JSON)
RELEASE_MESSAGE_TYPE = RELEASE_MESSAGES_TYPE.value_type
# The `sft_recovery` config's messages: each also says whether its turn carries loss
# (`train: false` on a failed assistant turn; null on the others).
RELEASE_MARKED_MESSAGES_TYPE = _messages_type(JSON, train=True)

TASK_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("id", pa.string()),
        ("world", pa.string()),
        ("method", pa.string()),
        ("split", pa.string()),
        ("instruction", pa.string()),
        ("user", pa.string()),  # JSON
        ("initial_state", pa.string()),  # JSON
        ("target_state_hash", pa.string()),
        ("target_diff", pa.string()),  # JSON
        ("reference_solution", pa.string()),  # JSON
        ("difficulty", pa.float64()),
        ("metadata", pa.string()),  # JSON
        ("verification", pa.string()),  # JSON; since schema version 2 (before: metadata keys)
        ("dialogue", pa.string()),  # JSON; since schema version 2
    ]
)

STEP_TYPE = pa.struct(
    [
        ("index", pa.int32()),
        ("turn", pa.int32()),
        ("action_name", pa.string()),
        ("action_arguments", pa.string()),  # JSON
        ("observation", pa.string()),
        ("error", pa.string()),
        ("error_detail", pa.string()),
        ("state_hash", pa.string()),
        ("latency_s", pa.float64()),
    ]
)
SAMPLING_TYPE = pa.struct(
    [
        ("temperature", pa.float64()),
        ("top_p", pa.float64()),
        ("max_tokens", pa.int32()),
        ("seed", pa.int64()),
    ]
)
USAGE_TYPE = pa.struct(
    [("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("model_calls", pa.int64())]
)

TURN_TOKENS_TYPE = pa.struct(
    [
        ("turn", pa.int32()),
        ("message_index", pa.int32()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("completion_token_ids", pa.list_(pa.int32())),
        ("completion_logprobs", pa.list_(pa.float64())),
        ("prompt_logprobs", pa.list_(pa.float64())),
        ("finish_reason", pa.string()),
    ]
)

# Version 1 had no `turn_tokens` column; its files are still read (as no token records).
TRAJECTORY_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("id", pa.string()),
        ("task_id", pa.string()),
        ("trial", pa.int32()),
        ("model", pa.string()),
        ("sampling", SAMPLING_TYPE),
        ("messages", MESSAGES_TYPE),
        ("tools", pa.string()),  # JSON
        ("steps", pa.list_(STEP_TYPE)),
        ("usage", USAGE_TYPE),
        ("termination", pa.string()),
        ("error_counts", pa.string()),  # JSON
        ("final_state_hash", pa.string()),
        ("metadata", pa.string()),  # JSON
        ("turn_tokens", pa.list_(TURN_TOKENS_TYPE)),  # since schema version 2
        ("reference", pa.bool_()),  # since schema version 3 (before: metadata["reference"])
    ]
)

VERDICT_SCHEMA = pa.schema(
    [
        ("schema_version", pa.int32()),
        ("trajectory_id", pa.string()),
        ("task_id", pa.string()),
        ("verifier", pa.string()),
        ("verifier_version", pa.string()),
        ("passed", pa.bool_()),
        ("score", pa.float64()),
        ("reasons", pa.list_(pa.string())),
        ("details", pa.string()),  # JSON
    ]
)

# Released datasets. `sft` is TRL's conversational format; `rl` is a prompt-only dataset
# carrying everything a reward function needs to rebuild and verify the world.
# Version 1 (before JSON columns, split files and the environment columns) is still read:
# its `tools`, `arguments` and `task` are JSON strings (see `train.data.load_release`).
# Version 3 adds the sft rows' `reference`, `recovery` and `selection_reason` columns.
RELEASE_SCHEMA_VERSION = 3
SFT_SCHEMA = pa.schema(
    [
        ("messages", RELEASE_MESSAGES_TYPE),
        ("tools", JSON),  # list of OpenAI function schemas
        ("task_id", pa.string()),
        ("trajectory_id", pa.string()),
        ("world", pa.string()),
        ("method", pa.string()),
        ("model", pa.string()),
        ("trial", pa.int32()),
        ("score", pa.float64()),
        ("split", pa.string()),
        # Since version 3: the task's reference dialogue (True) or a policy rollout; a row
        # that holds a failed call (a tool error or a malformed call) the agent recovered
        # from; why curation kept the row.
        ("reference", pa.bool_()),
        ("recovery", pa.bool_()),
        ("selection_reason", pa.string()),
    ]
)
# The `sft_recovery` config: rows that recover from a failed call, the `sft` columns with
# each failed assistant turn marked `train: false` (chat templates leave it out of the loss).
SFT_RECOVERY_SCHEMA = pa.schema([("messages", RELEASE_MARKED_MESSAGES_TYPE), *list(SFT_SCHEMA)[1:]])
# The release configs of sft rows: the default (no failed assistant turn) and the recoveries.
SFT_KINDS = ("sft", "sft_recovery")
RL_SCHEMA = pa.schema(
    [
        ("prompt", RELEASE_MESSAGES_TYPE),
        ("tools", JSON),
        ("task_id", pa.string()),
        ("world", pa.string()),
        ("method", pa.string()),
        ("task", JSON),  # the full Task record (for reward functions and environments)
        ("pass_rate", pa.float64()),
        ("n_trials", pa.int32()),
        ("selection_reason", pa.string()),
        ("split", pa.string()),
        # Since version 2: what a trainer needs to run and judge the row without trajforge's
        # internals. `environment` is the key of TRL's `environment_factory` dict (the world);
        # the versions name the world (tools, policy, schema) and the verifier the task is
        # judged by; `reference_solution` backs the portable
        # action-match reward, with `write_tools`, the world's tools that change its state.
        ("environment", pa.string()),
        ("world_version", pa.string()),
        ("verifier", pa.string()),
        ("verifier_version", pa.string()),
        ("reference_solution", JSON),  # [{"name", "arguments", "write"}]
        ("write_tools", pa.list_(pa.string())),
    ]
)


def storage_type(t: pa.DataType) -> pa.DataType:
    """`t` with every extension type replaced by its storage type (nested ones too)."""
    if isinstance(t, pa.BaseExtensionType):
        return storage_type(t.storage_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        field = t.value_field
        inner = pa.field(field.name, storage_type(field.type), field.nullable)
        return pa.large_list(inner) if pa.types.is_large_list(t) else pa.list_(inner)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, storage_type(f.type), f.nullable) for f in t])
    return t


def storage_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, storage_type(f.type), f.nullable) for f in schema], metadata=schema.metadata)


def table_from_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """An Arrow table of `schema` from plain rows (JSON-typed values given as JSON text)."""
    return pa.Table.from_pylist(rows, schema=storage_schema(schema)).cast(schema)


def empty_table(schema: pa.Schema) -> pa.Table:
    return storage_schema(schema).empty_table().cast(schema)


def _decode(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if isinstance(t, pa.JsonType):
        return json.loads(value) if isinstance(value, str) else value
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_decode(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: _decode(value.get(f.name), f.type) for f in t}
    return value


def decode_row(row: dict[str, Any], schema: pa.Schema) -> dict[str, Any]:
    """A row as pyarrow gives it (`to_pylist`: JSON-typed values as text) with those values
    decoded, as `datasets` yields it. Columns `schema` does not name are left as they are."""
    return {k: _decode(v, schema.field(k).type) if k in schema.names else v for k, v in row.items()}


def _dumps(value: Any) -> str:
    return canonical_json(value)


def normalize_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-format message in the exact shape of MESSAGE_TYPE (arguments as JSON)."""
    calls = None
    if message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            fn = call.get("function", {})
            args = fn.get("arguments", "{}")
            calls.append(
                {
                    "id": call.get("id"),
                    "type": call.get("type", "function"),
                    "function": {
                        "name": fn.get("name"),
                        "arguments": args if isinstance(args, str) else _dumps(args),
                    },
                }
            )
    return {
        "role": message["role"],
        "content": message.get("content"),
        "tool_calls": calls,
        "tool_call_id": message.get("tool_call_id"),
        "name": message.get("name"),
    }


def release_message(message: dict[str, Any]) -> dict[str, Any]:
    """`normalize_message` for released rows, whose `arguments` column is JSON-typed: arguments
    that are not valid JSON text (a model's malformed call, kept as it was written) are stored
    as a JSON string of that text, so every reader can decode every row."""
    out = normalize_message(message)
    for call in out["tool_calls"] or []:
        args = call["function"]["arguments"]
        try:
            json.loads(args)
        except (TypeError, ValueError):
            call["function"]["arguments"] = json.dumps("" if args is None else str(args), ensure_ascii=False)
    return out


def strip_message(message: dict[str, Any]) -> dict[str, Any]:
    """Drop the null fields Arrow adds back, giving a plain OpenAI-format message."""
    out = {k: v for k, v in message.items() if v is not None}
    if "tool_calls" in out:
        out["tool_calls"] = [{k: v for k, v in c.items() if v is not None} for c in out["tool_calls"]]
    return out


TASK_JSON_COLUMNS = ("user", "initial_state", "target_diff", "reference_solution", "metadata", "verification",
                     "dialogue")


def task_to_row(task: Task) -> dict[str, Any]:
    d = task.model_dump()
    for key in TASK_JSON_COLUMNS:
        d[key] = _dumps(d[key])
    return d


def task_from_row(row: dict[str, Any]) -> Task:
    """A task from its row; version 1 rows (no `verification` column) are upgraded."""
    d = dict(row)
    for key in TASK_JSON_COLUMNS:
        if d.get(key) is not None:
            d[key] = json.loads(d[key])
        else:
            d.pop(key, None)
    return Task.model_validate(d)


def trajectory_to_row(t: Trajectory) -> dict[str, Any]:
    d = t.model_dump()
    d["messages"] = [normalize_message(m) for m in t.messages]
    # in the world's order (not canonical): the order a chat template renders them in
    d["tools"] = json.dumps(t.tools, ensure_ascii=False)
    d["steps"] = [
        {
            "index": s.index,
            "turn": s.turn,
            "action_name": s.action.name if s.action else None,
            "action_arguments": _dumps(s.action.arguments) if s.action else None,
            "observation": s.observation,
            "error": s.error,
            "error_detail": s.error_detail,
            "state_hash": s.state_hash,
            "latency_s": s.latency_s,
        }
        for s in t.steps
    ]
    d["error_counts"] = _dumps(t.error_counts)
    d["metadata"] = _dumps(t.metadata)
    return d


def trajectory_from_row(row: dict[str, Any]) -> Trajectory:
    d = dict(row)  # older versions are upgraded by `Trajectory` itself
    if d.get("reference") is None:
        d.pop("reference", None)
    d["messages"] = [strip_message(m) for m in d["messages"]]
    d["tools"] = json.loads(d["tools"])
    steps = []
    for s in d["steps"]:
        action = None
        if s["action_name"] is not None:
            action = ToolCall(name=s["action_name"], arguments=json.loads(s["action_arguments"]))
        steps.append(
            Step(
                index=s["index"],
                turn=s["turn"],
                action=action,
                observation=s["observation"] or "",
                error=s["error"],
                error_detail=s["error_detail"],
                state_hash=s["state_hash"],
                latency_s=s["latency_s"],
            )
        )
    d["steps"] = steps
    d["error_counts"] = json.loads(d["error_counts"])
    d["metadata"] = json.loads(d["metadata"])
    return Trajectory.model_validate(d)


def verdict_to_row(v: Verdict) -> dict[str, Any]:
    d = v.model_dump()
    d["details"] = _dumps(d["details"])
    return d


def verdict_from_row(row: dict[str, Any]) -> Verdict:
    d = dict(row)
    d["details"] = json.loads(d["details"])
    return Verdict.model_validate(d)


# Record kinds the store knows: name -> (Arrow schema, to_row, from_row).
CODECS: dict[str, tuple[pa.Schema, Any, Any]] = {
    "tasks": (TASK_SCHEMA, task_to_row, task_from_row),
    "trajectories": (TRAJECTORY_SCHEMA, trajectory_to_row, trajectory_from_row),
    "verdicts": (VERDICT_SCHEMA, verdict_to_row, verdict_from_row),
}
