"""The training commands: `train` (TRL SFT or GRPO on a release), `eval` (before/after on a
release's held-out tasks, or one model on a benchmark: τ²-bench's tasks), `runs` (the training
runs on a release) and `self-play`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from pipelines import cli  # the package, looked up at each call (tests patch `cli._flows`)


@cli.app.command()
def train(
    kind: Annotated[str, typer.Argument(help="sft or grpo")],
    dataset: Annotated[Path | None, typer.Option(
        help="Release folder: sft or sft_recovery for sft, rl for grpo (default: latest DIR/releases/<sft|rl>).")] = None,
    config: cli.ConfigOpt = None,
    out: cli.OutOpt = Path("out"),
    max_steps: Annotated[int | None, typer.Option(help="Optimizer steps.")] = None,
    set_: cli.SetOpt = None,
) -> None:
    """Train on a release with TRL (SFT on `sft` or `sft_recovery`, GRPO on `rl`)."""
    from data import store
    from data.schema import SFT_KINDS
    from pipelines import stages

    if kind not in ("sft", "grpo"):
        raise cli.UserError(f"unknown training kind {kind!r}: use `trajforge train sft` or `trajforge train grpo`")
    cfg = cli._config(config, set_)
    cli._dataset(dataset, SFT_KINDS if kind == "sft" else ("rl",), "--dataset")
    cli._writable(out)
    if dataset is None:
        dataset = stages.latest_release(out, "sft" if kind == "sft" else "rl")
        if dataset is None:
            cli._fail(FileNotFoundError(f"no release under {out / 'releases'}; run `trajforge run` first or pass --dataset"))
    run_dir = out / "train" / f"{kind}-{store.new_version()}"
    try:
        with cli._SIGNALS.installed(resumes=False):  # SIGTERM or Ctrl-C ends it within seconds
            result = cli._flows().train_flow(kind, str(dataset), cfg, str(run_dir), max_steps,
                                             show_progress=sys.stderr.isatty())
    except (store.DatasetError, RuntimeError, ValueError) as exc:
        cli._fail(exc)
    print(json.dumps(result, default=str))


def _figure(side: dict[str, Any], part: str, key: str) -> str:
    if part not in side:
        return "-"
    lo, hi = side[part]["interval"]["ci95"]
    return f"{side[part][key]:.3f} ({lo:.3f} … {hi:.3f})"


def _pair_table(result: dict[str, Any]) -> Table:
    """`train.value.evaluate_pair`'s result: each model's figures with their 95% intervals,
    and the paired difference; the models are named in the caption."""
    table = Table(title=f"eval on {result['release']['name']} {result['release']['version']} ({result['split']}): "
                        f"{result['tasks']} tasks, {result['dialogues']} reference dialogues",
                  caption=f"base: {result['base']['model']}\ntrained: {result['trained']['model']}")
    for col in ("", "next-action accuracy (95% CI)", "episode pass rate (95% CI)"):
        table.add_column(col)
    for label in ("base", "trained"):
        r = result[label]
        table.add_row(label, _figure(r, "next_action", "accuracy"), _figure(r, "episodes", "pass_rate"))
    cells = []
    for key in ("next_action", "pass_rate"):
        d = result["delta"].get(key)
        cells.append("-" if d is None else f"{d['mean']:+.3f} ({d['ci95'][0]:+.3f} … {d['ci95'][1]:+.3f})")
    table.add_row("trained − base", *cells)
    return table


@cli.app.command("eval")
def eval_(
    dataset: Annotated[Path | None, typer.Option(
        help="Release folder (rl, or sft / sft_recovery with tasks in its lineage).")] = None,
    model: Annotated[str | None, typer.Option(help=(
        "Trained model folder (e.g. out/train/sft-<version>/final). With --benchmark also 'embedded' (the "
        "default: the prepared base model) or 'scripted' (follows each task's reference); another backend "
        "(an OpenAI-compatible server) comes from --config's rollout.model."))] = None,
    base: Annotated[str, typer.Option(help="Base model: 'embedded' or a model folder.")] = "embedded",
    split: Annotated[str, typer.Option(help="Split of the release (or benchmark) to evaluate on.")] = "test",
    trials: Annotated[int, typer.Option(help="Episodes per task and model (k of pass^k with --benchmark).")] = 1,
    max_turns: Annotated[int | None, typer.Option(
        help="Model calls per episode (default 12; 30 with --benchmark).")] = None,
    max_tasks: Annotated[int | None, typer.Option(help="Evaluate on the first N tasks only.")] = None,
    benchmark: Annotated[str | None, typer.Option(help=(
        "Evaluate on a benchmark instead of a release: tau2:<domain> (τ²-bench's own tasks, judged by "
        "τ²'s evaluator; needs the tau2 extra)."))] = None,
    quick: Annotated[bool, typer.Option(help="With --benchmark: the first few tasks, one trial each.")] = False,
    next_action: Annotated[bool, typer.Option(help=(
        "With --dataset: also score next-action accuracy, teacher-forced on the tasks' reference "
        "dialogues."))] = True,
    tau2_user: Annotated[bool, typer.Option(help=(
        "With --benchmark tau2:<domain>: τ²'s own user simulator plays the user, served by --config's "
        "rollout.user.model (else rollout.model), an OpenAI-compatible endpoint (kind: openai)."))] = False,
    config: cli.ConfigOpt = None,
    set_: cli.SetOpt = None,
) -> None:
    """Before/after: base and trained model on a release's held-out tasks, judged by the verifiers;
    or, with --benchmark tau2:<domain>, one model on τ²-bench's tasks, judged by τ²'s evaluator (pass^k)."""
    from data import store

    for option, count in (("--trials", trials), ("--max-turns", max_turns), ("--max-tasks", max_tasks)):
        if count is not None and count < 1:
            raise cli.UserError(f"{option} must be at least 1, got {count}")
    if benchmark is not None:
        if dataset is not None:
            raise cli.UserError("--benchmark and --dataset: give one (a benchmark's tasks, or a release's)")
        _eval_benchmark(benchmark, model, split, trials, max_turns or 30, max_tasks, quick, config, set_, tau2_user)
        return
    if dataset is None:
        raise cli.UserError("give --dataset (a release) or --benchmark (e.g. tau2:airline)")
    if model is None:
        raise cli.UserError("--model: give the trained model folder (e.g. out/train/sft-<version>/final)")
    cli._dataset(dataset, ("rl", "sft", "sft_recovery"), "--dataset")
    if not Path(model).is_dir():
        raise cli.UserError(f"--model {model}: no model folder there (e.g. out/train/sft-<version>/final)")

    try:
        with cli._SIGNALS.installed(resumes=False):
            result = cli._flows().eval_flow(str(dataset), str(model), base, split, trials, max_turns or 12,
                                            max_tasks, next_action)
    except (store.DatasetError, FileNotFoundError, RuntimeError, ValueError) as exc:
        cli._fail(exc)
    Console().print(_pair_table(result))
    print(json.dumps(result, default=str))


def _eval_benchmark(benchmark: str, model: str | None, split: str, trials: int, max_turns: int,
                    max_tasks: int | None, quick: bool, config: Path | None, sets: list[str] | None,
                    tau2_user: bool = False) -> None:
    """`trajforge eval --benchmark`: the model (`--model`, else --config's rollout.model) and
    the user (--config's rollout.user: the scripted user unless an LLM user is configured; with
    --tau2-user τ²'s own user simulator served by rollout.user.model, else rollout.model) on
    the benchmark's tasks (`train.evaluate.evaluate_benchmark`); the result is printed and,
    for a training run's model, kept in the run folder and on its release's card."""
    from pipelines.config import RunConfig
    from rollout.collector import ModelConfig
    from train.evaluate import QUICK_TASKS, evaluate_benchmark, parse_benchmark, record_benchmark

    try:
        parse_benchmark(benchmark)
    except ValueError as exc:
        raise cli.UserError(f"--benchmark: {exc}") from None
    cfg = RunConfig.model_validate(cli._config(config, sets))
    folder: str | None = None
    if model is None or model == "embedded":
        agent = cfg.rollout.model if model is None else ModelConfig()
    elif model == "scripted":
        agent = ModelConfig(kind="scripted", name="scripted")
    elif Path(model).expanduser().is_dir():
        folder = str(Path(model).expanduser())
        agent = ModelConfig(kind="embedded", options={"path": folder})
    else:
        raise cli.UserError(f"--model {model}: not 'embedded', 'scripted' or a model folder (another backend: "
                        "--config with rollout.model)")
    if quick:
        trials, max_tasks = 1, min(max_tasks or QUICK_TASKS, QUICK_TASKS)
    try:
        user = cfg.rollout.user
        if tau2_user and user.model is None:
            user = user.model_copy(update={"model": cfg.rollout.model})  # the configured model serves τ²'s user
        result = evaluate_benchmark(benchmark, agent, split=split, trials=trials, max_tasks=max_tasks,
                                    user=user, max_turns=max_turns, tau2_user=tau2_user)
        result = record_benchmark(result, folder)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        cli._fail(exc)
    table = Table(title=f"{benchmark} ({split}): {result['tasks']} tasks × {result['trials']} trials, "
                        f"{result['user']} user, judged by τ²'s evaluator")
    for col in ("model", *(f"pass^{k}" for k in result["pass_hat_k"]), "mean reward", "trajforge pass rate",
                "s / task"):
        table.add_column(col)
    label = agent.options.get("path") or (agent.kind if agent.kind == "scripted" else f"{agent.kind}:{agent.name}")
    table.add_row(str(label), *(f"{v:.3f}" for v in result["pass_hat_k"].values()), f"{result['mean_reward']:.3f}",
                  f"{result['trajforge_pass_rate']:.3f}", str(result["seconds_per_task"]))
    Console().print(table)
    print(json.dumps(result, default=str))


@cli.app.command()
def runs(
    dataset: Annotated[Path | None, typer.Option(
        help="Release folder (default: the latest sft, sft_recovery and rl releases).")] = None,
    out: cli.OutOpt = Path("out"),
    refresh_card: Annotated[bool, typer.Option(help="Also rewrite the release card's 'Training runs' section.")] = False,
) -> None:
    """The training runs on a release (from their run.json) and their before/after evaluations."""
    from data import store
    from pipelines import stages
    from train.lineage import RUN_COLUMNS, refresh_release_card, run_cells, runs_on_release

    releases = [dataset] if dataset else [p for k in stages.RELEASES if (p := stages.latest_release(out, k))]
    if not releases:
        cli._fail(FileNotFoundError(f"no release under {out / 'releases'}; pass --dataset"))
    listed = []
    for release in releases:
        try:
            found = runs_on_release(release, [out / "train"])
        except store.DatasetError as exc:
            cli._fail(exc)
        if refresh_card:
            refresh_release_card(release, [out / "train"])
        table = Table(title=f"training runs on {release}")
        for col in RUN_COLUMNS:
            table.add_column(col)
        for r in found:
            table.add_row(*run_cells(r))
        Console().print(table)
        listed += [{"release": str(release), "run_dir": r["run_dir"], "stage": r["stage"], "status": r["status"]}
                   for r in found]
    print(json.dumps(listed))


@cli.app.command("self-play")
def self_play(config: cli.ConfigOpt = None, out: cli.OutOpt = Path("out"),
              rounds: Annotated[int | None, typer.Option(help="Number of rounds.")] = None,
              set_: cli.SetOpt = None) -> None:
    """Run self-play rounds (Tool-R0): train generator, generate + filter, train solver."""
    cfg = cli._config(config, set_, {"self_play.rounds": rounds})
    cli._writable(out)
    try:
        with cli._SIGNALS.installed(resumes=False):
            result = cli._flows().self_play_flow(cfg, str(out))
    except (RuntimeError, ValueError) as exc:
        cli._fail(exc)
    print(json.dumps(result))


@cli.app.command()
def teach(config: cli.ConfigOpt = None, out: cli.OutOpt = Path("out"), set_: cli.SetOpt = None) -> None:
    """From data to a judged model: the run, SFT on its sft release, base vs SFT model on the held-out
    tasks (next-action accuracy and pass rate with 95% intervals), then GRPO and its judgement with
    teach.grpo=true. Stages already done (same release, config and code) are reused."""
    cfg = cli._config(config, set_)
    cli._writable(out)
    try:
        cli._preflight(cfg)
        summary = cli._execute("teach_flow", cfg, str(out))
    except (RuntimeError, FileNotFoundError, ValueError, LookupError) as exc:
        cli._fail(exc)
    cli._print_summary(summary)
    for stage, figures in summary.get("training", {}).items():
        cli.console.print(f"[bold]{stage}[/bold] {figures['model']}: " + "; ".join(
            f"{k} {v['base']} → {v['trained']} (Δ {v['delta']:+}, 95% CI {v['ci95'][0]:+} … {v['ci95'][1]:+})"
            for k, v in figures.items() if isinstance(v, dict)))
    print(json.dumps(summary, default=str))
