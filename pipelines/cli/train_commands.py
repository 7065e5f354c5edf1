"""The training commands: `train` (TRL SFT or GRPO on a release), `eval` (before/after on a
release's held-out tasks), `runs` (the training runs on a release) and `self-play`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pipelines import cli  # the package, looked up at each call (tests patch `cli._flows`)
from pipelines.cli import (
    ConfigOpt,
    OutOpt,
    SetOpt,
    UserError,
    _config,
    _dataset,
    _fail,
    _writable,
    app,
)


@app.command()
def train(
    kind: Annotated[str, typer.Argument(help="sft or grpo")],
    dataset: Annotated[Path | None, typer.Option(
        help="Release folder: sft or sft_recovery for sft, rl for grpo (default: latest DIR/releases/<sft|rl>).")] = None,
    config: ConfigOpt = None,
    out: OutOpt = Path("out"),
    max_steps: Annotated[int | None, typer.Option(help="Optimizer steps.")] = None,
    set_: SetOpt = None,
) -> None:
    """Train on a release with TRL (SFT on `sft` or `sft_recovery`, GRPO on `rl`)."""
    from data import store
    from data.schema import SFT_KINDS
    from pipelines import stages

    if kind not in ("sft", "grpo"):
        raise UserError(f"unknown training kind {kind!r}: use `trajforge train sft` or `trajforge train grpo`")
    cfg = _config(config, set_)
    _dataset(dataset, SFT_KINDS if kind == "sft" else ("rl",), "--dataset")
    _writable(out)
    if dataset is None:
        dataset = stages.latest_release(out, "sft" if kind == "sft" else "rl")
        if dataset is None:
            _fail(FileNotFoundError(f"no release under {out / 'releases'}; run `trajforge run` first or pass --dataset"))
    run_dir = out / "train" / f"{kind}-{store.new_version()}"
    try:
        result = cli._flows().train_flow(kind, str(dataset), cfg, str(run_dir), max_steps,
                                     show_progress=sys.stderr.isatty())
    except (store.DatasetError, RuntimeError, ValueError) as exc:
        _fail(exc)
    print(json.dumps(result, default=str))


@app.command("eval")
def eval_(
    dataset: Annotated[Path, typer.Option(help="Release folder (rl, or sft / sft_recovery with tasks in its lineage).")],
    model: Annotated[Path, typer.Option(help="Trained model folder (e.g. out/train/sft-<version>/final).")],
    base: Annotated[str, typer.Option(help="Base model: 'embedded' or a model folder.")] = "embedded",
    split: Annotated[str, typer.Option(help="Split of the release to evaluate on.")] = "test",
    trials: Annotated[int, typer.Option(help="Episodes per task and model.")] = 1,
    max_turns: Annotated[int, typer.Option(help="Model calls per episode.")] = 12,
    max_tasks: Annotated[int | None, typer.Option(help="Evaluate on the first N tasks only.")] = None,
) -> None:
    """Before/after: base and trained model on a release's held-out tasks, judged by the verifiers."""
    from data import store

    _dataset(dataset, ("rl", "sft", "sft_recovery"), "--dataset")
    if not model.is_dir():
        raise UserError(f"--model {model}: no model folder there (e.g. out/train/sft-<version>/final)")
    for option, count in (("--trials", trials), ("--max-turns", max_turns), ("--max-tasks", max_tasks)):
        if count is not None and count < 1:
            raise UserError(f"{option} must be at least 1, got {count}")

    try:
        result = cli._flows().eval_flow(str(dataset), str(model), base, split, trials, max_turns, max_tasks)
    except (store.DatasetError, FileNotFoundError, RuntimeError, ValueError) as exc:
        _fail(exc)
    table = Table(title=f"eval on {result['release']['name']} {result['release']['version']} ({split})")
    for col in ("model", "tasks", "episodes", "pass rate", "mean score"):
        table.add_column(col)
    for label in ("base", "trained"):
        r = result[label]
        table.add_row(f"{label}: {r['model']}", str(r["tasks"]), str(r["trajectories"]),
                      f"{r['pass_rate']:.3f}", f"{r['mean_score']:.3f}")
    Console().print(table)
    print(json.dumps(result, default=str))


@app.command()
def runs(
    dataset: Annotated[Path | None, typer.Option(
        help="Release folder (default: the latest sft, sft_recovery and rl releases).")] = None,
    out: OutOpt = Path("out"),
    refresh_card: Annotated[bool, typer.Option(help="Also rewrite the release card's 'Training runs' section.")] = False,
) -> None:
    """The training runs on a release (from their run.json) and their before/after evaluations."""
    from data import store
    from pipelines import stages
    from train.lineage import RUN_COLUMNS, refresh_release_card, run_cells, runs_on_release

    releases = [dataset] if dataset else [p for k in stages.RELEASES if (p := stages.latest_release(out, k))]
    if not releases:
        _fail(FileNotFoundError(f"no release under {out / 'releases'}; pass --dataset"))
    listed = []
    for release in releases:
        try:
            found = runs_on_release(release, [out / "train"])
        except store.DatasetError as exc:
            _fail(exc)
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


@app.command("self-play")
def self_play(config: ConfigOpt = None, out: OutOpt = Path("out"),
              rounds: Annotated[int | None, typer.Option(help="Number of rounds.")] = None,
              set_: SetOpt = None) -> None:
    """Run self-play rounds (Tool-R0): train generator, generate + filter, train solver."""
    cfg = _config(config, set_, {"self_play.rounds": rounds})
    _writable(out)
    try:
        result = cli._flows().self_play_flow(cfg, str(out))
    except (RuntimeError, ValueError) as exc:
        _fail(exc)
    print(json.dumps(result))
