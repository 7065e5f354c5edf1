"""Before/after evaluation (`train.evaluate`): a release's held-out tasks (through the
lineage for an sft release), and both models judged on them (slow)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from data import store
from train.data import load_release


def test_release_tasks_for_evaluation(releases: dict[str, Path]) -> None:
    from train.evaluate import release_tasks

    rl_test = release_tasks(releases["rl"], "test")
    sft_test = release_tasks(releases["sft"], "test")  # task ids looked up through the lineage
    assert all(t.split == "test" for t in rl_test + sft_test) and sft_test
    assert {t.id for t in sft_test} == set(load_release(releases["sft"], "test")["task_id"])
    with pytest.raises(store.DatasetError):
        release_tasks(releases["rl"].parent, "test")


@pytest.mark.slow
def test_trajforge_eval_on_a_release_judges_both_models_with_intervals(releases: dict[str, Path],
                                                                       tiny_model: Path) -> None:
    """`trajforge eval --dataset`: the eval flow (`train.value.evaluate_pair`) through Prefect,
    next-action accuracy and pass rate with intervals, in the printed table and the JSON line."""
    from typer.testing import CliRunner

    from pipelines import cli

    args = ["eval", "--dataset", str(releases["sft"]), "--model", str(tiny_model), "--base", str(tiny_model),
            "--max-turns", "1", "--max-tasks", "1"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["tasks"] == out["dialogues"] == 1 and out["settings"]["next_action"] is True
    for side in ("base", "trained"):
        assert out[side]["episodes"]["trajectories"] == 1 and out[side]["next_action"]["turns"] > 0
        assert out[side]["episodes"]["per_task"][0]["verifier"] == "composite"
    # the same weights on both sides, greedy: no difference
    assert out["delta"]["pass_rate"]["mean"] == out["delta"]["next_action"]["mean"] == 0.0
    assert "next-action accuracy" in result.stdout and "trained − base" in result.stdout
    skip = CliRunner().invoke(cli.app, [*args, "--no-next-action"])
    assert skip.exit_code == 0, (skip.output, skip.exception)
    out = json.loads(skip.stdout.strip().splitlines()[-1])
    assert "next_action" not in out["trained"] and out["dialogues"] == 0
    from train.value import evaluate_pair

    with pytest.raises(FileNotFoundError, match="does not exist"):  # before anything is judged
        evaluate_pair(releases["sft"], str(tiny_model), base="/nonexistent/model")


def test_release_tasks_of_an_sft_recovery_release(releases: dict[str, Path]) -> None:
    """An `sft_recovery` release names its tasks as `sft` does: looked up through its lineage."""
    from train.evaluate import release_tasks

    tasks = release_tasks(releases["sft_recovery"], "train")
    assert tasks and {t.id for t in tasks} == set(load_release(releases["sft_recovery"], "train")["task_id"])


def test_pass_hat_k_is_taus_leaderboard_figure() -> None:
    """pass^k = mean over tasks of C(c, k) / C(n, k), c successes of n trials (τ²-bench)."""
    from train.evaluate import pass_hat

    assert pass_hat([(4, 4), (2, 4), (0, 4)], 4) == {"1": 0.5, "2": 0.3889, "3": 0.3333, "4": 0.3333}
    assert pass_hat([(1, 1), (0, 1)], 1) == {"1": 0.5}
    assert pass_hat([(3, 4)], 2) == {"1": 0.75, "2": 0.5}  # C(3,2)/C(4,2) = 3/6


def test_benchmark_names_are_checked() -> None:
    from train.evaluate import parse_benchmark

    with pytest.raises(ValueError, match="unknown benchmark 'swe:lite'"):
        parse_benchmark("swe:lite")
    with pytest.raises(ValueError, match="unknown benchmark 'tau2'"):
        parse_benchmark("tau2")


@pytest.mark.slow  # a τ² or whole-flow integration test: make test runs it, the fast tier does not
def test_the_tau2_benchmark_with_the_scripted_policy_scores_one() -> None:
    """τ²'s test tasks played by the scripted policy (it follows τ²'s gold actions) against
    the scripted user, judged by τ²'s evaluator: reward 1.0 on every trial, so pass^k = 1."""
    pytest.importorskip("tau2")
    from rollout.collector import ModelConfig
    from train.evaluate import benchmark_tasks, evaluate_benchmark

    tasks, dropped = benchmark_tasks("tau2:airline", "test", max_tasks=2)
    assert len(tasks) == 2 and dropped == 0 and all(t.split == "test" and t.world == "tau2_airline" for t in tasks)
    r = evaluate_benchmark("tau2:airline", ModelConfig(kind="scripted", name="scripted"), trials=2, max_tasks=2)
    assert (r["tasks"], r["trials"], r["trajectories"], r["user"]) == (2, 2, 4, "scripted")
    assert r["pass_hat_k"] == {"1": 1.0, "2": 1.0} and r["mean_reward"] == 1.0
    assert [p["tau2_task_id"] for p in r["per_task"]] == [str(t.metadata["tau2_task"]["id"]) for t in tasks]
    assert all(p["rewards"] == [1.0, 1.0] for p in r["per_task"]) and r["seconds_per_task"] > 0


@pytest.mark.slow
def test_the_tau2_benchmark_runs_end_to_end_on_the_embedded_model() -> None:
    """`trajforge eval --benchmark tau2:airline --quick` on one task: the embedded 135M model on
    τ²'s policy prompt (about 130 s a task on 2 shared CPU cores)."""
    pytest.importorskip("tau2")
    from rollout.collector import ModelConfig
    from train.evaluate import evaluate_benchmark

    r = evaluate_benchmark("tau2:airline", ModelConfig(), trials=1, max_tasks=1, max_turns=4)
    assert r["tasks"] == 1 and r["trajectories"] == 1
    assert set(r["pass_hat_k"]) == {"1"} and r["usage"]["model_calls"] >= 1


@pytest.mark.slow  # a τ² integration test: τ²'s evaluator and database
def test_the_tau2_benchmark_with_taus_own_user_simulator() -> None:
    """τ²'s own user simulator (litellm to an OpenAI-compatible endpoint: the loopback fake
    server) plays the user of a τ² test task against the scripted policy: τ²'s user prompt
    with the task's scenario goes to the configured model, its opening starts the
    conversation and its ###STOP### ends it; τ²'s evaluator scores the gold 1.0."""
    pytest.importorskip("tau2")
    from rollout.collector import ModelConfig, UserConfig
    from tests.fakes.openai_server import FakeOpenAIServer, text_reply
    from train.evaluate import benchmark_tasks, evaluate_benchmark, litellm_target

    replies = [text_reply("Hi, I need help with my reservation."), text_reply("Thanks, that is all. ###STOP###")]
    with FakeOpenAIServer(replies) as server:
        served = ModelConfig(kind="openai", name="fake-user", options={"base_url": server.base_url,
                                                                        "max_retries": 0})
        r = evaluate_benchmark("tau2:airline", ModelConfig(kind="scripted", name="scripted"), max_tasks=1,
                               user=UserConfig(model=served), tau2_user=True)
        sent = server.chat_requests
    assert r["user"] == "tau2" and r["user_model"] == {"kind": "openai", "name": "fake-user"}
    assert r["mean_reward"] == 1.0 and r["terminations"] == {"user_stop": 1}, r["terminations"]
    assert len(sent) == 2 and all(b["model"] == "fake-user" for b in sent)
    task = benchmark_tasks("tau2:airline", "test", max_tasks=1)[0][0]
    system = sent[0]["messages"][0]["content"]
    assert sent[0]["messages"][0]["role"] == "system" and task.user.reason[:40] in system  # τ²'s scenario
    assert sent[0]["messages"][-1]["content"] == "Hi! How can I help you today?"  # τ²'s greeting, as τ²'s user sees it
    assert sent[1]["messages"][-1]["content"] == "Your request is complete."  # the agent's closing
    with pytest.raises(ValueError, match="OpenAI-compatible"):
        litellm_target(ModelConfig(), UserConfig().sampling)  # the embedded model has no endpoint


def test_a_cap_on_held_out_tasks_takes_each_world_in_turn() -> None:
    """A release lists its tasks world by world: its first n would all be one world's."""
    from types import SimpleNamespace

    from train.evaluate import spread_over_worlds

    tasks = [SimpleNamespace(id=f"{w}{i}", world=w) for w, n in (("airline", 5), ("retail", 2)) for i in range(n)]
    ids = [t.id for t in spread_over_worlds(tasks, 5)]  # type: ignore[arg-type]
    assert ids == ["airline0", "retail0", "airline1", "retail1", "airline2"]
    assert [t.id for t in spread_over_worlds(tasks, None)] == [t.id for t in tasks]  # type: ignore[arg-type]
    assert [t.id for t in spread_over_worlds(tasks, 7)] == [t.id for t in tasks]  # type: ignore[arg-type]
    assert [t.id for t in spread_over_worlds(tasks, 0)] == []  # type: ignore[arg-type]


def test_judged_episodes_are_kept_with_their_verdicts(releases: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`evaluate_model(keep=...)` writes each episode it judged beside the figures, and the
    file agrees with them: a reader can open the episodes a pass rate was computed from."""
    from data.records import Trajectory
    from train import evaluate

    tasks = evaluate.release_tasks(releases["rl"], "test")[:2]
    said = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "I cannot help with that."}]
    monkeypatch.setattr(evaluate, "_rollouts", lambda ts, cfg: [
        Trajectory(task_id=t.id, trial=0, model="m", messages=said, termination="agent_stop") for t in ts])
    monkeypatch.setattr(evaluate.Path, "is_dir", lambda self: True)
    path = tmp_path / "episodes.jsonl"
    r = evaluate.evaluate_model(tasks, "some/model", keep=path)
    kept = evaluate.read_episodes(r["episodes_file"])
    assert [t.task_id for t, _ in kept] == [t.id for t in tasks] == [row["task_id"] for row in r["per_task"]]
    assert [int(v.passed) for _, v in kept] == [row["passed"] for row in r["per_task"]]
    assert all(v.task_id == t.task_id and t.messages == said for t, v in kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.jsonl"]  # no partial file left


def test_an_episode_that_ended_on_infrastructure_fails_the_evaluation(releases: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that failed for good is no verdict on the model: the evaluation says so and
    keeps nothing; a conversation that outgrew the context is the model's doing and is judged."""
    from data.records import Trajectory
    from train import evaluate

    tasks = evaluate.release_tasks(releases["rl"], "test")[:2]
    endings = iter([("model_error", {"model_error": "embedded model worker crashed: OOM",
                                     "model_error_reason": "backend"}), ("context_exhausted", {})] * 2)

    def rollouts(ts: list[Any], cfg: Any) -> list[Trajectory]:
        return [Trajectory(task_id=t.id, trial=0, model="m", termination=end, metadata=meta)
                for t, (end, meta) in zip(ts, endings, strict=False)]

    monkeypatch.setattr(evaluate, "_rollouts", rollouts)
    monkeypatch.setattr(evaluate.Path, "is_dir", lambda self: True)
    with pytest.raises(evaluate.EvaluationFailed, match=r"1 of 2 episodes ended on infrastructure \(backend: "
                                                         r"embedded model worker crashed"):
        evaluate.evaluate_model(tasks, "some/model", keep=tmp_path / "episodes.jsonl")
    assert not list(tmp_path.iterdir())  # nothing kept
    monkeypatch.setattr(evaluate, "_rollouts", lambda ts, cfg: [
        Trajectory(task_id=t.id, trial=0, model="m", termination="context_exhausted") for t in ts])
    r = evaluate.evaluate_model(tasks, "some/model")
    assert r["terminations"] == {"context_exhausted": 2} and r["pass_rate"] == 0.0
