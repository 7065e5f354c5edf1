"""`train.conversation`: GRPO episodes that speak to the user in plain text, as the agent loop
does. The world, the scripted user, the parser, the chat template and the verdict are real;
only the model's words are scripted (the reference dialogue's agent side, or a refusal), so
the token layout and the reward can be checked exactly."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from data.records import Task, canonical_json
from envs.world import World
from rollout.agent import opening_messages, world_now
from rollout.user import ScriptedUser
from train.conversation import ConversationRollout, Episode, suffix_ids
from train.environments import verifier_reward


@pytest.fixture(scope="module")
def tok() -> Any:
    from transformers import AutoTokenizer

    from rollout.embedded import hub_offline, prepare_embedded_model

    with hub_offline():
        return AutoTokenizer.from_pretrained(prepare_embedded_model(), local_files_only=True)


def _row(task: Task, world: World) -> dict[str, Any]:
    env = world.env(task.initial_state)
    prompt = opening_messages(task, world, world_now(env.conn), ScriptedUser(task))
    env.close()
    return {"prompt": prompt, "task": canonical_json(task.model_dump()), "task_id": task.id,
            "environment": task.world}


def _agent_turns(task: Task) -> list[str]:
    """The reference dialogue's agent side as the model would write it: calls as
    `<tool_call>` blocks, words as plain text."""
    out = []
    for t in (t for t in task.dialogue if t.role == "assistant"):
        calls = "".join("<tool_call>" + json.dumps({"name": c.name, "arguments": c.arguments}) + "</tool_call>"
                        for c in t.tool_calls)
        out.append(calls or t.content)
    return out


def _scripted(tok: Any, scripts: dict[str, list[str]], odd_opening: str | None = None
              ) -> tuple[Callable[[list[list[int]], int], list[list[int]]], list[int]]:
    """A `generate` that writes each row's next scripted turn (its last one again once
    spent), then the end of turn and some padding, cut at `max_new`. `scripts` is keyed by
    the user's opening words; a row's turn is the number of assistant turns it holds; with
    `odd_opening`, the odd rows of the first batch open with it instead. Returns it and the
    `max_new` of each call."""
    asked: list[int] = []

    def generate(batch: list[list[int]], max_new: int) -> list[list[int]]:
        asked.append(max_new)
        out = []
        for i, ids in enumerate(batch):
            text = tok.decode(ids)
            script = next(s for opening, s in scripts.items() if opening in text)
            turn = text.count("<|im_start|>assistant") - 1
            if odd_opening is not None and len(asked) == 1 and i % 2:
                script = [odd_opening]
            said = tok(script[min(turn, len(script) - 1)] + "<|im_end|>", add_special_tokens=False)["input_ids"]
            out.append((said + [tok.pad_token_id] * 3)[:max_new])
        return out

    return generate, asked


def _opening(row: dict[str, Any]) -> str:
    return row["prompt"][-1]["content"]


def _play(tok: Any, rows: list[dict[str, Any]], scripts: list[list[str]], budget: int = 3000,
          **kw: Any) -> tuple[list[Episode], list[int]]:
    generate, asked = _scripted(tok, {_opening(r): s for r, s in zip(rows, scripts, strict=True)})
    episodes = ConversationRollout(["airline"], **kw).play(rows, tok, generate, [tok.eos_token_id], budget)
    return episodes, asked


def test_the_reference_spoken_in_plain_text_passes_and_trains_on_what_inference_renders(
        tok: Any, tasks: list[Task], airline: World) -> None:
    """The reference's agent side, its words in plain text: the scripted user answers each,
    the calls run, the user ends the conversation and the verdict is a pass. The episode's
    ids are the chat template's rendering of its conversation (what the agent loop sends),
    and only the model's own turns are marked for loss."""
    task = tasks[0]
    turns = _agent_turns(task)
    row = _row(task, airline)
    [e], asked = _play(tok, [row], [turns])
    assert e.env.closing == "user_stop" and e.turns == len(turns)
    assert verifier_reward([None], episode=[e.env]) == [1.0] and e.env.verdict.passed
    assert [c.name for c in e.env._calls()] == [c.name for c in task.reference_solution]
    rendered = tok.apply_chat_template([row["prompt"][0], *e.env.messages], tools=e.tools, tokenize=False)
    assert rendered.startswith(tok.decode(e.prompt_ids + e.completion_ids))
    assert e.env.messages[-1]["role"] == "user" and "###STOP###" in e.env.messages[-1]["content"]
    assert len(e.mask) == len(e.completion_ids) and e.completion_ids[-1] == tok.eos_token_id
    own = tok.decode([t for t, m in zip(e.completion_ids, e.mask, strict=True) if m])
    assert own == "".join(t + "<|im_end|>" for t in turns)  # the padding after each turn is dropped
    told = tok.decode([t for t, m in zip(e.completion_ids, e.mask, strict=True) if not m])
    replies = [m["content"] for m in e.env.messages[1:-1] if m["role"] == "user"]
    assert replies and all(r in told for r in replies) and "<tool_response>" in told
    assert asked == [256] * len(turns)


def test_a_group_with_a_refusal_has_reward_variance(tok: Any, tasks: list[Task], airline: World) -> None:
    rows = [_row(tasks[0], airline), _row(tasks[1], airline)]
    ref, refusal = _play(tok, rows, [_agent_turns(tasks[0]), ["I cannot help with that."]])[0]
    assert verifier_reward([None, None], episode=[ref.env, refusal.env]) == [1.0, 0.0]
    assert refusal.env.steps == [] and refusal.env.closing in {"user_stop", "max_turns"}


def test_an_unusable_call_gets_the_agent_loops_error_result_and_the_episode_goes_on(
        tok: Any, tasks: list[Task], airline: World) -> None:
    bad = '<tool_call>{"name": "get_user_details", "arguments": {"user_id": </tool_call>'
    unknown = '<tool_call>{"name": "search_flights_v2", "arguments": {}}</tool_call>'
    [e], _ = _play(tok, [_row(tasks[0], airline)], [[bad, unknown, "Could you give me your user id?"]],
                   max_turns=4)
    tools = [m for m in e.env.messages if m["role"] == "tool"]
    assert tools[0]["name"] == "invalid_tool_call" and "could not parse the tool call" in tools[0]["content"]
    assert tools[1]["name"] == "search_flights_v2" and "error" in tools[1]["content"]
    assert sum(e.env.errors.values()) == 2 and [s.error is not None for s in e.env.steps] == [True, True]
    assert e.turns >= 3 and e.env.messages[-1]["role"] == "user"


def test_calls_over_the_turn_cap_are_counted_as_the_agent_loop_counts_them(
        tok: Any, tasks: list[Task], airline: World) -> None:
    """Six calls in one turn: the first four run, the two over the cap get no result and are
    counted as `too_many_calls`, as `rollout.agent` counts them."""
    call = '<tool_call>{"name": "get_user_details", "arguments": {"user_id": "nobody_1"}}</tool_call>'
    [e], _ = _play(tok, [_row(tasks[0], airline)], [[call * 6, "Could you give me your user id?"]], max_turns=2)
    assert len([m for m in e.env.messages if m["role"] == "tool"]) == 4
    assert e.env.errors["too_many_calls"] == 2


def test_the_budget_and_the_turn_limit_close_an_episode_as_max_turns(
        tok: Any, tasks: list[Task], airline: World) -> None:
    turns = _agent_turns(tasks[0])
    [short], _ = _play(tok, [_row(tasks[0], airline)], [turns], budget=400)
    assert short.env.closing == "max_turns" and len(short.completion_ids) <= 400
    assert verifier_reward([None], episode=[short.env]) == [0.0]
    [capped], _ = _play(tok, [_row(tasks[0], airline)], [turns], max_turns=2)
    assert capped.env.closing == "max_turns" and capped.turns == 2
    # a turn cut at turn_tokens is closed with the end-of-turn token, which carries no loss
    [cut], asked = _play(tok, [_row(tasks[0], airline)], [turns], turn_tokens=5, max_turns=1)
    assert asked == [5] and cut.completion_ids[-1] == tok.eos_token_id and cut.mask[-1] == 0


def test_suffix_ids_cut_the_messages_after_a_turn_from_the_template(tok: Any) -> None:
    after = {"role": "assistant", "content": "Which reservation?"}
    ids = suffix_ids(tok, after, [{"role": "user", "content": "RB8F586, please."}], [tok.eos_token_id])
    assert tok.decode(ids) == "\n<|im_start|>user\nRB8F586, please.<|im_end|>\n<|im_start|>assistant\n"


def test_rollout_needs_the_trainers_rows(tok: Any) -> None:
    class Trainer:
        rollout_rows = None

    with pytest.raises(RuntimeError, match="rollout_rows"):
        ConversationRollout(["airline"])([[{"role": "user", "content": "hi"}]], Trainer())
    with pytest.raises(ValueError, match="at least 1"):
        ConversationRollout(["airline"], max_turns=0)


def test_with_vllm_the_turns_come_from_trls_generation() -> None:
    from train.conversation import trainer_generate

    class Trainer:
        use_vllm = True
        seen: list[Any] = []

        def _generate_single_turn(self, prompt_ids: Any, images: Any, fields: Any, n: int) -> Any:
            self.seen.append((prompt_ids, images, fields, n))
            return [[5, 6, 7, 8]] * len(prompt_ids), None

    t = Trainer()
    assert trainer_generate(t)([[1, 2], [3]], 3) == [[5, 6, 7], [5, 6, 7]]
    assert t.seen == [([[1, 2], [3]], None, {}, 1)]


def test_judged_episodes_are_kept_one_line_each(tok: Any, tasks: list[Task], airline: World, tmp_path: Any) -> None:
    rows = [_row(tasks[0], airline), _row(tasks[1], airline)]
    generate, _ = _scripted(tok, {_opening(rows[0]): _agent_turns(tasks[0]), _opening(rows[1]): ["No."]})
    rollout = ConversationRollout(["airline"], record=tmp_path / "runs" / "episodes.jsonl")
    played = rollout.play(rows, tok, generate, [tok.eos_token_id], 3000)
    verifier_reward([None, None], episode=[e.env for e in played])
    assert rollout.keep(3) == 2 and rollout.keep(4) == 2
    kept = [json.loads(x) for x in (tmp_path / "runs" / "episodes.jsonl").read_text().splitlines()]
    assert [k["step"] for k in kept] == [3, 3, 4, 4] and [k["score"] for k in kept[:2]] == [1.0, 0.0]
    assert kept[0]["task_id"] == tasks[0].id and kept[0]["messages"] == played[0].env.messages
    assert kept[1]["reasons"] and kept[0]["generated_tokens"] == sum(played[0].mask)
    assert ConversationRollout(["airline"]).keep(1) == 0  # nowhere to keep them
    # a new run into the same folder starts its record afresh
    ConversationRollout(["airline"], record=tmp_path / "runs" / "episodes.jsonl")
    assert (tmp_path / "runs" / "episodes.jsonl").read_text() == ""


class _PatientUser:
    """A user who answers every message (the random model's turns end no conversation)."""

    def __init__(self, task: Task) -> None:
        self.task = task

    def first_message(self) -> str:
        return self.task.instruction

    async def respond(self, messages: list[dict[str, Any]]) -> str:
        return f"Please go on ({len(messages)})."


def _generating_trainer(model: Any, tok: Any, monkeypatch: pytest.MonkeyPatch, **sampling: Any) -> Any:
    """What `trainer_generate` reads of a GRPOTrainer, around `model` (unwrapping is TRL's)."""
    import contextlib
    from types import SimpleNamespace

    from transformers import GenerationConfig

    import train.conversation as conversation

    monkeypatch.setattr(conversation, "_generating", lambda trainer: contextlib.nullcontext(model))
    config = GenerationConfig(eos_token_id=[tok.eos_token_id], pad_token_id=tok.pad_token_id, **sampling)
    return SimpleNamespace(generation_config=config, eos_token_ids=[tok.eos_token_id], processing_class=tok,
                           accelerator=SimpleNamespace(device="cpu"), use_vllm=False)


def test_reusing_generation_plays_the_episodes_plain_generation_plays(
        tok: Any, tasks: list[Task], airline: World, tiny_model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy, the turns generated with each episode's keys and values kept between turns are
    the tokens `model.generate` writes from the whole ids every turn; the group's prompt and
    each episode's earlier turns come from the cache."""
    import torch
    from transformers import AutoModelForCausalLM

    from train.conversation import trainer_generate

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    rows = [_row(tasks[0], airline)] * 2 + [_row(tasks[1], airline)] * 2
    rollout = ConversationRollout(["airline"], max_turns=3, turn_tokens=24, user_factory=_PatientUser)
    played = {}
    for name, sampling in {"plain": {"do_sample": False, "top_k": 50}, "reusing": {"do_sample": False}}.items():
        generate = trainer_generate(_generating_trainer(model, tok, monkeypatch, **sampling))
        assert hasattr(generate, "store") == (name == "reusing")
        episodes = rollout.play(rows, tok, generate, [tok.eos_token_id], 1200)
        played[name] = [(e.completion_ids, e.mask, e.turns) for e in episodes]
        if name == "reusing":
            stats = generate.store.stats
            prompt = sum(len(e.prompt_ids) for e in episodes)
            assert stats.reused_tokens > prompt and stats.prefilled_tokens < prompt
    assert played["reusing"] == played["plain"]
    assert all(turns > 1 for _, _, turns in played["plain"])


def test_reusing_generation_samples_by_the_trainers_seed(
        tok: Any, tasks: list[Task], airline: World, tiny_model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from train.conversation import trainer_generate

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    trainer = _generating_trainer(model, tok, monkeypatch, do_sample=True, temperature=1.0, top_p=0.9)
    rows = [_row(tasks[0], airline)] * 2
    runs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        episodes = ConversationRollout(["airline"], max_turns=2, turn_tokens=16).play(
            rows, tok, trainer_generate(trainer), [tok.eos_token_id], 800)
        runs.append([e.completion_ids for e in episodes])
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert runs[0][0] != runs[0][1]  # the group's episodes are sampled apart
