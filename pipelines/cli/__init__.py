"""The `trajforge` command line. Every stage command runs one Prefect flow.

A mistake in the command (a config file, a world, method, model kind or verifier name, a
count, an `--out` folder that cannot be written, a dataset of the wrong kind) is reported
before Prefect starts, as one `error:` line with a hint; any other failure is one `error:`
line too, and `trajforge --debug ...` shows the traceback. SIGTERM or Ctrl-C stops a run
within seconds (exit code 143 or 130): the shards already finished are kept on disk, and
the same command run again resumes from them.

The commands live in `stage_commands`, `train_commands` and `utility_commands`, registered on
`app` when this package is imported; `python -m pipelines.cli` runs `main` (`__main__`).
"""

from __future__ import annotations

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
                _error(_interrupted_message(signum, _SIGNALS.resumes))
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

def _interrupted_message(signum: int, resumes: bool = True) -> str:
    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT (Ctrl-C)"
    if not resumes:  # a training or evaluation run keeps no shards: a rerun starts it again
        return f"interrupted by {name}; nothing was published (rerun the command to start again)"
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
        self.resumes = True

    @contextmanager
    def installed(self, resumes: bool = True) -> Iterator[None]:
        """Watch for the signals while the block runs; `resumes`: whether the same command
        run again resumes (a flow of shards) or starts again (training, evaluation)."""
        self.resumes = resumes
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
        _error(_interrupted_message(signum, self.resumes))
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
            from pipelines.flow_names import flow_named

            return flows.execute(flow_named(flow_name), cfg, *args)
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
                "reference_trajectories", "infra_failed", "model_calls", "sft_rows", "sft_reference_share",
                "sft_recovery_rows", "trained_failures", "rl_rows"):
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

# The commands, registered on `app` in the order `trajforge --help` lists them (they use the
# names above, so they are imported once those exist).
from pipelines.cli import stage_commands, train_commands, utility_commands  # noqa: E402
from pipelines.cli.stage_commands import curate, release, reverify, rollout, run, synth, verify  # noqa: E402
from pipelines.cli.train_commands import eval_, runs, self_play, train  # noqa: E402
from pipelines.cli.utility_commands import (  # noqa: E402
    architect,
    datasets_verify,
    export_tau2,
    new_world,
    prepare_model,
    report,
    sandbox_build_image,
    serve,
    worlds,
)

__all__ = [
    "EXIT_CODES", "GRACE_S", "ConfigOpt", "Interrupted", "OutOpt", "SetOpt", "UserError", "app", "architect",
    "console", "curate", "datasets_app", "datasets_verify", "eval_", "export_tau2", "main", "new_world",
    "prepare_model", "release", "report", "reverify", "rollout", "run", "runs", "sandbox_app", "sandbox_build_image",
    "self_play", "serve", "stage_commands", "synth", "utility_commands", "train", "train_commands", "verify", "worlds",
]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
