"""Multi-turn GRPO in the worlds, the methods.md §5 objective options, GPU launch lines,
run lineage, curves and the before/after evaluation.

Real TRL steps run on a tiny random Llama that shares the embedded model's tokenizer and
chat template (built once per module, a few MB), so they test the plumbing, not learning.
On CPU, TRL 1.16's fused LM head scores every prompt position, so a step over a ~2,400-token
airline prompt costs tens of seconds even for the tiny model: those tests are `slow`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from data import store
from data.records import Task, canonical_json
from envs.registry import get_world
from envs.world import World
from tests.paths import ROOT
from tests.tiny_model import make_tiny_model
from train.config import GRPOStageConfig, LaunchConfig, SFTStageConfig
from train.environments import (
    ended_cleanly,
    environment_class,
    environment_factories,
    verifier_reward,
)
from train.objectives import (
    ObjectiveOptions,
    entropy_epsilon_high,
    success_weights,
    zero_variance_groups,
)

TOOL_WORLDS = ["airline", "retail", "telecom", "clinic"]


# --------------------------------------------------------------------------- environments


@pytest.mark.parametrize("world", TOOL_WORLDS)
def test_environment_methods_render_the_worlds_own_tool_schemas(world: str) -> None:
    from transformers.utils import get_json_schema

    w = get_world(world)
    env = environment_class(world)()
    for spec in w.tools.values():
        got = get_json_schema(getattr(env, spec.name))["function"]
        want = spec.schema()["function"]
        assert got["name"] == want["name"] and got["description"] == want["description"]
        assert sorted(got["parameters"].get("required", [])) == sorted(want["parameters"]["required"])
        # same properties, types, enums and descriptions ("default" is not part of TRL's schema)
        strip = {"default", "nullable"}
        assert ({k: {a: b for a, b in v.items() if a not in strip} for k, v in got["parameters"]["properties"].items()}
                == {k: {a: b for a, b in v.items() if a not in strip}
                    for k, v in want["parameters"]["properties"].items()})
    # TRL turns every public method into a tool: only the world's tools (and reset) are public
    public = {n for n in dir(type(env)) if not n.startswith("_") and callable(getattr(type(env), n))}
    assert public == set(w.tools) | {"reset"}


def _episode(env: Any, calls: list[Any]) -> None:
    for c in calls:
        getattr(env, c.name)(**c.arguments)


def test_environment_episode_is_judged_by_the_state_verifier(tasks: list[Task], airline: World) -> None:
    task = next(t for t in tasks if len(t.reference_solution) >= 2)
    env = environment_factories(["airline"])["airline"]()
    assert env.reset(task=canonical_json(task.model_dump()), prompt=[], task_id=task.id) is None
    _episode(env, task.reference_solution)
    done = [{"role": "assistant", "content": "Done."}]
    logged: dict[str, float] = {}
    assert verifier_reward([done], environments=[env], log_metric=logged.__setitem__) == [1.0]
    assert env.verdict is not None and env.verdict.passed and env.verdict.verifier == "state_equivalence"
    assert logged["verifier/passed"] == 1.0 and logged["verifier/tool_calls"] == len(task.reference_solution)

    # the same calls, but the rollout ended mid tool loop: not a clean stop, scored 0
    mid = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "x"}}]}]
    assert verifier_reward([mid], environments=[env]) == [0.0]

    # reset gives a fresh copy: the earlier writes are gone, so stopping at once scores < 1
    env.reset(task=canonical_json(task.model_dump()))
    assert env.steps == []
    [fresh] = verifier_reward([done], environments=[env])
    assert fresh < 1.0 and not env.verdict.passed

    # a rule violation or a bad argument is a tool result, never an exception
    writes = [c for c in task.reference_solution if airline.tools[c.name].write]
    out = json.loads(getattr(env, writes[0].name)(**{**writes[0].arguments, "nonexistent": 1}))
    assert out["error"] == "bad_arguments" and env.errors["bad_arguments"] == 1


def test_environment_refuses_a_task_of_another_world(tasks: list[Task]) -> None:
    env = environment_class("retail")()
    with pytest.raises(ValueError, match="not 'retail'"):
        env.reset(task=canonical_json(tasks[0].model_dump()))
    with pytest.raises(ValueError, match="task"):
        env.reset(prompt=[])
    with pytest.raises(ValueError, match="environments"):
        verifier_reward([[]])


def test_constraint_tasks_are_scored_by_constraint_satisfaction() -> None:
    from synthesis.base import SynthesisConfig, get_method
    from verifiers.constraints import score_constraints

    world = get_world("airline")
    task = get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", n_tasks=1, seed=3), world).tasks[0]
    assert task.verification.constraints is not None
    env = environment_class("airline")()
    env.reset(task=task.model_dump_json())
    _episode(env, task.reference_solution)
    [reward] = verifier_reward([[{"role": "assistant", "content": "ok"}]], environments=[env])
    assert env.verdict.verifier == "constraint_satisfaction"
    assert reward == pytest.approx(score_constraints(task, task.reference_solution).score) and reward == 1.0


def test_ended_cleanly() -> None:
    assert ended_cleanly([{"role": "assistant", "content": "bye"}])
    assert not ended_cleanly([{"role": "assistant", "tool_calls": [{}]}])
    assert not ended_cleanly([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "{}"}])
    assert not ended_cleanly([])


# --------------------------------------------------------------------------- §5 options, pure


def test_success_weights_amplify_rare_outcomes() -> None:
    import torch

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])  # groups of 4: p = 0.25, 0.75
    adv = rewards - rewards.view(-1, 4).mean(1).repeat_interleave(4)
    w = success_weights(rewards, adv, 4, alpha=1.0)
    assert w.tolist() == pytest.approx([1.75, 1.25, 1.25, 1.25, 1.25, 1.25, 1.25, 1.75])
    # zero advantages keep weight 1; alpha 0 is the identity
    assert success_weights(torch.ones(4), torch.zeros(4), 2, 2.0).tolist() == [1.0] * 4
    assert success_weights(rewards, adv, 4, 0.0).tolist() == [1.0] * 8
    with pytest.raises(ValueError):
        success_weights(rewards, adv, 3, 1.0)


def test_zero_variance_groups_and_entropy_clip_bounds() -> None:
    import torch

    flat = zero_variance_groups(torch.tensor([0.5, 0.5, 0.0, 1.0, float("nan"), float("nan")]), 2)
    assert flat.tolist() == [True, True, False, False, True, True]
    v = 49152
    eps = entropy_epsilon_high(torch.tensor([[0.0, math.log(v), 100.0]]), 0.2, 1.0, v)
    assert eps.tolist()[0] == pytest.approx([0.2, 0.4, 0.4])  # clamped at ln V
    with pytest.raises(ValueError):
        entropy_epsilon_high(torch.zeros(1), 0.2, 1.0, 1)
    assert not ObjectiveOptions().active and ObjectiveOptions(entropy_clip_beta=0.5).active


# --------------------------------------------------------------------------- a tiny model for real TRL steps


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def _text_rows(n: int) -> Any:
    from datasets import Dataset

    return Dataset.from_list([{"prompt": f"Say something short about {w}.", "task_id": str(i)}
                              for i, w in enumerate(["cats", "dogs", "rain", "tea"][:n])])


def _run_text_grpo(tiny_model: Path, out: Path, reward: Any, **objective: Any) -> Any:
    from train.grpo import grpo_steps

    cfg = GRPOStageConfig(model=str(tiny_model), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=6, bf16=False, gradient_checkpointing=False, multi_turn=False,
                          objective=ObjectiveOptions(**objective), **({"num_iterations": 2}
                                                                      if objective.get("entropy_clip_beta") else {}))
    trainer, *_ = grpo_steps(lambda tok: _text_rows(2), [reward], cfg, out)
    return [h for h in trainer.state.log_history if "loss" in h and "train_runtime" not in h]


@pytest.mark.slow
def test_trl_gives_zero_variance_groups_no_advantage_and_the_filter_drops_them(tiny_model: Path,
                                                                               tmp_path: Path) -> None:
    def constant(completions: list[Any], **kw: Any) -> list[float]:
        return [0.5] * len(completions)

    [plain] = _run_text_grpo(tiny_model, tmp_path / "plain", constant)
    # TRL's own behaviour: every group has zero reward variance -> advantage 0 -> loss 0
    assert plain["frac_reward_zero_std"] == 1.0 and plain["loss"] == 0.0
    [filtered] = _run_text_grpo(tiny_model, tmp_path / "filtered", constant, filter_zero_variance=True)
    assert filtered["filter/zero_variance_groups"] == 1.0 and filtered["loss"] == 0.0


@pytest.mark.slow
def test_success_weighting_and_entropy_clipping_are_applied(tiny_model: Path, tmp_path: Path) -> None:
    def alternating(completions: list[Any], **kw: Any) -> list[float]:
        return [float(i % 2 == 0) for i in range(len(completions))]  # every group: one success, one failure

    logs = _run_text_grpo(tiny_model, tmp_path / "w", alternating, success_weighting=1.0)
    assert logs[0]["advantage/success_weight_mean"] == pytest.approx(1.5)  # p = 0.5: 1 + 1·0.5 both ways
    assert logs[0]["frac_reward_zero_std"] == 0.0 and logs[0]["grad_norm"] > 0.0

    logs = _run_text_grpo(tiny_model, tmp_path / "e", alternating, entropy_clip_beta=1.0)
    eps = [h["clip/epsilon_high_mean"] for h in logs]
    assert eps and all(0.2 < e <= 0.4 for e in eps)


# --------------------------------------------------------------------------- multi-turn through TRL's tool loop


def _rl_rows(tasks: list[Task], world: World) -> tuple[Any, dict[str, str]]:
    from datasets import Dataset

    from rollout.agent import opening_messages, world_now
    from rollout.user import ScriptedUser

    rows, gold = [], {}
    for t in tasks:
        env = world.env(t.initial_state)
        prompt = opening_messages(t, world, world_now(env.conn), ScriptedUser(t))
        env.close()
        rows.append({"prompt": prompt, "task": canonical_json(t.model_dump()), "task_id": t.id, "environment": t.world})
        gold[prompt[1]["content"]] = "\n".join(
            "<tool_call>" + json.dumps({"name": c.name, "arguments": c.arguments}) + "</tool_call>"
            for c in t.reference_solution)
    return Dataset.from_list(rows), gold


@pytest.mark.slow
def test_trl_tool_loop_drives_the_world_and_the_verifier_scores_it(tiny_model: Path, tasks: list[Task],
                                                                   airline: World, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything is real (TRL's environment hook, tool-call parsing, tool execution in the
    world, verifier, loss) except what the random model writes: generation is scripted to
    emit the gold calls for even rollouts and a refusal for odd ones, then "Done." after
    the tool results, so the group has a success and a failure."""
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
                    reply = "Done."
                else:
                    seen.append(next(u for u in gold if u in text))
                    reply = gold[seen[-1]] if len(seen) % 2 else "I cannot help with that."
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


# --------------------------------------------------------------------------- GPU launch lines


def test_gpu_config_validates_and_produces_launch_lines() -> None:
    from pipelines.config import load_config
    from train.launch import launch_commands

    path = ROOT / "configs" / "train-gpu.yaml"
    cfg = load_config(path)
    assert cfg.grpo.use_vllm and not cfg.grpo.use_cpu and cfg.grpo.bf16 and cfg.grpo.model != "embedded"
    server, train = launch_commands("grpo", cfg.grpo, "out/releases/rl/V", "out/train/grpo-X", path)
    assert server.role == "vllm-server" and server.argv[:4] == ["trl", "vllm-serve", "--model", cfg.grpo.model]
    assert server.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, cfg.grpo.launch.vllm_gpus))
    assert train.argv[:2] == ["accelerate", "launch"] and "--num_processes" in train.argv
    i = train.argv.index("-m")
    assert train.argv[i:i + 3] == ["-m", "train.run", "grpo"] and str(path) in train.argv
    assert str(cfg.grpo.vllm_server_port) in server.argv
    assert "CUDA_VISIBLE_DEVICES=" in train.shell() and train.shell().count("accelerate launch") == 1
    [sft] = launch_commands("sft", cfg.sft, "out/releases/sft/V", "out/train/sft-X", path)
    assert sft.argv[sft.argv.index("-m") + 2] == "sft" and "--mixed_precision" in sft.argv
    # the entry point reads the same file's section
    from train.run import stage_config

    assert stage_config("grpo", path, max_steps=3).model_dump() == cfg.grpo.model_copy(
        update={"max_steps": 3}).model_dump()


def test_cpu_config_validates_and_its_episode_budget_fits_a_tool_loop(tasks: list[Task]) -> None:
    from pipelines.config import load_config
    from train.config import GRPOStageConfig

    cfg = load_config(ROOT / "configs" / "train-cpu.yaml")
    assert cfg.sft.model == cfg.grpo.model == "embedded" and cfg.sft.use_cpu and cfg.grpo.use_cpu
    assert cfg.grpo.multi_turn and cfg.grpo.per_device_train_batch_size % cfg.grpo.num_generations == 0
    assert GRPOStageConfig().max_completion_length == cfg.grpo.max_completion_length
    # The episode budget counts tool results too: it must hold a task's whole reference path
    # (calls and results, ~4 characters a token) with room to answer. 48 tokens, the old
    # default, cut every episode mid tool loop, so every GRPO group scored 0.
    task = max(tasks, key=lambda t: len(t.reference_solution))
    env = environment_factories(["airline"])["airline"]()
    env.reset(task=canonical_json(task.model_dump()))
    chars = sum(len(json.dumps({"name": c.name, "arguments": c.arguments})) + len(getattr(env, c.name)(**c.arguments))
                for c in task.reference_solution)
    assert 48 < chars / 4 + 64 < cfg.grpo.max_completion_length


def test_launch_lines_refuse_bad_setups() -> None:
    from train.launch import launch_commands

    with pytest.raises(ValueError, match="use_cpu"):
        launch_commands("sft", SFTStageConfig(), "d", "o")
    with pytest.raises(ValueError, match="GPU"):
        GRPOStageConfig(use_vllm=True)
    server = dict(use_cpu=False, use_vllm=True, vllm_mode="server")
    with pytest.raises(ValueError, match="vllm_gpus"):
        launch_commands("grpo", GRPOStageConfig(**server), "d", "o")
    with pytest.raises(ValueError, match="overlap"):
        launch_commands("grpo", GRPOStageConfig(**server, launch=LaunchConfig(vllm_gpus=[0], training_gpus=[0])),
                        "d", "o")
    colocate = launch_commands("grpo", GRPOStageConfig(use_cpu=False, use_vllm=True), "d", "o")
    assert [c.role for c in colocate] == ["train"]
    with pytest.raises(ValueError, match="stage"):
        launch_commands("dpo", SFTStageConfig(use_cpu=False), "d", "o")


# --------------------------------------------------------------------------- lineage and curves


def _release(root: Path, rows: int = 1, card: bool = False) -> Path:
    from data.card import render_card
    from data.schema import SFT_SCHEMA

    row = {"messages": [{"role": "user", "content": "hi", "tool_calls": None, "tool_call_id": None, "name": None},
                        {"role": "assistant", "content": "ok", "tool_calls": None, "tool_call_id": None,
                         "name": None}],
           "tools": "[]", "task_id": "t", "trajectory_id": "tr", "world": "airline", "method": "m", "model": "s",
           "trial": 0, "score": 1.0, "split": "train"}
    with store.DatasetWriter(root / "releases", "sft", "sft", SFT_SCHEMA, 1) as w:
        w.write_rows([row] * rows)
        text = render_card("sft", w.version, "rows", SFT_SCHEMA, rows, {}, {}) if card else ""
        return w.commit(store.Lineage(), card=text)


def test_runs_on_release_lists_the_runs_trained_on_it(tmp_path: Path) -> None:
    from train.lineage import read_run, runs_on_release, runs_table, write_run_record

    rel_a, rel_b = _release(tmp_path, 1), _release(tmp_path, 2)
    ma, mb = store.read_manifest(rel_a), store.read_manifest(rel_b)
    train = tmp_path / "train"
    write_run_record(train / "sft-1", "sft", rel_a, ma, {"lr": 1})
    write_run_record(train / "sft-1", "sft", rel_a, ma, {"lr": 1}, status="done", steps=5, final_loss=1.25)
    write_run_record(train / "grpo-2", "grpo", rel_b, mb, {})
    (train / "junk").mkdir()
    (train / "junk" / "run.json").write_text("{not json")
    runs = runs_on_release(rel_a)
    assert [Path(r["run_dir"]).name for r in runs] == ["sft-1"]
    assert runs[0]["status"] == "done" and runs[0]["release"]["version"] == ma.version and runs[0]["code_version"]
    assert read_run(train / "sft-1")["started_at"] <= runs[0]["finished_at"]
    assert "| sft-1 | sft | done | 5 | 1.25 |" in runs_table(runs)
    assert [Path(r["run_dir"]).name for r in runs_on_release(rel_b)] == ["grpo-2"]
    with pytest.raises(FileNotFoundError):
        read_run(tmp_path)


def test_release_card_lists_the_runs_trained_on_it(tmp_path: Path) -> None:
    from train.lineage import RUNS_SECTION, write_run_record

    rel = _release(tmp_path, 2, card=True)
    manifest = store.read_manifest(rel)
    before = (rel / "README.md").read_text()
    train = tmp_path / "train"
    write_run_record(train / "sft-1", "sft", rel, manifest, {})
    assert (rel / "README.md").read_text() == before  # a running run changes nothing yet
    write_run_record(train / "sft-1", "sft", rel, manifest, {}, status="done", steps=6, final_loss=0.5)
    card = (rel / "README.md").read_text()
    assert card.count(f"## {RUNS_SECTION}") == 1 and "| sft-1 | sft | done | 6 | 0.5 | - |" in card
    assert card.index(f"## {RUNS_SECTION}") < card.index("## Columns")  # the generated card keeps its order
    # an evaluation of the run and a second run (in another train folder) update the same section
    (train / "sft-1" / "eval-v9.json").write_text(json.dumps({
        "tasks": 4, "split": "test", "release": {"name": "rl", "version": "v9"},
        "base": {"pass_rate": 0.25}, "trained": {"pass_rate": 0.5}}))
    write_run_record(tmp_path / "elsewhere" / "grpo-2", "grpo", rel, manifest, {}, status="failed", error="boom")
    card = (rel / "README.md").read_text()
    assert card.count(f"## {RUNS_SECTION}") == 1
    assert "0.25 → 0.5 on 4 test tasks of rl v9" in card and "| grpo-2 | grpo | failed |" in card
    assert card.replace(card[card.index(f"## {RUNS_SECTION}"):card.index("## Columns")], "") == before
    # the data and manifest are untouched: the release still verifies, no temp files are left
    assert store.read_manifest(rel).files == manifest.files
    assert sorted(p.name for p in rel.iterdir()) == sorted(["README.md", "_SUCCESS", "data", "manifest.json"])


def test_runs_command_lists_runs_and_refreshes_the_card(tmp_path: Path) -> None:
    import subprocess
    import sys

    from train.lineage import RUNS_SECTION, write_run_record

    rel = _release(tmp_path, 1, card=True)
    path = tmp_path / "train" / "grpo-1" / "run.json"
    write_run_record(path.parent, "grpo", rel, store.read_manifest(rel), {}, status="done", steps=5, final_reward=0.25)
    (rel / "README.md").write_text((rel / "README.md").read_text().split(f"## {RUNS_SECTION}")[0])
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "runs", "--dataset", str(rel), "--out", str(tmp_path),
                          "--refresh-card"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(Path(r["run_dir"]).name, r["stage"], r["status"]) for r in listed] == [("grpo-1", "grpo", "done")]
    assert "| grpo-1 | grpo | done | 5 | 0.25 |" in (rel / "README.md").read_text()
    bad = subprocess.run([sys.executable, "-m", "pipelines.cli", "runs", "--dataset", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no dataset" in bad.stderr


def test_rewrite_card_refuses_an_incomplete_dataset(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()
    with pytest.raises(store.DatasetError, match="incomplete"):
        store.rewrite_card(tmp_path / "half", "# card")


def test_set_section_replaces_or_inserts() -> None:
    from data.card import set_section

    card = "# t\n\n## A\n\na\n\n## Columns\n\nc\n"
    once = set_section(card, "Runs", "r1")
    assert once == "# t\n\n## A\n\na\n\n## Runs\n\nr1\n\n## Columns\n\nc\n"
    assert set_section(once, "Runs", "r2") == once.replace("r1", "r2")
    assert set_section("# t\n", "Runs", "r") == "# t\n\n## Runs\n\nr\n\n"
    last = set_section("# t\n\n## Runs\n\nold\n", "Runs", "new")
    assert last == "# t\n\n## Runs\n\nnew\n\n"


def test_curves_from_metrics(tmp_path: Path) -> None:
    from train.curves import per_step, write_curves

    lines = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 2, "eval_loss": 1.7},
             {"step": 2, "train_runtime": 3.0, "loss": 9.0}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert per_step(lines, ["loss", "eval_loss"]) == [{"step": 1, "loss": 2.0},
                                                      {"step": 2, "loss": 1.5, "eval_loss": 1.7}]
    out = write_curves(tmp_path, ["loss", "eval_loss"], "t")
    assert Path(out["csv"]).read_text().splitlines() == ["step,loss,eval_loss", "1,2.0,", "2,1.5,1.7"]
    assert Path(out["png"]).stat().st_size > 1000
