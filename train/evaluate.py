"""Before/after evaluation: base and trained model on a release's held-out tasks.

Both models play the release's `test` tasks through the rollout engine
(`rollout.collector.collect`, the embedded backend with `ModelConfig.path`, scripted user,
the same sampling for both), and each trajectory is judged by its task's primary verifier
(`verifiers.base.primary_verifier`: by default the composite verdict over the task's reward
basis — outcome, what the user was told, the policy's process). Reported per model: pass rate, mean score, terminations, tool
errors; and the difference trained − base.

Where the tasks come from: an `rl` release carries each task's JSON (`task` column); for
an `sft` or `sft_recovery` release the task ids of its rows are looked up in the `tasks` dataset named in
its lineage (`manifest.lineage.parents`).

Benchmarks (`evaluate_benchmark`): ``tau2:<domain>`` plays τ²-bench's own tasks of a split
(`test` by default) in the τ² world of that domain through the same rollout engine and
backends (the embedded model, a model folder, any OpenAI-compatible server, or the scripted
policy), `trials` times each, and judges every trajectory with τ²'s evaluator
(`verifiers.tau2_reward`); it reports pass^k for k = 1..trials as τ²'s leaderboard does (the
mean over tasks of C(c, k) / C(n, k)), and trajforge's own composite verdict beside it. The
user is trajforge's (scripted, or an LLM user) or, with ``tau2_user``, τ²'s own user simulator
(`Tau2User`: τ²'s prompt and scenario, through litellm to the configured OpenAI-compatible model).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data import store
from data.atomic import atomic_open
from data.records import Sampling, Task, Trajectory, Verdict
from data.report import pass_hat_k
from rollout.agent import AgentConfig
from rollout.backends import close_shared_models
from rollout.collector import ModelConfig, RolloutConfig, UserConfig, collect
from train.environments import as_task
from train.lineage import keep_beside_run
from verifiers.base import get_verifier, primary_verifier

# the whole verdict: outcome, what the user was told, and the policy's process (the eval has a user)
DEFAULT_VERIFIERS = ["composite"]


def spread_over_worlds(tasks: Sequence[Task], n: int | None) -> list[Task]:
    """The first `n` of `tasks` taken in turn from each world (worlds in order of first
    appearance, each world's tasks in their order), so a cap keeps every world; a release
    lists its tasks world by world, and its first `n` would be one world's. All when `n` is None."""
    if n is None or n >= len(tasks):
        return list(tasks)
    by_world: dict[str, list[Task]] = {}
    for task in tasks:
        by_world.setdefault(task.world, []).append(task)
    picked: list[Task] = []
    for rank in range(max(len(v) for v in by_world.values())):
        picked.extend(v[rank] for v in by_world.values() if rank < len(v))
    return picked[:n]


def release_tasks(release: Path | str, split: str = "test") -> list[Task]:
    """The tasks of a release's `split` (rl: from the `task` column; sft and sft_recovery: via
    lineage)."""
    from train.data import is_sft_kind, load_release

    manifest = store.read_manifest(release)
    ds = load_release(release, split)
    if manifest.kind == "rl":
        seen: dict[str, Task] = {}
        for value in ds["task"]:
            task = as_task(value)
            seen.setdefault(task.id, task)
        return list(seen.values())
    if is_sft_kind(manifest.kind):
        ids = list(dict.fromkeys(ds["task_id"]))
        for parent in _lineage_datasets(Path(release)):
            if store.read_manifest(parent, verify=False).kind == "tasks":
                by_id = {t.id: t for t in store.read_records(parent, "tasks")}
                missing = [i for i in ids if i not in by_id]
                if missing:
                    raise store.DatasetError(f"{parent} lacks {len(missing)} task(s) of {release}, e.g. {missing[0]}")
                return [by_id[i] for i in ids]
        raise store.DatasetError(f"{release}: no tasks dataset in its lineage; evaluate on the rl release instead")
    raise store.DatasetError(f"{release} is a {manifest.kind!r} dataset; evaluation needs an rl or sft release")


def _lineage_datasets(path: Path, depth: int = 3) -> list[Path]:
    """Committed datasets named in `path`'s lineage, breadth first, up to `depth` levels."""
    out: list[Path] = []
    frontier = [path]
    for _ in range(depth):
        nxt = []
        for p in frontier:
            for parent in store.read_manifest(p, verify=False).lineage.parents:
                q = Path(parent)
                if q not in out and (q / store.SUCCESS).exists():
                    out.append(q)
                    nxt.append(q)
        frontier = nxt
    return out


# Tokens a turn may take when judging: held-out reference turns run to ~120 tokens, so a
# budget of 128 could cut a right answer short.
EVAL_MAX_TOKENS = 256


def greedy(max_tokens: int = EVAL_MAX_TOKENS) -> Sampling:
    """The sampling episodes are judged with: greedy, `max_tokens` a turn."""
    return Sampling(temperature=0.0, max_tokens=max_tokens, seed=0)


def judge(task: Task, trajectory: Trajectory, verifiers: list[str]) -> Verdict:
    return get_verifier(primary_verifier(task, verifiers)).verify(task, trajectory)


class EvaluationFailed(RuntimeError):
    """Episodes ended on infrastructure (`Trajectory.infra_failed`): the evaluation judged
    nothing and keeps nothing, since a pass rate over the rest would be a different figure."""


def _rollouts(tasks: list[Task], cfg: RolloutConfig) -> list[Trajectory]:
    """The tasks' trajectories under `cfg`, the process-wide models stopped afterwards."""
    try:
        return collect(tasks, cfg)
    finally:
        close_shared_models()


def check_no_infra_failure(trajectories: list[Trajectory], what: str) -> None:
    """Raise `EvaluationFailed` when any episode ended on infrastructure (the model backend
    or the user's model failed for good), naming how many and the first reason."""
    failed = [t for t in trajectories if t.infra_failed]
    if failed:
        first = failed[0].metadata
        reason = first.get("model_error_reason") or first.get("user_error_reason") or failed[0].termination
        detail = first.get("model_error") or first.get("user_error") or ""
        raise EvaluationFailed(
            f"{what}: {len(failed)} of {len(trajectories)} episodes ended on infrastructure ({reason}: "
            f"{str(detail)[:200]}); nothing was judged or kept, run it again once the backend works")


def keep_episodes(path: Path, trajectories: list[Trajectory], verdicts: list[Verdict]) -> None:
    """Write the judged episodes to `path` as JSON lines, one `{"verdict", "trajectory"}` an
    episode (read them back with `read_episodes`): what a pass rate was computed from, so a
    reader can see why an episode failed. Atomic: a killed write leaves no partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as fh:
        for traj, verdict in zip(trajectories, verdicts, strict=True):
            fh.write(json.dumps({"verdict": verdict.model_dump(mode="json"),
                                 "trajectory": traj.model_dump(mode="json")}) + "\n")


def episodes_file(run_dir: Path, release_version: str, side: str) -> Path:
    """Where an evaluation beside a run keeps one side's judged episodes (`keep_episodes`)."""
    return run_dir / f"episodes-{release_version}-{side}.jsonl"


def read_episodes(path: Path | str) -> list[tuple[Trajectory, Verdict]]:
    """The episodes `keep_episodes` wrote, as records."""
    out = []
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        out.append((Trajectory.model_validate(row["trajectory"]), Verdict.model_validate(row["verdict"])))
    return out


def check_model_folder(folder: str | None) -> None:
    """A model folder to evaluate exists (None and "embedded" name the prepared base model)."""
    if folder not in (None, "embedded") and not Path(folder).expanduser().is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")


def evaluate_model(tasks: list[Task], model_path: str | None, trials: int = 1, sampling: Sampling | None = None,
                   max_turns: int = 12, verifiers: list[str] | None = None, max_batch: int = 8,
                   keep: Path | None = None) -> dict[str, Any]:
    """Roll out `tasks` with the embedded backend on `model_path` (None: the prepared base
    model) and judge each trajectory; returns pass rate, mean score and per-task results.
    With `keep`, the trajectories and their verdicts are also written there (`keep_episodes`)."""
    if not tasks:
        raise ValueError("no tasks to evaluate")
    names = list(verifiers or DEFAULT_VERIFIERS)
    check_model_folder(model_path)
    cfg = RolloutConfig(
        model=ModelConfig(kind="embedded", options={
            "path": str(Path(model_path).expanduser()) if model_path else None, "max_batch": max_batch}),
        trials=trials, sampling=sampling or greedy(),
        agent=AgentConfig(max_turns=max_turns))
    started = time.monotonic()
    trajectories = _rollouts(tasks, cfg)
    check_no_infra_failure(trajectories, f"evaluating {model_path or 'embedded'}")
    by_id = {t.id: t for t in tasks}
    verdicts = [judge(by_id[t.task_id], t, names) for t in trajectories]
    if keep is not None:
        keep_episodes(keep, trajectories, verdicts)
    per_task: dict[str, dict[str, Any]] = {}
    for traj, v in zip(trajectories, verdicts, strict=True):
        row = per_task.setdefault(traj.task_id, {"task_id": traj.task_id, "world": by_id[traj.task_id].world,
                                                 "verifier": v.verifier, "passed": 0, "trials": 0, "scores": []})
        row["passed"] += v.passed
        row["trials"] += 1
        row["scores"].append(round(v.score, 4))
    n = len(verdicts)
    return {
        "model": model_path or "embedded",
        "tasks": len(tasks), "trajectories": n,
        "pass_rate": round(sum(v.passed for v in verdicts) / n, 4),
        "mean_score": round(sum(v.score for v in verdicts) / n, 4),
        "terminations": dict(Counter(t.termination for t in trajectories)),
        "tool_calls_per_episode": round(sum(len(t.actions()) for t in trajectories) / n, 3),
        "tool_errors": dict(sum((Counter(t.error_counts) for t in trajectories), Counter())),
        "wall_s": round(time.monotonic() - started, 2),
        "per_task": list(per_task.values()),
        **({"episodes_file": str(keep)} if keep is not None else {}),
    }


# -- benchmarks ------------------------------------------------------------------------------------

BENCHMARKS = ("tau2",)
QUICK_TASKS = 3  # `--quick`: the first tasks of the split, one trial each


def parse_benchmark(benchmark: str) -> tuple[str, str]:
    """``tau2:airline`` as ("tau2", "airline"); a `ValueError` naming what is known otherwise."""
    name, _, domain = benchmark.partition(":")
    if name not in BENCHMARKS or not domain:
        raise ValueError(f"unknown benchmark {benchmark!r}; known: tau2:<domain> (e.g. tau2:airline)")
    from envs.tau2_world import DOMAINS, available

    if not available():
        raise ValueError("benchmark tau2 needs the tau2 extra: pip install -e '.[tau2]'")
    if domain not in DOMAINS:
        raise ValueError(f"benchmark tau2: unknown domain {domain!r}; known: {', '.join(DOMAINS)}")
    return name, domain


def benchmark_tasks(benchmark: str, split: str = "test", max_tasks: int | None = None) -> tuple[list[Task], int]:
    """The benchmark's tasks of `split` as trajforge tasks of its world, in τ²'s order (the
    first `max_tasks`), and how many were left out (dual control: the user has tools)."""
    from envs.registry import get_world
    from envs.tau2_world import task_from_tau2, tau2_tasks

    _, domain = parse_benchmark(benchmark)
    world = get_world(f"tau2_{domain}")
    out: list[Task] = []
    dropped = 0
    for t2 in tau2_tasks(domain, split):
        if max_tasks is not None and len(out) >= max_tasks:
            break
        try:
            out.append(task_from_tau2(world, t2, split=split))  # type: ignore[arg-type]
        except ValueError:
            dropped += 1
    return out, dropped


def pass_hat(counts: list[tuple[int, int]], trials: int) -> dict[str, float]:
    """τ²'s pass^k for k = 1..`trials` over (successes c, trials n) per task: the mean over
    tasks of C(c, k) / C(n, k)."""
    return {str(k): round(v, 4) for k, v in pass_hat_k(counts, range(1, trials + 1)).items()}


def evaluate_benchmark(benchmark: str, model: ModelConfig, split: str = "test", trials: int = 1,
                       max_tasks: int | None = None, user: UserConfig | None = None, max_turns: int = 30,
                       sampling: Sampling | None = None, concurrency: int = 4,
                       tau2_user: bool = False) -> dict[str, Any]:
    """Play a benchmark's tasks of `split` (`benchmark_tasks`) `trials` times with `model`
    against `user` (default: the scripted user) and judge each trajectory by τ²'s evaluator
    (`tau2_reward`); also by trajforge's composite verdict. With `tau2_user`, τ²'s own user
    simulator plays the user (`Tau2User`), served by `user.model` (else the agent's `model`),
    which must be an OpenAI-compatible endpoint (kind ``openai``). Returns pass^k
    (k = 1..trials), the mean τ² reward, per-task results, terminations, wall time and
    seconds per task."""
    from verifiers.tau2_reward import tau2_reward

    user = user or UserConfig()
    user_model = (user.model or model) if tau2_user else None
    if user_model is not None:
        litellm_target(user_model, user.sampling)  # refuses a backend τ²'s simulator cannot call
        user = user.model_copy(update={"kind": "scripted", "model": None})  # not LLMUser's model: τ²'s user has it
    tasks, dropped = benchmark_tasks(benchmark, split, max_tasks)
    if not tasks:
        raise ValueError(f"{benchmark}: the {split!r} split has no tasks")
    cfg = RolloutConfig(model=model, trials=trials, concurrency=concurrency, user=user,
                        sampling=sampling or greedy(),
                        agent=AgentConfig(max_turns=max_turns))
    started = time.monotonic()
    trajectories = _rollouts(tasks, cfg) if user_model is None else _tau2_user_rollouts(tasks, cfg, user_model)
    rolled = time.monotonic() - started
    check_no_infra_failure(trajectories, f"{benchmark} with {model.name or model.kind}")
    by_id = {t.id: t for t in tasks}
    per_task: dict[str, dict[str, Any]] = {}
    rewards: list[float] = []
    ours = 0
    for traj in trajectories:
        task = by_id[traj.task_id]
        reward = tau2_reward(task, traj.messages, traj.termination)
        verdict = judge(task, traj, DEFAULT_VERIFIERS)
        rewards.append(reward.reward)
        ours += verdict.passed
        row = per_task.setdefault(traj.task_id, {
            "task_id": traj.task_id, "tau2_task_id": str(task.metadata["tau2_task"]["id"]),
            "passed": 0, "trials": 0, "rewards": [], "trajforge_passed": 0, "terminations": []})
        row["passed"] += reward.passed
        row["trials"] += 1
        row["rewards"].append(round(reward.reward, 4))
        row["trajforge_passed"] += verdict.passed
        row["terminations"].append(traj.termination)
    wall = time.monotonic() - started
    n = len(trajectories)
    return {
        "benchmark": benchmark, "split": split, "evaluator": "tau2 evaluate_simulation (NL assertions left out)",
        "model": model.model_dump(mode="json", include={"kind", "name", "options"}),
        "user": "tau2" if user_model is not None else user.kind, "tasks": len(tasks), "dual_control_left_out": dropped,
        **({"user_model": user_model.model_dump(mode="json", include={"kind", "name"})} if user_model else {}),
        "trials": trials, "trajectories": n,
        "pass_hat_k": pass_hat([(r["passed"], r["trials"]) for r in per_task.values()], trials),
        "mean_reward": round(sum(rewards) / n, 4),
        "trajforge_pass_rate": round(ours / n, 4),
        "terminations": dict(Counter(t.termination for t in trajectories)),
        "usage": {"model_calls": sum(t.usage.model_calls for t in trajectories),
                  "prompt_tokens": sum(t.usage.prompt_tokens for t in trajectories),
                  "completion_tokens": sum(t.usage.completion_tokens for t in trajectories)},
        "rollout_s": round(rolled, 2), "wall_s": round(wall, 2),
        "seconds_per_task": round(wall / len(tasks), 2),
        "per_task": list(per_task.values()),
        "code_version": store.code_version(),
    }


# -- τ²'s own user simulator -----------------------------------------------------------------------

TAU2_AGENT_GREETING = "Hi! How can I help you today?"  # τ²'s orchestrator's first agent message


def litellm_target(model: ModelConfig, sampling: Sampling) -> tuple[str, dict[str, Any]]:
    """τ²'s `generate` (litellm) arguments for an OpenAI-compatible `model` of trajforge's
    config: ``openai/<name>`` and its endpoint, key (from its ``api_key_env``, a placeholder
    when unset: local servers take any) and sampling."""
    import os

    if model.kind != "openai":
        raise ValueError(f"τ²'s user simulator calls an OpenAI-compatible endpoint through litellm; "
                         f"the user model is kind {model.kind!r} (configure kind: openai with its base_url)")
    opts = model.backend_options()
    base = (opts.base_urls or [opts.base_url])[0]
    args: dict[str, Any] = {"api_base": base, "api_key": os.environ.get(opts.api_key_env) or "EMPTY",
                            "temperature": sampling.temperature, "num_retries": opts.max_retries,
                            "timeout": opts.timeout_s}
    if sampling.max_tokens:
        args["max_tokens"] = sampling.max_tokens
    if sampling.seed is not None:
        args["seed"] = sampling.seed
    return f"openai/{model.name}", args


class Tau2User:
    """τ²-bench's own user simulator (`tau2.user.user_simulator.UserSimulator`: τ²'s system
    prompt and guidelines around the τ² task's user scenario, called through litellm) behind
    trajforge's user protocol: its opening answers τ²'s agent greeting, each reply answers the
    agent's last message; τ²'s ``###STOP###``/``###TRANSFER###``/``###OUT-OF-SCOPE###`` are
    trajforge's markers. After `max_turns` replies it stops."""

    def __init__(self, task: Task, model: ModelConfig, sampling: Sampling, max_turns: int = 10) -> None:
        from tau2.user.user_simulator import UserSimulator

        from verifiers.tau2_reward import tau2_task

        llm, args = litellm_target(model, sampling)
        self.task = task
        self.sim = UserSimulator(tools=None, instructions=str(tau2_task(task).user_scenario), llm=llm, llm_args=args)
        self.state = self.sim.get_init_state()
        self.max_turns = max_turns
        self.replies = 0
        self._first: str | None = None

    def first_message(self) -> str:
        return self._first or self.task.instruction

    async def opening(self) -> str:
        self._first = await self._say(TAU2_AGENT_GREETING)
        return self._first

    async def respond(self, messages: list[dict[str, Any]]) -> str:
        from rollout.user import STOP

        if self.replies >= self.max_turns:
            return STOP
        last = next((m for m in reversed(messages) if m.get("role") == "assistant" and not m.get("tool_calls")), None)
        return await self._say(str((last or {}).get("content") or ""))

    async def _say(self, agent_text: str) -> str:
        import asyncio

        from tau2.data_model.message import AssistantMessage

        from rollout.user import UserError

        try:
            reply, self.state = await asyncio.to_thread(
                self.sim.generate_next_message, AssistantMessage(role="assistant", content=agent_text), self.state)
        except Exception as exc:  # litellm's errors: the user's backend failed
            raise UserError(f"τ²'s user simulator: {type(exc).__name__}: {exc}"[:300], "model_error") from exc
        self.replies += 1
        if reply.tool_calls:
            raise UserError("τ²'s user simulator called a tool (dual control is not supported)", "tool_call")
        if not (reply.content or "").strip():
            raise UserError("τ²'s user simulator said nothing", "empty")
        return str(reply.content)


def _tau2_user_rollouts(tasks: list[Task], cfg: RolloutConfig, user_model: ModelConfig) -> list[Trajectory]:
    """Every trial of every task with τ²'s user simulator (`Tau2User`) served by `user_model`,
    `cfg.concurrency` episodes at once; the agent's model as `cfg.model` builds it."""
    import asyncio

    from envs.registry import get_world
    from rollout.agent import run_episode
    from rollout.collector import build_model_for, trial_sampling

    async def main() -> list[Trajectory]:
        model_for, owned = build_model_for(cfg.model)
        sem = asyncio.Semaphore(max(1, cfg.concurrency))

        async def one(task: Task, trial: int) -> Trajectory:
            async with sem:
                user = Tau2User(task, user_model, trial_sampling(cfg.user.sampling, trial), cfg.user.max_turns)
                return await run_episode(task, get_world(task.world), model_for(task), user,
                                         trial_sampling(cfg.sampling, trial), trial, cfg.agent)

        try:
            return list(await asyncio.gather(*(one(t, k) for t in tasks for k in range(cfg.trials))))
        finally:
            if owned is not None:
                await owned.aclose()

    try:
        return asyncio.run(main())
    finally:
        close_shared_models()


def benchmark_file(benchmark: str, split: str) -> str:
    """The file a benchmark result is kept in beside a training run (`benchmark-<name>-<domain>-<split>.json`)."""
    return f"benchmark-{benchmark.replace(':', '-')}-{split}.json"


def record_benchmark(result: dict[str, Any], model_path: str | Path | None) -> dict[str, Any]:
    """When `model_path` is a training run's model (its folder, or the folder's parent, holds `run.json`),
    write `result` there (`benchmark_file`) and refresh the "Training runs" section of the
    card of the release the run trained on. Returns `result`, with `written_to` when written."""
    if model_path is None:
        return result
    folder = Path(model_path).expanduser()
    run_dir = next((d for d in (folder.parent, folder) if (d / "run.json").is_file()), None)
    if run_dir is None:
        return result
    return keep_beside_run(result, run_dir, benchmark_file(result["benchmark"], result["split"]))
