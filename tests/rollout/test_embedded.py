"""The embedded SmolLM2 backend: chat template, micro-batched chat (preparation:
test_prepare.py, the engine's batching and parsing: test_embedded_engine.py).

The slow tests use the model folder of the `model_dir` fixture (tests/rollout/conftest.py:
the GGUF converted once per session, ~20 s), then generate at most 32 tokens per request.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from data.records import Sampling
from rollout.model import ChatModel, ChatResponse, ModelError
from tests.paths import ROOT

ROOT = ROOT

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_order",
            "description": "Look up an order by its id",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_order",
            "description": "Cancel an order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
]

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You help customers with their orders."},
    {"role": "user", "content": "Where are orders A1 and B2?"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "get_order", "arguments": '{"order_id": "A1"}'},
            },
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_order", "arguments": {"order_id": "B2"}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": '{"status": "shipped"}'},
    {"role": "tool", "tool_call_id": "call_1", "content": "no such order"},
    {"role": "assistant", "content": "A1 has shipped; B2 does not exist."},
    {"role": "user", "content": "Thanks!"},
]


def test_module_imports_without_torch() -> None:
    code = "import sys, rollout.embedded; sys.exit('torch' in sys.modules or 'transformers' in sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.slow
def test_template_round_trip_and_assistant_mask(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    text = tok.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    calls = (
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>\n'
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "B2"}}</tool_call>'
    )
    assert text.startswith("<|im_start|>system\nYou help customers with their orders.\n\n# Tools")
    assert '"name": "cancel_order"' in text and text.count("<tool_call>{") == 4  # 2 examples
    assert f"<|im_start|>assistant\nLet me look.\n{calls}<|im_end|>\n" in text
    assert (
        "<|im_start|>user\n<tool_response>\n"
        '{"status": "shipped"}\n</tool_response>\n<tool_response>\nno such order\n'
        "</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>user\nThanks!<|im_end|>\n")
    prompt = tok.apply_chat_template(
        CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert prompt == text + "<|im_start|>assistant\n"

    # Earlier turns render the same whatever follows (needed by TRL's multi-turn tools),
    # except inside a run of tool messages, which share one user turn.
    for k in range(1, len(CONVERSATION)):
        if CONVERSATION[k - 1]["role"] == CONVERSATION[k]["role"] == "tool":
            continue
        head = tok.apply_chat_template(CONVERSATION[:k], tools=TOOLS, tokenize=False)
        assert text.startswith(head), k

    out = tok.apply_chat_template(
        CONVERSATION, tools=TOOLS, return_assistant_tokens_mask=True, return_dict=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask) and sum(mask) > 0
    learned = tok.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert learned == (
        f"Let me look.\n{calls}<|im_end|>A1 has shipped; B2 does not exist.<|im_end|>"
    )

    # The response template (for `transformers serve` and TRL) reads the calls back.
    turn = f"Let me look.\n{calls}<|im_end|>"
    parsed = tok.parse_response(turn, prefix="<|im_start|>assistant\n")
    assert parsed["content"] == "Let me look."
    assert [c["function"] for c in parsed["tool_calls"]] == [
        {"name": "get_order", "arguments": {"order_id": "A1"}},
        {"name": "get_order", "arguments": {"order_id": "B2"}},
    ]


@pytest.mark.slow
async def test_concurrent_chats_are_micro_batched(model_dir: Path) -> None:
    from rollout.embedded import EmbeddedModel

    model = EmbeddedModel(model_dir)
    assert isinstance(model, ChatModel) and model.name == "embedded:SmolLM2-135M-Instruct"
    questions = ["Where is order A17?", "Cancel order B22.", "Status of C3?", "Cancel Z9."]
    samplings = [
        Sampling(temperature=0, max_tokens=32),
        Sampling(temperature=0.7, max_tokens=32, seed=1),
        Sampling(temperature=1.0, top_p=0.9, max_tokens=32),
        Sampling(temperature=0, max_tokens=32),
    ]
    try:
        responses = await asyncio.wait_for(
            asyncio.gather(
                *(
                    model.chat([{"role": "user", "content": q}], TOOLS, s)
                    for q, s in zip(questions, samplings, strict=True)
                )
            ),
            timeout=600,
        )
        calls_for_four = model.generate_calls
        # A conversation with earlier tool calls and results (JSON-string arguments) works too.
        follow_up = await asyncio.wait_for(
            model.chat(CONVERSATION, TOOLS, Sampling(temperature=0, max_tokens=16)), timeout=300
        )
    finally:
        await model.aclose()
    for r in [*responses, follow_up]:
        assert isinstance(r, ChatResponse)
        assert r.text or r.tool_calls or r.malformed
        assert r.prompt_tokens > 100  # the tool schemas are in the prompt
        assert 0 < r.completion_tokens <= 32
        assert r.finish_reason in {"stop", "length", "tool_calls"}
        assert r.raw["completion"]
    assert model.requests_served == 5
    assert calls_for_four < 4, model.batch_sizes
    assert max(model.batch_sizes) > 1


@pytest.mark.slow
async def test_seeded_sampling_repeats(model_dir: Path) -> None:
    from rollout.embedded import EmbeddedModel

    # A seed repeats a sample only for the same compute: bf16 logits move with the prefill
    # split (the second call would prefill after the first call's cached turn) and with
    # the CPU kernels' first-call choices, enough to change a temperature-1 sample.
    model = EmbeddedModel(model_dir, dtype="float32", kv_reuse="none")
    messages = [{"role": "user", "content": "Tell me a fun fact."}]
    sampling = Sampling(temperature=1.0, max_tokens=16, seed=7)
    try:
        a = await asyncio.wait_for(model.chat(messages, [], sampling), timeout=300)
        b = await asyncio.wait_for(model.chat(messages, [], sampling), timeout=300)
    finally:
        await model.aclose()
    assert a.raw["completion"] == b.raw["completion"]


@pytest.mark.slow
async def test_failures_become_model_errors(model_dir: Path, tmp_path: Path) -> None:
    from rollout.embedded import EmbeddedModel

    missing = EmbeddedModel(tmp_path / "no-model-here")
    with pytest.raises(ModelError, match="could not load"):
        await asyncio.wait_for(
            missing.chat([{"role": "user", "content": "hi"}], [], Sampling()), timeout=120
        )
    await missing.aclose()

    model = EmbeddedModel(model_dir)
    try:
        with pytest.raises(ModelError, match="exceeds"):
            await asyncio.wait_for(
                model.chat([{"role": "user", "content": "hi"}], [], Sampling(max_tokens=9000)),
                timeout=120,
            )
        # Closing while a request runs fails it instead of leaving the caller waiting.
        pending = asyncio.ensure_future(
            model.chat(
                [{"role": "user", "content": "Write a long story."}], [], Sampling(max_tokens=400)
            )
        )
        await asyncio.sleep(1.0)
        await asyncio.wait_for(model.aclose(), timeout=60)
        with pytest.raises(ModelError, match="closed"):
            await asyncio.wait_for(pending, timeout=60)
        # The model restarts on the next call.
        again = await asyncio.wait_for(
            model.chat(
                [{"role": "user", "content": "hi"}], [], Sampling(temperature=0, max_tokens=4)
            ),
            timeout=120,
        )
        assert again.completion_tokens > 0
    finally:
        await model.aclose()
