"""`rollout.embedded_engine`: the engine behind `EmbeddedModel` without its weights: prompts
that cannot run get their error, completions are parsed (a call cut at max_tokens is
`truncated`), per-row sampling, and futures settled from the worker thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from data.records import Sampling
from rollout.embedded_engine import _Engine, _Request, row_sampler
from rollout.model import ChatResponse, ModelError


def _engine(render: Any, max_positions: int = 99) -> _Engine:
    engine = object.__new__(_Engine)  # no weights: only what the tested paths use
    engine.render = render  # type: ignore[method-assign]
    engine.max_positions = max_positions
    engine.kv_reuse = "none"
    return engine


@pytest.mark.parametrize(("ends", "error"), [(False, "truncated"), (True, "bad_json")])
def test_embedded_call_cut_at_max_tokens_is_truncated(ends: bool, error: str) -> None:
    import torch

    cut = '<tool_call>{"name": "get_user_details", "arguments": {"user_id": "ivan_sm'

    class Tok:
        def decode(self, tokens: list[int], skip_special_tokens: bool = True) -> str:
            return cut

    class Model:
        def generate(self, input_ids: Any, **kwargs: Any) -> Any:
            new = [9, 9, 0] if ends else [9, 9, 9]  # 0 is the end-of-sequence token
            return torch.cat([input_ids, torch.tensor([new] * input_ids.shape[0])], dim=1)

    engine = object.__new__(_Engine)
    engine.tokenizer, engine.model, engine.eos_ids, engine.pad_id, engine.max_positions = Tok(), Model(), [0], 0, 99
    engine.kv_reuse = "none"  # the plain `generate` path (the fake model has no forward)
    engine.render = lambda request: [5, 6, 7]  # type: ignore[method-assign]
    loop = asyncio.new_event_loop()
    try:
        request = _Request([], [], Sampling(max_tokens=3), loop.create_future(), loop)
        (resp,) = engine.generate([request], threading.Event())
    finally:
        loop.close()
    assert isinstance(resp, ChatResponse) and resp.finish_reason == ("stop" if ends else "length")
    assert [m.error for m in resp.malformed] == [error] and resp.tool_calls == []


def test_requests_that_cannot_run_get_their_error_without_generating() -> None:
    def render(request: _Request) -> list[int]:
        if request.messages == ["boom"]:
            raise KeyError("no template")
        return [1] * 90

    engine = _engine(render)
    loop = asyncio.new_event_loop()
    try:
        bad = _Request(["boom"], [], Sampling(max_tokens=5), loop.create_future(), loop)  # type: ignore[list-item]
        long = _Request([], [], Sampling(max_tokens=10), loop.create_future(), loop)
        results = engine.generate([bad, long], threading.Event())
    finally:
        loop.close()
    assert all(isinstance(r, ModelError) for r in results) and engine.last_generate_calls == 0
    assert "could not render the prompt: KeyError" in str(results[0])
    assert "prompt of 90 tokens plus max_tokens=10 exceeds the model's 99 positions" in str(results[1])
    assert [r.reason for r in results] == ["backend", "context_length"]  # type: ignore[union-attr]


def test_settle_resolves_the_callers_future_from_another_thread() -> None:
    async def main() -> tuple[ChatResponse, BaseException | None]:
        loop = asyncio.get_running_loop()
        ok = _Request([], [], Sampling(), loop.create_future(), loop)
        failed = _Request([], [], Sampling(), loop.create_future(), loop)
        worker = threading.Thread(target=lambda: (ok.settle(ChatResponse(text="hi")),
                                                  failed.settle(error=ModelError("x")),
                                                  ok.settle(ChatResponse(text="late"))))
        worker.start()
        worker.join()
        first = await ok.future
        try:
            await failed.future
        except ModelError as e:
            return first, e
        return first, None

    resp, error = asyncio.run(main())
    assert resp.text == "hi" and isinstance(error, ModelError)  # the first result wins
    loop = asyncio.new_event_loop()
    gone = _Request([], [], Sampling(), loop.create_future(), loop)
    loop.close()
    gone.settle(ChatResponse())  # the caller's loop is closed: ignored, no error


def test_row_sampler_greedy_and_seeded_rows() -> None:
    torch = pytest.importorskip("torch")
    scores = torch.tensor([[0.0, 3.0, 1.0, 2.9]] * 3)
    rows = [Sampling(temperature=0.0), Sampling(temperature=5.0, seed=7), Sampling(temperature=5.0, seed=7)]
    picks = [row_sampler(rows).choose(scores, [0, 1, 2]).tolist() for _ in range(2)]
    assert picks[0] == picks[1] and picks[0][0] == 1  # greedy takes the argmax; seeded rows repeat
    assert picks[0][1] == picks[0][2]  # same seed, same draw
    narrow = row_sampler([Sampling(temperature=5.0, top_p=0.01, seed=s) for s in range(8)])
    assert narrow.choose(scores[:1].repeat(8, 1), list(range(8))).tolist() == [1] * 8  # top_p keeps the best only
    masked = row_sampler([Sampling(temperature=0.0)])(None, scores[:1])
    assert masked[0, 1] == 0 and torch.isinf(masked[0, [0, 2, 3]]).all()
