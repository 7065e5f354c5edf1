"""GRPO (`train.grpo`) with real TRL steps on the tiny model (slow): single-turn on the `rl`
release with the state reward, and multi-turn through TRL's tool loop in a world."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from data import store
from data.records import Task, canonical_json
from envs.world import World
from train.config import GRPOStageConfig
from train.environments import environment_factories, verifier_reward

MetricLines = Callable[[Path], list[dict[str, Any]]]


@pytest.mark.slow
def test_grpo_runs_two_steps_on_the_rl_release(releases: dict[str, Path], tiny_model: Path, tmp_path: Path,
                                               metric_lines: MetricLines) -> None:
    from train.grpo import run_grpo

    cfg = GRPOStageConfig(model=str(tiny_model), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=32, bf16=False, gradient_checkpointing=False, multi_turn=False)
    s = run_grpo(releases["rl"], cfg, tmp_path)
    assert s["steps"] == 2 and [x["step"] for x in s["rewards"]] == [1, 2]
    assert all(0.0 <= x["reward"] <= 1.0 for x in s["rewards"])
    lines = [x for x in metric_lines(tmp_path) if "reward" in x]
    assert [x["step"] for x in lines] == [1, 2]
    assert all("rewards/state_reward/mean" in x and "state/exact" in x for x in lines)
    assert all(x["completions/max_length"] <= 32 for x in lines)
    assert s["dataset"]["version"] == store.read_manifest(releases["rl"]).version
    assert (tmp_path / "final" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "train_summary.json").read_text())["stage"] == "grpo"
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "done" and run["release"]["version"] == s["dataset"]["version"] and run["steps"] == 2
    assert (tmp_path / "curves.csv").read_text().startswith("step,reward")


def _rl_rows(tasks: list[Task], world: World) -> tuple[Any, dict[str, str]]:
    from datasets import Dataset

    from rollout.agent import opening_messages, world_now
    from rollout.user import ScriptedUser

    def call(name: str, arguments: dict[str, Any]) -> str:
        return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"

    rows, gold = [], {}
    for t in tasks:
        env = world.env(t.initial_state)
        prompt = opening_messages(t, world, world_now(env.conn), ScriptedUser(t))
        env.close()
        rows.append({"prompt": prompt, "task": canonical_json(t.model_dump()), "task_id": t.id, "environment": t.world})
        # the reference dialogue's agent side in one completion: its words to the user through
        # send_message_to_user (the scripted user answers), its calls; the report comes last
        turns = [x for x in t.dialogue if x.role == "assistant"]
        blocks = []
        for x in turns[:-1]:
            if x.content:
                blocks.append(call("send_message_to_user", {"message": x.content}))
            blocks += [call(c.name, c.arguments) for c in x.tool_calls]
        gold[prompt[1]["content"]] = ("\n".join(blocks), turns[-1].content)
    return Dataset.from_list(rows), gold


@pytest.mark.slow
def test_trl_tool_loop_drives_the_world_and_the_verifier_scores_it(tiny_model: Path, tasks: list[Task],
                                                                   airline: World, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything is real (TRL's environment hook, tool-call parsing, tool execution in the
    world, the scripted user answering through send_message_to_user, the composite verdict,
    loss) except what the random model writes: generation is scripted to play the reference
    dialogue's agent side for even rollouts and a refusal for odd ones, then the reference's
    report after the tool results, so the group has a success and a failure."""
    from trl import GRPOTrainer

    from train.grpo import grpo_steps

    ds, gold = _rl_rows(tasks[:2], airline)
    seen: list[str] = []
    original_train = GRPOTrainer.train

    def scripted_train(self: Any, *a: Any, **kw: Any) -> Any:
        tok = self.processing_class

        def generate(prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> tuple[list[list[int]], None]:
            out = []
            for ids in prompt_ids:
                text = tok.decode(ids)
                if "<|im_start|>user\n<tool_response>" in text:
                    reply = next(report for u, (_, report) in gold.items() if u in text)
                else:
                    seen.append(next(u for u in gold if u in text))
                    reply = gold[seen[-1]][0] if len(seen) % 2 else "I cannot help with that."
                out.append(tok(reply + "<|im_end|>", add_special_tokens=False)["input_ids"])
            return out, None

        monkeypatch.setattr(self, "_generate_single_turn", generate)
        return original_train(self, *a, **kw)

    monkeypatch.setattr(GRPOTrainer, "train", scripted_train)
    cfg = GRPOStageConfig(model=str(tiny_model), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=3000, bf16=False, gradient_checkpointing=False)
    trainer, _, _, final, _ = grpo_steps(lambda tok: ds, [verifier_reward], cfg, tmp_path,
                                         environment_factories(["airline"]))
    [log] = [h for h in trainer.state.log_history if "reward" in h]
    assert len(seen) == 2 and log["reward"] == 0.5 and log["verifier/passed"] == 0.5
    assert log["tools/call_frequency"] > 0 and log["frac_reward_zero_std"] == 0.0
    envs = trainer.environments
    by_outcome = sorted(envs, key=lambda e: e.verdict.passed)
    assert by_outcome[0].steps == [] and not by_outcome[0].verdict.passed
    assert [c.name for c in by_outcome[1]._calls()] == [c.name for c in next(
        t for t in tasks if t.id == by_outcome[1].task.id).reference_solution]
    assert (final / "model.safetensors").is_file()


@pytest.mark.slow
def test_plain_text_episodes_through_grpo_trainer(tiny_model: Path, tasks: list[Task], airline: World,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default channel (`user_channel: text`) through TRL's `rollout_func`: the trainer
    hands its rows to `ConversationRollout`, the scripted user answers the model's plain
    text, the reward is the verdict, and a step trains. Only the model's words are scripted:
    in each group, one episode plays the reference's agent side in plain text and the other
    refuses, so every group has reward variance."""
    import train.conversation as conversation
    from tests.train.test_conversation import _agent_turns, _opening, _row, _scripted
    from train.grpo import grpo_steps

    rows = [_row(tasks[0], airline), _row(tasks[1], airline)]
    scripts = {_opening(r): _agent_turns(t) for r, t in zip(rows, tasks, strict=False)}
    calls: list[int] = []

    def scripted_generate(trainer: Any) -> Any:
        generate, asked = _scripted(trainer.processing_class, scripts, odd_opening="I cannot help with that.")

        def counted(batch: list[list[int]], max_new: int) -> list[list[int]]:
            calls.append(len(batch))
            return generate(batch, max_new)

        return counted

    monkeypatch.setattr(conversation, "trainer_generate", scripted_generate)
    from datasets import Dataset

    ds = Dataset.from_list(rows)
    rollout = conversation.ConversationRollout(["airline"], record=tmp_path / "episodes.jsonl")
    cfg = GRPOStageConfig(model=str(tiny_model), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=3000, bf16=False, gradient_checkpointing=False)
    trainer, _, _, final, _ = grpo_steps(lambda tok: ds, [verifier_reward], cfg, tmp_path, rollout_func=rollout)
    [log] = [h for h in trainer.state.log_history if "reward" in h]
    assert log["reward"] == 0.5 and log["verifier/passed"] == 0.5 and log["frac_reward_zero_std"] == 0.0
    assert sorted(round(e.env.verdict.score, 3) for e in rollout.last) == [0.0, 0.0, 1.0, 1.0]
    longest = max(len(_agent_turns(t)) for t in tasks[:2])
    assert calls[:2] == [4, 2] and len(calls) == longest  # the open episodes' turns, batched
    assert log["grad_norm"] > 0  # the model's own tokens carry the advantage
    kept = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert [k["step"] for k in kept] == [1] * 4 and sorted(k["score"] for k in kept) == [0.0, 0.0, 1.0, 1.0]
    assert all(k["messages"][0]["role"] == "user" and k["closing"] == "user_stop" for k in kept)
    assert trainer.rollout_rows is None and (final / "model.safetensors").is_file()
