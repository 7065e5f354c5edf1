"""Next-action accuracy, teacher-forced (`train.next_action`): turn spans, and what counts as
right, with stand-in models whose greedy pick is known at every position."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from data import store
from train.next_action import Dialogue, Scorer, assistant_spans, reference_calls, summarize


def test_assistant_spans_are_the_runs_of_ones() -> None:
    assert assistant_spans([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]
    assert assistant_spans([]) == [] and assistant_spans([0, 0]) == []


def test_reference_calls_compare_arguments_as_json_values() -> None:
    a = {"tool_calls": [{"function": {"name": "f", "arguments": '{"b": 2, "a": 1}'}}]}
    b = {"tool_calls": [{"function": {"name": "f", "arguments": {"a": 1, "b": 2}}}]}
    assert reference_calls(a) == reference_calls(b) and reference_calls({"content": "hi"}) == []


class _Out:
    def __init__(self, logits: Any) -> None:
        self.logits, self.cache = logits, None


class PickModel:
    """Greedy pick at position t is `picks(ids)[t + 1]`: a model whose choices are scripted."""

    def __init__(self, vocab: int, target: Any) -> None:
        self.vocab, self.target = vocab, target

    def __call__(self, input_ids: Any, use_cache: bool = True, logits_to_keep: Any = None) -> _Out:
        import torch

        ids = input_ids[0].tolist()
        want = self.target(ids)
        logits = torch.zeros(1, len(logits_to_keep), self.vocab)
        for row, t in enumerate(logits_to_keep.tolist()):
            logits[0, row, want[t + 1]] = 1.0
        return _Out(logits)


@pytest.fixture(scope="module")
def dialogue(releases: dict[str, Path]) -> Dialogue:
    from train.value import heldout_dialogues

    ids = [r["task_id"] for r in store.read_table(releases["sft"]).to_pylist() if r["split"] == "train"]
    return next(d for d in heldout_dialogues(releases["sft"], ids, split="train") if any(
        not m.get("content") and len(m["tool_calls"][0]["function"]["arguments"]) >= 2
        for m in d.messages if m["role"] == "assistant" and m.get("tool_calls")))


def scorer_with(model: Any) -> Scorer:
    from rollout.prepare import chat_template
    from train.release_card import embedded_tokenizer

    scorer = Scorer.__new__(Scorer)
    scorer.tokenizer, scorer.template, scorer.model = embedded_tokenizer(), chat_template(), model
    scorer.max_new_tokens, scorer.name = 64, "stand-in"
    scorer.call_open = scorer.tokenizer.encode("<tool_call>", add_special_tokens=False)
    scorer._heads, scorer.forwarded = [], 0
    import torch

    scorer._torch = torch
    return scorer


def test_a_model_that_picks_the_reference_is_right_and_exact_everywhere(dialogue: Dialogue) -> None:
    scorer = scorer_with(PickModel(len(scorer_with(None).tokenizer), lambda ids: ids))
    results = scorer.score(dialogue)
    assistant = [m for m in dialogue.messages if m["role"] == "assistant"]
    assert len(results) == len(assistant) and all(r.right and r.exact for r in results)
    assert [r.kind for r in results] == ["call" if m.get("tool_calls") else "reply" for m in assistant]
    assert summarize(results)["accuracy"] == 1.0


def test_a_model_that_never_calls_gets_replies_right_and_calls_wrong(dialogue: Dialogue) -> None:
    tok = scorer_with(None).tokenizer
    word = tok.encode("Sure", add_special_tokens=False)[0]
    scorer = scorer_with(PickModel(len(tok), lambda ids: [word] * len(ids)))
    figures = summarize(scorer.score(dialogue))
    assert figures["call_accuracy"] == 0.0 and figures["reply_accuracy"] == 1.0 and figures["exact"] == 0.0


def test_arguments_in_another_order_still_count_and_a_wrong_value_does_not(dialogue: Dialogue) -> None:
    tok = scorer_with(None).tokenizer
    assistant = [m for m in dialogue.messages if m["role"] == "assistant"]
    index = next(i for i, m in enumerate(assistant) if m.get("tool_calls") and not m.get("content")
                 and len(m["tool_calls"][0]["function"]["arguments"]) >= 2)
    args = (fn := assistant[index]["tool_calls"][0]["function"])["arguments"]
    reordered = dict(reversed(list(args.items())))
    wrong = {**reordered, next(iter(reordered)): "something-else"}
    for variant, expect in ((reordered, True), (wrong, False)):
        scorer = scorer_with(PickModel(len(tok), lambda ids: ids))
        ids, mask = scorer._encode(dialogue)
        s, e = assistant_spans(mask)[index]
        turn = tok.encode(f'<tool_call>{{"name": "{fn["name"]}", "arguments": {json.dumps(variant)}}}</tool_call>'
                          "<|im_end|>", add_special_tokens=False)
        same = next(k for k in range(len(turn)) if turn[k] != ids[s + k])  # the greedy turn leaves the reference
        assert '"arguments"' in tok.decode(ids[s:s + same])
        miss, alt = s + same, turn[same:]
        scorer.model = PickModel(len(tok), lambda ids, miss=miss, alt=alt: [*ids[:miss], alt[0], *ids[miss + 1:]])
        scorer._generate = lambda prefix, cache, n, alt=alt: alt[1:]  # the greedy rest of the turn
        result = scorer.score(dialogue)[index]
        assert result.kind == "call" and result.right is expect and not result.exact


def test_the_greedy_rest_from_the_dialogues_cache_equals_a_fresh_generation(tiny_model: Path) -> None:
    import torch

    scorer = Scorer(str(tiny_model), max_new_tokens=8)
    ids = scorer.tokenizer.encode("Hello there, how can I help you today?", add_special_tokens=False)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cache = scorer.model(torch.tensor([ids]), use_cache=True).cache
    prefix = ids[:6]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        fresh = scorer.model.generate(torch.tensor([prefix]), attention_mask=torch.ones(1, 6, dtype=torch.long),
                                      max_new_tokens=8, do_sample=False, pad_token_id=scorer.tokenizer.pad_token_id)
    assert scorer._generate(prefix, cache, 8) == fresh[0, 6:].tolist()
    assert cache.get_seq_length() == len(ids)  # the dialogue's cache is left whole for the next turn


def test_a_later_dialogue_reuses_its_worlds_head_and_picks_as_a_fresh_forward(
        releases: dict[str, Path], tiny_model: Path) -> None:
    from train.value import heldout_dialogues

    ids = [r["task_id"] for r in store.read_table(releases["sft"]).to_pylist() if r["split"] == "train"]
    first, second = heldout_dialogues(releases["sft"], ids, split="train")[:2]
    reusing, fresh = Scorer(str(tiny_model)), Scorer(str(tiny_model))
    reusing.score(first)
    # a dialogue of another world in between (the held-out selection alternates worlds): its
    # head shares nothing worth reusing, and the first world's head is still there after it
    other = Dialogue("other", [{"role": "system", "content": "You sort parcels at a depot. " * 40},
                               *[m for m in first.messages if m["role"] != "system"]], tools=[])
    start = reusing.forwarded
    reusing.score(other)
    assert reusing.forwarded - start == len(fresh._encode(other)[0])  # forwarded whole
    assert len(reusing._heads) == 2
    before = reusing.forwarded
    tokens, mask = fresh._encode(second)
    positions = [t for s, e in assistant_spans(mask) for t in range(s, e)]
    picked, cache = reusing.picks(tokens, positions)
    shared = len(tokens) - (reusing.forwarded - before)
    assert shared >= 500  # the system prompt and tool schemas came from the first dialogue's cache
    assert cache.get_seq_length() == len(tokens)
    want, _ = fresh.picks(tokens, positions)
    assert fresh.forwarded == len(tokens)
    agree = sum(picked[t] == want[t] for t in positions) / len(positions)
    assert agree >= 0.99, agree  # bf16 sums in another order may flip a near tie, rarely
