"""Action-match reward from an `rl` release's columns alone: no trajforge, no world runtime.

Every `rl` release card carries this file's code below its first line (plain Python, standard
library only), for users who train on a release without trajforge installed. Without the
world a completion cannot be executed, so this is the only reward a row supports on its
own: it compares the completion's tool calls with the reference solution's state-changing
calls (τ²-bench's ACTION basis, methods.md §6), which is weaker than the verifier's check
of the final state (`train.environments.verifier_reward`): a different but valid path to
the same state scores less, and arguments compare exactly (no coercion of `"2"` to `2`).
"""
# --- card: portable reward ---
import json
import re
from typing import Any

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def completion_calls(completion: Any) -> list[tuple[str, str]]:
    """(name, canonical JSON arguments) of each well-formed tool call of a completion: model
    text with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, or a list of
    messages (TRL's conversational completions) whose assistant turns carry `tool_calls` or
    such blocks. Malformed calls are skipped (they match nothing)."""
    texts: list[str] = []
    raw: list[tuple[Any, Any]] = []
    if isinstance(completion, str):
        texts.append(completion)
    else:
        for message in completion:
            if message.get("role", "assistant") != "assistant":
                continue
            if isinstance(message.get("content"), str):
                texts.append(message["content"])
            for call in message.get("tool_calls") or []:
                function = call.get("function", call)
                raw.append((function.get("name"), function.get("arguments")))
    for text in texts:
        for body in _TOOL_CALL.findall(text):
            try:
                value = json.loads(body)
            except ValueError:
                continue
            if isinstance(value, dict):
                raw.append((value.get("name"), value.get("arguments", value.get("parameters"))))
    calls = []
    for name, arguments in raw:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                continue
        if isinstance(name, str) and isinstance(arguments, dict):
            calls.append((name, json.dumps(arguments, sort_keys=True)))
    return calls


def action_match_reward(completions: list[Any], reference_solution: list[list[dict[str, Any]]],
                        write_tools: list[list[str]], **kwargs: Any) -> list[float]:
    """One reward per completion, from the row's `reference_solution` and `write_tools` columns:
    gold writes matched / (gold writes + the completion's other calls to write tools).

    A gold write is a reference call with `"write": true`; each completion call matches at most
    one. Reads are free (any lookup path is fine). 1.0 when the task needs no write and the
    completion makes none (a refusal task refused); 0.0 when it needs none and it writes.
    """
    rewards: list[float] = []
    for completion, reference, writes in zip(completions, reference_solution, write_tools, strict=True):
        gold = [(c["name"], json.dumps(c["arguments"], sort_keys=True)) for c in reference if c["write"]]
        made = [c for c in completion_calls(completion) if c[0] in set(writes)]
        matched = 0
        for call in gold:
            if call in made:
                made.remove(call)
                matched += 1
        total = len(gold) + len(made)
        rewards.append(matched / total if total else 1.0)
    return rewards


def card_code() -> str:
    """This file's code from its card marker on: what a release card shows."""
    from pathlib import Path

    text = Path(__file__).read_text(encoding="utf-8")
    body = text.split("# --- card: portable reward ---\n", 1)[1]
    return body.split("\n\ndef card_code", 1)[0].rstrip() + "\n"
