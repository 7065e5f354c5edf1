"""The pipeline's stage commands: `run` (end to end), `synth`, `rollout`, `verify`,
`reverify`, `curate` and `release`, each one Prefect flow (`pipelines.flows`) run through
`pipelines.cli._execute`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pipelines.cli import (
    ConfigOpt,
    OutOpt,
    SetOpt,
    UserError,
    _config,
    _dataset,
    _execute,
    _fail,
    _inputs,
    _preflight,
    _print_summary,
    _release_status,
    _writable,
    app,
    console,
)


@app.command()
def run(config: ConfigOpt = None, out: OutOpt = Path("out"), set_: SetOpt = None,
        allow_partial: Annotated[bool, typer.Option(
            "--allow-partial", help="Publish what succeeded even when more than failures.max_infra_failure_rate "
                                    "of the policy trajectories ended on infrastructure failures.")] = False) -> None:
    """Run the end-to-end flow: synthesize, roll out, verify, curate, release."""
    cfg = _config(config, set_, {"failures.allow_partial": True} if allow_partial else None)
    _writable(out)
    try:
        _preflight(cfg)
        summary = _execute("run_flow", cfg, str(out))
    except (RuntimeError, FileNotFoundError, ValueError, LookupError) as exc:
        _fail(exc)
    _print_summary(summary)
    print(json.dumps(summary))


@app.command()
def synth(
    config: ConfigOpt = None,
    out: OutOpt = Path("out"),
    method: Annotated[str | None, typer.Option(help="Synthesis method (e.g. logic_driven).")] = None,
    world: Annotated[str | None, typer.Option(help="World name (see `trajforge worlds`).")] = None,
    n_tasks: Annotated[int | None, typer.Option(help="Number of tasks.")] = None,
    set_: SetOpt = None,
) -> None:
    """Synthesize tasks into DIR/datasets/tasks/<version>."""
    cfg = _config(config, set_, {"synthesis.method": method, "synthesis.world": world, "synthesis.n_tasks": n_tasks})
    _writable(out)
    try:
        print(_execute("synth_flow", cfg, str(out)))
    except (RuntimeError, LookupError, ValueError) as exc:
        _fail(exc)


@app.command()
def rollout(config: ConfigOpt = None, out: OutOpt = Path("out"),
            tasks: Annotated[Path | None, typer.Option(help="Tasks dataset (default: latest).")] = None,
            set_: SetOpt = None) -> None:
    """Collect trajectories for a tasks dataset."""
    cfg = _config(config, set_)
    _inputs(out, {"tasks": tasks}, "rollout")
    _writable(out)
    try:
        print(_execute("rollout_flow", cfg, str(out), str(tasks) if tasks else None))
    except (RuntimeError, FileNotFoundError) as exc:
        _fail(exc)


@app.command()
def verify(config: ConfigOpt = None, out: OutOpt = Path("out"),
           tasks: Annotated[Path | None, typer.Option(help="Tasks dataset (default: latest).")] = None,
           trajectories: Annotated[Path | None, typer.Option(help="Trajectories dataset (default: latest).")] = None,
           set_: SetOpt = None) -> None:
    """Verify trajectories by replaying them against their tasks."""
    cfg = _config(config, set_)
    _inputs(out, {"tasks": tasks, "trajectories": trajectories}, "verify")
    _writable(out)
    try:
        print(_execute("verify_flow", cfg, str(out), str(tasks) if tasks else None,
                       str(trajectories) if trajectories else None))
    except (RuntimeError, FileNotFoundError) as exc:
        _fail(exc)


@app.command()
def reverify(
    verifier: Annotated[str, typer.Option(help="Verifier to re-score with (its current version).")],
    config: ConfigOpt = None, out: OutOpt = Path("out"),
    rollouts: Annotated[Path | None, typer.Option(help="Trajectories dataset (default: latest).")] = None,
    against: Annotated[str | None, typer.Option(help="Old verifier to diff against (default: the same name).")] = None,
    tasks: Annotated[Path | None, typer.Option(help="Tasks dataset (default: from lineage).")] = None,
    verdicts: Annotated[Path | None, typer.Option(help="Old verdicts (default: found by lineage).")] = None,
    upgrade_tasks: Annotated[bool, typer.Option(
        "--upgrade-tasks", help="Judge tasks made before reference dialogues as today's synthesis makes them "
                                "(facts to tell, expected outcome, reward basis).")] = False,
    set_: SetOpt = None,
) -> None:
    """Re-verify stored rollouts with a new verifier version, without any model; print the flips."""
    from verifiers.base import VERIFIERS

    cfg = _config(config, set_)
    for option, name in (("--verifier", verifier), ("--against", against)):
        if name is not None and name not in VERIFIERS.names():
            raise UserError(f"{option}: unknown verifier {name!r} (known: {', '.join(VERIFIERS.names())})")
    _inputs(out, {"trajectories": rollouts}, "reverify")
    paths = (str(rollouts) if rollouts else None, _dataset(tasks, ("tasks",), "--tasks"),
             _dataset(verdicts, ("verdicts",), "--verdicts"))
    _writable(out)
    try:
        result = _execute("reverify_flow", cfg, str(out), paths[0], verifier, against, paths[1], paths[2],
                          upgrade_tasks)
    except (RuntimeError, FileNotFoundError, LookupError, ValueError) as exc:
        _fail(exc)
    Console().print(result["table"])
    print(json.dumps({"verdicts": result["verdicts"], **result["totals"]}))


@app.command()
def curate(config: ConfigOpt = None, out: OutOpt = Path("out"), set_: SetOpt = None) -> None:
    """Select SFT trajectories and RL tasks from the latest tasks, trajectories and verdicts."""
    cfg = _config(config, set_)
    _inputs(out, {"tasks": None, "trajectories": None, "verdicts": None}, "curate")
    _writable(out)
    try:
        print(json.dumps(_execute("curate_flow", cfg, str(out))))
    except (RuntimeError, FileNotFoundError) as exc:
        _fail(exc)


@app.command()
def release(config: ConfigOpt = None, out: OutOpt = Path("out"), set_: SetOpt = None) -> None:
    """Publish the latest curated datasets as releases (atomic, with cards); nothing new when
    `releases/LATEST.json` already names a release of the same content."""
    from data import store
    from pipelines import stages

    cfg = _config(config, set_)
    _writable(out)
    before = store.read_pointer(stages.releases_dir(out))
    try:
        paths = _execute("release_flow", cfg, str(out))
    except (RuntimeError, FileNotFoundError) as exc:
        _fail(exc)
    after = store.read_pointer(stages.releases_dir(out)) or {}
    # a new publish always moves the pointer to a new version
    console.print(f"release {_release_status(bool(before) and before.get('version') == after.get('version'), after.get('version', '?'))}")
    print(json.dumps(paths))
