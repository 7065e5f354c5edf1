"""Released datasets into the shapes TRL's trainers read.

A release (`<out>/releases/<sft|sft_recovery|rl>/<version>/`) is verified through its
manifest (`data.store.read_manifest`: `_SUCCESS`, checksums) before its Parquet files are
loaded with `datasets`. An `sft_recovery` release (rows that recover from a failed call) has
the `sft` columns, and each message says whether its turn carries loss: `train: false` on a
failed assistant turn. `to_trl_sft` keeps that key on the messages it hands to TRL, whose
tokenizer passes it to the chat template (ours leaves such a turn out of its
`{% generation %}` blocks); `loss_marked_turns` counts the marked turns.

Since release schema version 2, `tools`, tool-call `arguments`, `task` and
`reference_solution` are JSON-typed (`data.schema`): `datasets` yields them as objects
(its `Json` feature), never as Arrow structs, so no field is merged across tools or rows
(no `"x": null` parameters or arguments) and templates that apply `| tojson` render each
object once. TRL 1.16's SFT tokenizer takes `tools` as a list (or a JSON string, which it
decodes). Version 1 releases stored them as JSON strings; `load_release` casts those
columns to `Json` so both read the same.

A `Dataset` cannot hold messages without their null fields (Arrow gives every struct every
field); transformers' `apply_chat_template` drops keys whose value is None, and our template
ignores them anyway. `clean_messages` / `decode_tools` give the plain OpenAI form for code
outside `datasets`.

`datasets` (and, for rendering, the tokenizer) are imported inside functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data import store
from data.schema import RL_SCHEMA, SFT_KINDS, SFT_SCHEMA, strip_message
from rollout.control_tokens import control_tokens, escape_messages

if TYPE_CHECKING:
    from datasets import Dataset

SFT_COLUMNS = ("messages", "tools")
RL_COLUMNS = ("prompt", "tools", "task", "task_id")
# What an rl row (schema version 2) says about its environment, passed on to `reset(**row)`.
ENV_COLUMNS = ("environment", "world_version", "verifier", "verifier_version")


def release_files(path: Path | str) -> tuple[store.Manifest, list[str]]:
    """The verified manifest of a release and the absolute paths of its Parquet files."""
    path = Path(path)
    manifest = store.read_manifest(path)  # raises DatasetError on missing/corrupted data
    return manifest, [str(path / f.path) for f in manifest.files]


def load_release(path: Path | str, split: str | None = None) -> Dataset:
    """Rows of a verified release as a `datasets.Dataset`, keeping only `split` when given
    (from the `split` column, so releases of every schema version read the same)."""
    from datasets import load_dataset

    manifest, files = release_files(path)
    ds = load_dataset("parquet", data_files=files, split="train")
    if manifest.schema_version < 2 and manifest.kind in ("sft", "rl"):  # JSON columns since version 2
        ds = _json_columns(ds, SFT_SCHEMA if manifest.kind == "sft" else RL_SCHEMA)
    if split is not None:
        if "split" not in ds.column_names:
            raise store.DatasetError(f"{path}: no `split` column to select {split!r} from")
        ds = ds.filter(lambda s: s == split, input_columns="split")
    return ds


def _json_columns(ds: Dataset, schema: Any) -> Dataset:
    """A version 1 release with its JSON-string columns cast to the `Json` features of the
    current schema (columns the old release lacks are left out)."""
    from datasets import Features

    target = Features.from_arrow_schema(schema)
    features = ds.features.copy()
    for name in ds.column_names:
        if name in target:
            features[name] = target[name]
    return ds.cast(features)


def decode_tools(tools: str | list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The tool schemas of a row as a list (a JSON string is decoded)."""
    if tools is None or tools == "":
        return []
    value = json.loads(tools) if isinstance(tools, str) else tools
    if not isinstance(value, list):
        raise ValueError(f"tools must be a JSON list, got {type(value).__name__}")
    return value


def clean_messages(messages: list[dict[str, Any]], decode_arguments: bool = False) -> list[dict[str, Any]]:
    """Plain OpenAI messages: null fields dropped; tool-call arguments decoded if asked."""
    out = []
    for m in messages:
        m = strip_message(dict(m))
        if decode_arguments and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c.get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.loads(fn["arguments"] or "{}")
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


def sft_example(row: dict[str, Any], decode_arguments: bool = False) -> dict[str, Any]:
    """One SFT row in plain Python form: `{"messages": [...clean...], "tools": [...]}`."""
    return {
        "messages": clean_messages(row["messages"], decode_arguments),
        "tools": decode_tools(row.get("tools")),
    }


def to_trl_sft(ds: Dataset, tokenizer: Any | None = None) -> Dataset:
    """An `sft` release as TRL's conversational language-modeling dataset.

    Keeps `messages` (Arrow structs; `arguments` JSON strings) and `tools` (a JSON string,
    validated here; SFTTrainer decodes it per example), drops the metadata columns, and
    refuses rows without an assistant turn. See the module docstring for why nothing is
    decoded into Arrow structs. Control tokens in the messages (`<|im_start|>` written by a
    model or echoed by a tool) are escaped (`rollout.control_tokens`), those of `tokenizer`
    and any `<|...|>`-shaped one, since TRL renders rows to text and tokenises them.
    """

    missing = [c for c in SFT_COLUMNS if c not in ds.column_names]
    if missing:
        raise ValueError(f"not an sft release: missing columns {missing}")
    ds = ds.select_columns(list(SFT_COLUMNS))  # messages keep their `train` marks (sft_recovery)
    for i, row in enumerate(ds):
        decode_tools(row["tools"])
        if not any(m["role"] == "assistant" for m in row["messages"]):
            raise ValueError(f"sft row {i} has no assistant message")
    tokens = control_tokens(tokenizer) if tokenizer is not None else []
    return ds.map(lambda messages: {"messages": escape_messages(messages, tokens)},
                  input_columns=["messages"], features=ds.features)


def loss_marked_turns(ds: Dataset) -> int:
    """Assistant turns of an sft dataset marked ``train: false`` (an `sft_recovery` release's
    failed turns, which must carry no loss); 0 when the messages have no `train` key."""
    if "train" not in _message_fields(ds):
        return 0
    return sum(m.get("role") == "assistant" and m.get("train") is False
               for messages in ds["messages"] for m in messages)


def _message_fields(ds: Dataset) -> set[str]:
    feature = ds.features.get("messages")
    inner = getattr(feature, "feature", None) or (feature[0] if isinstance(feature, list) and feature else None)
    return set(inner) if isinstance(inner, dict) else set()


def is_sft_kind(kind: str) -> bool:
    """Whether a release kind holds sft rows (`data.schema.SFT_KINDS`: `sft`, `sft_recovery`)."""
    return kind in SFT_KINDS


def render_prompt(tokenizer: Any, prompt: list[dict[str, Any]], tools: str | list | None) -> str:
    """The prompt as the model sees it: its chat template with the row's tools and a generation
    prompt (control tokens in the messages escaped: the text is tokenised again)."""
    return tokenizer.apply_chat_template(
        escape_messages(clean_messages(prompt), control_tokens(tokenizer)),
        tools=decode_tools(tools) or None,
        add_generation_prompt=True,
        tokenize=False,
    )


def to_trl_prompts(ds: Dataset, tokenizer: Any | None = None) -> Dataset:
    """An `rl` release as a GRPO prompt dataset: `prompt`, `tools`, `task`, `task_id`.

    TRL 1.16's GRPOTrainer renders conversational prompts with its own `tools=` (Python
    callables that it also executes), never with a per-row `tools` column. So with a
    `tokenizer`, each `prompt` is rendered here to text with the row's tool schemas and the
    generation prompt (GRPO then treats it as a plain-text prompt and returns text
    completions). Without one, `prompt` stays conversational and `tools` a JSON string.
    `task` (JSON of the `Task`) reaches reward functions as a keyword argument.
    """
    missing = [c for c in RL_COLUMNS if c not in ds.column_names]
    if missing:
        raise ValueError(f"not an rl release: missing columns {missing}")
    ds = ds.select_columns(list(RL_COLUMNS))
    if tokenizer is None:
        return ds

    from datasets import Value

    def render(prompt: list[dict[str, Any]], tools: str) -> dict[str, str]:
        return {"prompt": render_prompt(tokenizer, prompt, tools)}

    features = ds.features.copy()
    features["prompt"] = Value("string")
    return ds.map(render, input_columns=["prompt", "tools"], features=features)


def to_trl_env_prompts(ds: Dataset) -> Dataset:
    """An `rl` release as a multi-turn GRPO dataset for TRL's `environment_factory`.

    `prompt` stays conversational (system + opening user turn, only `role` and `content`),
    `environment` names the row's world (TRL picks that world's environment and renders its
    tools), and `task` / `task_id` (and, from schema version 2, the world and verifier
    versions and the verifier) stay for the environment's `reset(**row)`. The row's own
    `tools` column is dropped: TRL renders the tool schemas from the environment's methods.
    """
    missing = [c for c in RL_COLUMNS if c not in ds.column_names]
    if missing:
        raise ValueError(f"not an rl release: missing columns {missing}")
    from datasets import Features, Value

    def convert(prompt: list[dict[str, Any]], task: Any) -> dict[str, Any]:
        world = (json.loads(task) if isinstance(task, str) else task or {}).get("world")
        if not world:
            raise ValueError("an rl row's task has no world")
        return {"prompt": [{"role": m["role"], "content": m.get("content") or ""} for m in prompt],
                "environment": world}

    keep = ["prompt", "task", "task_id", *[c for c in ENV_COLUMNS if c in ds.column_names]]
    features = Features({"prompt": [{"role": Value("string"), "content": Value("string")}],
                         **{c: ds.features[c] for c in keep if c != "prompt"}, "environment": Value("string")})
    ds = ds.select_columns([c for c in keep if c != "environment"])
    return ds.map(convert, input_columns=["prompt", "task"], features=features)
