"""Training: releases into TRL's shapes, the state reward, and real SFT / GRPO steps.

Fast tests need no model (or only the tokenizer). The slow ones build real `sft` and `rl`
releases with the scripted pipeline, then run TRL: SFT on the embedded SmolLM2 (bf16
autocast, batch 1; about 1.5 minutes on 2 CPU cores); LoRA/packing/checkpoints, single-turn
GRPO and the before/after evaluation plumbing on a tiny random model with the same tokenizer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from data import store
from data.records import Task, canonical_json
from data.schema import SFT_SCHEMA
from envs.world import World
from tests.tiny_model import make_tiny_model
from train.config import GRPOStageConfig, SFTStageConfig
from train.data import clean_messages, load_release, sft_example, to_trl_prompts, to_trl_sft
from train.rewards import completion_calls, state_reward

TOOLS = [
    {"type": "function", "function": {"name": "get_user", "description": "A user.", "parameters": {
        "type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}},
    {"type": "function", "function": {"name": "add_bags", "description": "Bags.", "parameters": {
        "type": "object", "properties": {"reservation_id": {"type": "string"}, "bags": {"type": "integer"}},
        "required": ["reservation_id", "bags"]}}},
]


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _gold_text(task: Task) -> str:
    return "\n".join(_call_text(c.name, c.arguments) for c in task.reference_solution)


def _task_json(task: Task) -> str:
    return canonical_json(task.model_dump())  # what the rl release's `task` column holds


# --------------------------------------------------------------------------- state_reward


def test_state_reward_gold_completion_scores_one(tasks: list[Task], airline: World) -> None:
    texts = [_gold_text(t) for t in tasks]
    assert state_reward(texts, [_task_json(t) for t in tasks]) == [1.0] * len(tasks)
    # conversational completions with native tool calls (as TRL's parse_response returns them)
    conv = [[{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in t.reference_solution]}]
        for t in tasks]
    assert state_reward(conv, [t.model_dump() for t in tasks]) == [1.0] * len(tasks)
    # the calls inside message content count too; reads may be omitted (only writes replay)
    task = tasks[0]
    writes_only = [c for c in task.reference_solution if airline.tools[c.name].write]
    assert 0 < len(writes_only) < len(task.reference_solution)
    content = "Booking now.\n" + "\n".join(_call_text(c.name, c.arguments) for c in writes_only)
    assert state_reward([[{"role": "assistant", "content": content}]], [_task_json(task)]) == [1.0]


def test_state_reward_partial_wrong_and_malformed(tasks: list[Task]) -> None:
    task = next(t for t in tasks if len(t.reference_solution) >= 2)
    tj = _task_json(task)
    no_last = "\n".join(_call_text(c.name, c.arguments) for c in task.reference_solution[:-1])
    malformed = _gold_text(task) + '\n<tool_call>{"name": "cancel_reservation", "arguments": {</tool_call>'
    logged: dict[str, float] = {}
    rewards = state_reward(
        [no_last, "I cannot help with that.", malformed, '<tool_call>{"arguments": {}}</tool_call>'],
        [tj] * 4, log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    assert rewards[0] < 1.0
    assert rewards[1:] == [0.0, 0.0, 0.0]
    assert logged == {"state/exact": 0.0, "state/malformed": 0.5}
    with pytest.raises(ValueError):
        state_reward(["x"], [tj, tj])


def test_state_reward_gives_partial_credit_for_a_wrong_argument(tasks: list[Task]) -> None:
    task = next(t for t in tasks if any(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                        for c in t.reference_solution for v in c.arguments.values()))
    calls = []
    for c in task.reference_solution:
        args = dict(c.arguments)
        for k, v in args.items():
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                args[k] = v - 1 if v > 1 else v + 1
        calls.append(_call_text(c.name, args))
    [reward] = state_reward(["\n".join(calls)], [_task_json(task)])
    assert 0.0 <= reward < 1.0


def test_completion_calls_reads_text_and_native_calls() -> None:
    calls, bad = completion_calls([{"role": "assistant", "content": _call_text("get_user", {"user_id": "u1"}),
                                    "tool_calls": [{"type": "function", "function": {
                                        "name": "add_bags", "arguments": '{"reservation_id": "R1", "bags": 2}'}}]},
                                   {"role": "user", "content": _call_text("ignored", {})}])
    assert [(c.name, c.arguments) for c in calls] == [("get_user", {"user_id": "u1"}),
                                                      ("add_bags", {"reservation_id": "R1", "bags": 2})]
    assert bad == 0
    _, bad = completion_calls([{"role": "assistant", "tool_calls": [{"function": {"name": "x", "arguments": "{"}}]}])
    assert bad == 1


# --------------------------------------------------------------------------- datasets


def _sft_rows() -> list[dict[str, Any]]:
    def row(split: str, user: str) -> dict[str, Any]:
        messages = [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
                "name": "add_bags", "arguments": '{"bags":2,"reservation_id":"R1"}'}}]},
            {"role": "tool", "content": '{"ok": true}', "tool_call_id": "call_0", "name": "add_bags"},
            {"role": "assistant", "content": "Done."},
        ]
        full = [{"content": None, "tool_calls": None, "tool_call_id": None, "name": None, **m} for m in messages]
        return {"messages": full, "tools": json.dumps(TOOLS), "task_id": "t", "trajectory_id": f"tr-{user}",
                "world": "airline", "method": "logic_driven", "model": "scripted", "trial": 0, "score": 1.0,
                "split": split}

    return [row("train", "a"), row("train", "b"), row("test", "c")]


@pytest.fixture
def sft_release(tmp_path: Path) -> Path:
    with store.DatasetWriter(tmp_path / "releases", "sft", "sft", SFT_SCHEMA, 1, "v1") as w:
        w.write_rows(_sft_rows())
        return w.commit(store.Lineage())


def test_load_release_filters_split_and_refuses_incomplete(sft_release: Path) -> None:
    assert load_release(sft_release, "train").num_rows == 2
    assert load_release(sft_release, "test").num_rows == 1
    assert load_release(sft_release, None).num_rows == 3
    (sft_release / "_SUCCESS").unlink()
    with pytest.raises(store.DatasetError):
        load_release(sft_release, "train")


def test_to_trl_sft_keeps_tool_schemas_exact(sft_release: Path) -> None:
    # `sft_release` is a schema version 1 release (tools and arguments as JSON strings):
    # load_release casts those columns to `Json`, so it reads like a current one
    assert store.read_manifest(sft_release).schema_version == 1
    ds = to_trl_sft(load_release(sft_release, "train"))
    assert ds.column_names == ["messages", "tools"]
    row = ds[0]
    # tools are objects, exactly the original schemas, with no `"bags": null` merged into
    # get_user's parameters (JSON-typed, never Arrow structs)
    assert row["tools"] == TOOLS
    call = row["messages"][2]["tool_calls"][0]
    assert call["function"]["arguments"] == {"bags": 2, "reservation_id": "R1"}

    ex = sft_example(row)
    assert ex["tools"] == TOOLS
    assert all(None not in m.values() for m in ex["messages"])
    assert ex["messages"][2] == {"role": "assistant", "tool_calls": [{"id": "call_0", "type": "function",
                                 "function": {"name": "add_bags", "arguments": {"bags": 2, "reservation_id": "R1"}}}]}
    decoded = clean_messages(row["messages"], decode_arguments=True)
    assert decoded[2]["tool_calls"][0]["function"]["arguments"] == {"bags": 2, "reservation_id": "R1"}
    # JSON text (as pyarrow gives it) is decoded too
    text = [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}]
    assert clean_messages(text, decode_arguments=True)[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}


def test_to_trl_sft_refuses_rows_without_an_assistant_turn(tmp_path: Path) -> None:
    rows = _sft_rows()[:1]
    rows[0]["messages"] = [m for m in rows[0]["messages"] if m["role"] != "assistant"]
    with store.DatasetWriter(tmp_path, "sft", "sft", SFT_SCHEMA, 1, "v1") as w:
        w.write_rows(rows)
        path = w.commit(store.Lineage())
    with pytest.raises(ValueError, match="no assistant"):
        to_trl_sft(load_release(path, None))
    with pytest.raises(ValueError, match="not an rl release"):
        to_trl_prompts(load_release(path, None))


def test_extra_keys_are_checked_against_trls_configs_when_the_config_loads() -> None:
    """A misspelled `extra` key is an error naming it (and the field it resembles) at load
    time; TRL's own fields pass through, and no extra means no check (trl not imported)."""
    pytest.importorskip("trl")
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"'lerning_rate' \(did you mean 'learning_rate'\?\)") as err:
        SFTStageConfig(extra={"lerning_rate": 1e-4})
    assert "SFTConfig" in str(err.value)
    with pytest.raises(ValidationError, match=r"GRPOConfig: 'num_generation' \(did you mean 'num_generations'\?\)"):
        GRPOStageConfig.model_validate({"extra": {"num_generation": 4}})
    assert SFTStageConfig(extra={"completion_only_loss": True, "warmup_steps": 2}).extra["warmup_steps"] == 2
    assert GRPOStageConfig(extra={"scale_rewards": "group"}).extra == {"scale_rewards": "group"}
    assert SFTStageConfig().extra == {} and GRPOStageConfig().extra == {}


def test_extra_keys_are_not_checked_without_trl(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from train.config import trl_config_fields

    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` raises ImportError
    trl_config_fields.cache_clear()
    try:
        assert SFTStageConfig(extra={"lerning_rate": 1e-4}).extra == {"lerning_rate": 1e-4}
        assert GRPOStageConfig(extra={"anything": 1}).extra == {"anything": 1}
    finally:
        trl_config_fields.cache_clear()


# --------------------------------------------------------------------------- real training (slow)


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real `sft` and `rl` releases from the scripted pipeline (noise 0.6: some tasks fail)."""
    from pipelines import stages
    from pipelines.config import load_config

    cfg = load_config(None, {"rollout.model.kind": "scripted", "rollout.model.noise": 0.6,
                             "rollout.trials": 3, "synthesis.n_tasks": 8})
    from tests.pipeline_run import curated_run

    out = tmp_path_factory.mktemp("trainrel")
    paths = stages.release(cfg, out, curated_run(cfg, out)[2])
    assert load_release(paths["sft"], "train").num_rows > 0 and load_release(paths["sft"], "test").num_rows > 0
    assert load_release(paths["rl"], "train").num_rows > 0
    return paths


def _metric_lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_sft_runs_two_steps_on_a_released_dataset(releases: dict[str, Path], tmp_path: Path) -> None:
    from train.sft import run_sft

    cfg = SFTStageConfig(max_steps=2, per_device_train_batch_size=1, bf16=True, gradient_checkpointing=False)
    s = run_sft(releases["sft"], cfg, tmp_path)
    assert s["steps"] == 2 and [x["step"] for x in s["losses"]] == [1, 2]
    assert all(math.isfinite(x["loss"]) and x["loss"] > 0 for x in s["losses"])
    lines = _metric_lines(tmp_path)
    assert [x["step"] for x in lines if "loss" in x and "train_runtime" not in x] == [1, 2]
    assert any("train_runtime" in x for x in lines) and any("eval_loss" in x for x in lines)
    assert math.isfinite(s["eval"]["eval_loss"]) and s["dataset"]["eval_rows"] > 0
    # assistant-only loss: some, not all, tokens are trained on
    tokens = s["dataset"]["train_tokens"]
    assert 0 < tokens["loss_tokens"] < tokens["tokens"]
    saved = json.loads((tmp_path / "train_summary.json").read_text())
    assert saved["dataset"]["version"] == store.read_manifest(releases["sft"]).version
    assert saved["code_version"] and saved["config"]["max_steps"] == 2
    final = tmp_path / "final"
    assert (final / "model.safetensors").is_file() and (final / "chat_template.jinja").is_file()


def test_sft_refuses_a_max_length_that_cuts_every_assistant_turn(releases: dict[str, Path], tmp_path: Path) -> None:
    from train.sft import build_sft_trainer, hub_offline

    # the airline system prompt plus tool schemas is ~2300 tokens: 512 keeps no assistant token,
    # so every row would be dropped; refused (before the weights load) with the length needed
    with hub_offline(), pytest.raises(store.DatasetError, match=r"would drop (\d+) of \1 train rows.*at least \d+"):
        build_sft_trainer(releases["sft"], SFTStageConfig(max_length=512), tmp_path)


@pytest.mark.slow
def test_grpo_runs_two_steps_on_the_rl_release(releases: dict[str, Path], tiny_model: Path, tmp_path: Path) -> None:
    from train.grpo import run_grpo

    cfg = GRPOStageConfig(model=str(tiny_model), max_steps=2, per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=32, bf16=False, gradient_checkpointing=False, multi_turn=False)
    s = run_grpo(releases["rl"], cfg, tmp_path)
    assert s["steps"] == 2 and [x["step"] for x in s["rewards"]] == [1, 2]
    assert all(0.0 <= x["reward"] <= 1.0 for x in s["rewards"])
    lines = [x for x in _metric_lines(tmp_path) if "reward" in x]
    assert [x["step"] for x in lines] == [1, 2]
    assert all("rewards/state_reward/mean" in x and "state/exact" in x for x in lines)
    assert all(x["completions/max_length"] <= 32 for x in lines)
    assert s["dataset"]["version"] == store.read_manifest(releases["rl"]).version
    assert (tmp_path / "final" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "train_summary.json").read_text())["stage"] == "grpo"
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "done" and run["release"]["version"] == s["dataset"]["version"] and run["steps"] == 2
    assert (tmp_path / "curves.csv").read_text().startswith("step,reward")


# --------------------------------------------------------------------------- templates, LoRA, packing, lineage


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def test_assistant_only_loss_needs_generation_markers() -> None:
    import trl
    from transformers import AutoTokenizer

    from rollout.embedded import hub_offline, prepare_embedded_model
    from train.sft import check_generation_markers, use_chat_template

    with hub_offline():
        tok = AutoTokenizer.from_pretrained(prepare_embedded_model(), local_files_only=True)
    assert check_generation_markers(tok) == "template"  # ours: {% generation %} around assistant output
    # a template without markers that TRL does not know: a clear error
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with pytest.raises(ValueError, match="generation"):
        check_generation_markers(tok)
    # a template TRL 1.16 ships a training version of (Qwen2.5): SFTTrainer swaps it in
    use_chat_template(tok, str(Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"))
    assert check_generation_markers(tok) == "trl"
    with pytest.raises(FileNotFoundError):
        use_chat_template(tok, "/nonexistent/template.jinja")


@pytest.mark.slow
def test_sft_lora_packing_checkpoints_and_curves(releases: dict[str, Path], tiny_model: Path, tmp_path: Path) -> None:
    from train.lineage import runs_on_release
    from train.sft import run_sft

    cfg = SFTStageConfig(model=str(tiny_model), max_steps=2, per_device_train_batch_size=1, lora=True, lora_r=4,
                         packing=True, eval_steps=1, save_steps=1, save_total_limit=3, bf16=False,
                         gradient_checkpointing=False, learning_rate=1e-3)
    out = tmp_path / "train" / "sft-a"
    s = run_sft(releases["sft"], cfg, out)
    assert s["steps"] == 2 and len(s["losses"]) == 2 and all(math.isfinite(x["loss"]) for x in s["losses"])
    # evaluated during training (every step) and at the end, on the held-out split
    evals = [x for x in _metric_lines(out) if "eval_loss" in x]
    assert [x["step"] for x in evals] == [1, 2, 2] and math.isfinite(s["eval"]["eval_loss"])
    assert [Path(c).name for c in s["checkpoints"]] == ["checkpoint-1", "checkpoint-2"]
    assert (out / "adapter" / "adapter_config.json").is_file() and (out / "final" / "model.safetensors").is_file()
    rows = (out / "curves.csv").read_text().splitlines()
    assert rows[0] == "step,loss,eval_loss,grad_norm,learning_rate" and len(rows) == 3
    # packing: fewer, longer rows than the release's train split
    assert s["dataset"]["train_tokens"]["rows"] <= s["dataset"]["train_rows"]
    [run] = runs_on_release(releases["sft"], tmp_path / "train")
    assert run["status"] == "done" and run["config"]["lora"] is True and run["final_loss"] == s["final_loss"]


def test_release_tasks_for_evaluation(releases: dict[str, Path]) -> None:
    from train.evaluate import release_tasks

    rl_test = release_tasks(releases["rl"], "test")
    sft_test = release_tasks(releases["sft"], "test")  # task ids looked up through the lineage
    assert all(t.split == "test" for t in rl_test + sft_test) and sft_test
    assert {t.id for t in sft_test} == set(load_release(releases["sft"], "test")["task_id"])
    with pytest.raises(store.DatasetError):
        release_tasks(releases["rl"].parent, "test")


@pytest.mark.slow
def test_before_after_evaluation_runs_both_models(releases: dict[str, Path], tiny_model: Path) -> None:
    from train.evaluate import compare

    r = compare(releases["sft"], str(tiny_model), base=str(tiny_model), max_turns=1, max_tasks=1,
                sampling=None)
    for side in ("base", "trained"):
        assert r[side]["tasks"] == 1 and r[side]["trajectories"] == 1
        assert 0.0 <= r[side]["pass_rate"] <= 1.0 and r[side]["per_task"][0]["verifier"] == "composite"
    assert r["delta"]["pass_rate"] == 0.0  # the same model on both sides, greedy
    with pytest.raises(FileNotFoundError):
        compare(releases["sft"], "/nonexistent/model", max_tasks=1)
