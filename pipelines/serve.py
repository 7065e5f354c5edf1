"""Scheduled pipelines: serve deployments of the flows on cron or interval schedules.

A schedules file lists deployments::

    server: null                      # a Prefect API URL; null starts one on loopback
    deployments:
      - name: nightly-airline
        flow: run                     # run | synth | rollout | verify | curate | release | teach
        config: configs/tiny-scripted.yaml   # a run config file (optional)
        set: {synthesis.n_tasks: 16}  # dotted overrides (optional)
        out: out/scheduled
        cron: "0 3 * * *"             # or interval_s: 3600
    limit: 1                          # flow runs at once (`--limit` overrides)
    late_runs: collapse               # missed runs: collapse (run the newest once) | skip

`trajforge serve FILE` connects to the server (or starts `prefect server start` on
127.0.0.1 and waits until it is healthy), registers each deployment with its schedule and
then runs scheduled flow runs until stopped. Every scheduled `run` publishes a new release
version under `<out>/releases` whose pointer (`LATEST.json`) names the previous one as
parent. Schedules only fire against a real server, never against Prefect's temporary one.

Runs never pile up. At most `limit` flow runs go at once (the runner's limit), and each
deployment runs one at a time (a deployment concurrency limit of 1 that cancels a run
coming due while the previous one still goes: `collision_strategy: CANCEL_NEW`). Runs that
came due while serve was down, or that waited past `2 x PREFECT_RUNNER_POLL_FREQUENCY`
while serve was at its limit, are late: `late_runs: collapse` cancels all but the newest late run
of each deployment (one catch-up run), `skip` cancels them all; they end `Cancelled` with
the name `Skipped`. On stopping, runs of the deployments still `Pending` are cancelled, so
none is left waiting for a runner that has gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipelines.reaper import reap_with_this_process

FLOWS = {"run": "run_flow", "synth": "synth_flow", "rollout": "rollout_flow", "verify": "verify_flow",
         "curate": "curate_flow", "release": "release_flow", "teach": "teach_flow"}


class DeploymentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    flow: Literal["run", "synth", "rollout", "verify", "curate", "release", "teach"] = "run"
    config: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict, alias="set")
    out: str = "out/scheduled"
    cron: str | None = None
    interval_s: float | None = None

    @model_validator(mode="after")
    def _one_schedule(self) -> DeploymentSpec:
        if (self.cron is None) == (self.interval_s is None):
            raise ValueError(f"deployment {self.name!r}: give exactly one of cron or interval_s")
        return self


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str | None = None  # PREFECT_API_URL; None: use the environment's, else start one
    limit: int = Field(1, ge=1)  # flow runs at once, over all deployments
    late_runs: Literal["skip", "collapse"] = "collapse"  # what becomes of runs that came due unserved
    deployments: list[DeploymentSpec] = Field(min_length=1)


def load_serve_config(path: Path | str) -> ServeConfig:
    """The schedules file; `ValueError` in one line for a missing, malformed or invalid one."""
    from pydantic import ValidationError

    from pipelines.config import describe

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError:
        raise ValueError(f"schedules file {path} not found") from None
    except OSError as exc:
        raise ValueError(f"schedules file {path} cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"schedules file {path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    try:
        return ServeConfig.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: {describe(exc)}") from None


def _healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(api_url.rstrip("/") + "/health", timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


HEALTH_WAIT_S = 30.0  # a busy server may miss one 2-second health check


def _wait_healthy(api_url: str, wait_s: float) -> bool:
    """Whether the server answers its health check within `wait_s` (checked every second)."""
    deadline = time.monotonic() + wait_s
    while True:
        if _healthy(api_url):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(1.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrefectServer:
    """`prefect server start` on loopback as a child process, stopped with its process group."""

    def __init__(self, port: int | None = None, home: Path | None = None, startup_timeout_s: float = 120.0) -> None:
        self.port = port or free_port()
        self.home = home
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None  # where the server writes its log, once started
        self.api_url = f"http://127.0.0.1:{self.port}/api"

    def start(self) -> str:
        env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="WARNING")
        env.pop("PREFECT_API_URL", None)
        if self.home:
            env["PREFECT_HOME"] = str(self.home)
        exe = Path(sys.executable).with_name("prefect")
        cmd = [str(exe) if exe.exists() else "prefect", "server", "start", "--host", "127.0.0.1",
               "--port", str(self.port)]
        # The server's log goes to a file: a pipe nobody reads fills (64 KB of errors, e.g. runs
        # marked late) and then blocks the server's event loop for good.
        folder = self.home or Path(tempfile.mkdtemp(prefix="trajforge-prefect-"))
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / f"server-{self.port}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        reap_with_this_process(self.proc.pid)  # its process group stops when this process ends, however
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.log_path.read_bytes()[-2000:].decode(errors="replace")
                raise RuntimeError(f"prefect server exited with code {self.proc.returncode}: {err}")
            if _healthy(self.api_url):
                return self.api_url
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"prefect server on port {self.port} not healthy after {self.startup_timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> PrefectServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def build_deployments(cfg: ServeConfig, base: Path | None = None) -> list[Any]:
    """Prefect deployments (`flow.to_deployment`) for every entry of a schedules file;
    relative paths in it are taken from `base` (default: the working directory). Each runs
    one at a time: a run coming due while the previous one goes is cancelled."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy

    from pipelines import flows
    from pipelines.config import load_config
    from pipelines.flow_names import flow_named

    base = base or Path.cwd()
    deployments = []
    for spec in cfg.deployments:
        config_path = (base / spec.config) if spec.config and not Path(spec.config).is_absolute() else spec.config
        run_cfg = load_config(config_path, spec.overrides)
        out = spec.out if Path(spec.out).is_absolute() else str(base / spec.out)
        flow_fn = flow_named(FLOWS[spec.flow]).with_options(task_runner=flows.build_runner(run_cfg.runner))
        schedule = {"cron": spec.cron} if spec.cron else {"interval": spec.interval_s}
        deployments.append(flow_fn.to_deployment(
            name=spec.name, parameters={"config": run_cfg.model_dump(mode="json"), "out": out},
            description=f"trajforge {spec.flow} → {out}", tags=["trajforge", spec.flow],
            concurrency_limit=ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
            **schedule))
    return deployments


log = logging.getLogger(__name__)
SKIPPED = "Skipped"  # the name of the Cancelled state a late run ends in


@contextlib.contextmanager
def _client(api_url: str) -> Iterator[Any]:
    """A synchronous Prefect client of the server at `api_url` (any thread)."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}), get_client(sync_client=True) as client:
        yield client


def _runs(client: Any, deployment_ids: list[UUID], state: Any, before: datetime.datetime | None = None) -> list[Any]:
    """Flow runs of the deployments in state type `state` (expected to start before
    `before`, if given), oldest first, every page."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterDeploymentId,
        FlowRunFilterExpectedStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.sorting import FlowRunSort

    flt = FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(any_=deployment_ids),
                        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[state])),
                        expected_start_time=FlowRunFilterExpectedStartTime(before_=before) if before else None)
    found: list[Any] = []
    while True:
        page = client.read_flow_runs(flow_run_filter=flt, sort=FlowRunSort.EXPECTED_START_TIME_ASC, limit=200,
                                     offset=len(found))
        found += page
        if len(page) < 200:
            return found


def _cancel(client: Any, run: Any, message: str, name: str = SKIPPED) -> None:
    from prefect.states import Cancelled

    try:
        client.set_flow_run_state(run.id, Cancelled(name=name, message=message), force=True)
    except Exception as exc:  # the run may have moved on meanwhile; the next pass sees it again
        log.warning("could not cancel flow run %s: %s", run.id, exc)


def settle_late_runs(api_url: str, deployment_ids: list[UUID], policy: Literal["skip", "collapse"],
                     late_after_s: float = 0.0) -> dict[str, int]:
    """Apply the late-run policy to the deployments' scheduled runs that were due more than
    `late_after_s` ago: `skip` cancels them all, `collapse` all but the newest of each
    deployment (its one catch-up run). Returns how many were cancelled and kept."""
    from prefect.client.schemas.objects import StateType

    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=late_after_s)
    cancelled = kept = 0
    with _client(api_url) as client:
        late = _runs(client, deployment_ids, StateType.SCHEDULED, before)
        newest = {r.deployment_id: r.id for r in late} if policy == "collapse" else {}
        for run in late:
            if newest.get(run.deployment_id) == run.id:
                kept += 1
                continue
            _cancel(client, run, f"came due at {run.expected_start_time} while trajforge serve was down or busy "
                                 f"(late_runs: {policy})")
            cancelled += 1
    return {"cancelled": cancelled, "kept": kept}


def cancel_pending_runs(api_url: str, deployment_ids: list[UUID], reason: str) -> int:
    """Cancel the deployments' runs still `Pending` (submitted, never started): at startup
    those a stopped serve left, at shutdown those this one leaves."""
    from prefect.client.schemas.objects import StateType

    with _client(api_url) as client:
        pending = _runs(client, deployment_ids, StateType.PENDING)
        for run in pending:
            _cancel(client, run, reason, name="Cancelled")
    return len(pending)


class LateRunGuard:
    """Applies the late-run policy every `interval_s` in a background thread while the
    runner is at its limit (`busy()`): runs that waited past `late_after_s` are collapsed or
    skipped instead of running one after another once it is free. A runner with a free slot
    takes due runs itself at its next poll, so nothing is settled then."""

    def __init__(self, api_url: str, deployment_ids: list[UUID], policy: Literal["skip", "collapse"],
                 interval_s: float, late_after_s: float, busy: Callable[[], bool]) -> None:
        self.api_url, self.deployment_ids, self.policy = api_url, deployment_ids, policy
        self.interval_s, self.late_after_s, self.busy = interval_s, late_after_s, busy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trajforge-late-runs", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.busy():
                continue
            try:
                settle_late_runs(self.api_url, self.deployment_ids, self.policy, self.late_after_s)
            except Exception as exc:  # a server hiccup: try again next round
                log.warning("late-run policy not applied this round: %s", exc)

    def __enter__(self) -> LateRunGuard:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def serve(path: Path | str, limit: int | None = None, late_runs: Literal["skip", "collapse"] | None = None) -> None:
    """Serve the deployments of a schedules file until interrupted (SIGTERM or Ctrl-C):
    register them, settle the runs missed while no serve ran, then run what comes due."""
    cfg = load_serve_config(path)
    limit = cfg.limit if limit is None else limit
    if limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    policy = late_runs or cfg.late_runs
    server: PrefectServer | None = None
    api_url = cfg.server or os.environ.get("PREFECT_API_URL")
    if api_url is None:
        server = PrefectServer()
        api_url = server.start()
    elif not _wait_healthy(api_url, HEALTH_WAIT_S):
        raise RuntimeError(f"no healthy Prefect server at {api_url} (waited {HEALTH_WAIT_S:.0f} s)")
    os.environ["PREFECT_API_URL"] = api_url
    from prefect.exceptions import TerminationSignal
    from prefect.runner import Runner
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    deployment_ids: list[UUID] = []

    def stop_while_starting(signum: int, frame: Any) -> None:
        raise TerminationSignal(signal=signum)

    # SIGTERM before the runner installs its own handler (registering, settling late runs)
    # ends serve as cleanly as one after it: the `finally` below still runs
    previous = signal.signal(signal.SIGTERM, stop_while_starting)
    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            poll_s = float(get_current_settings().runner.poll_frequency)
            runner = Runner(limit=limit, pause_on_shutdown=False)
            deployments = build_deployments(cfg)
            deployment_ids = [runner.add_deployment(d) for d in deployments]
            cancel_pending_runs(api_url, deployment_ids, "left pending by a trajforge serve that stopped")
            settled = settle_late_runs(api_url, deployment_ids, policy)
            print(f"serving {', '.join(f'{d.flow_name}/{d.name}' for d in deployments)} on {api_url} "
                  f"(limit {limit}, late runs: {policy}; {settled['cancelled']} missed run(s) cancelled, "
                  f"{settled['kept']} kept)", flush=True)
            guard = LateRunGuard(api_url, deployment_ids, policy, interval_s=poll_s, late_after_s=2 * poll_s,
                                 busy=lambda: not runner.has_slots_available())
            with guard, contextlib.suppress(KeyboardInterrupt, TerminationSignal):
                asyncio.run(runner.start())
    except (KeyboardInterrupt, TerminationSignal):
        pass  # stopped while starting
    finally:
        signal.signal(signal.SIGTERM, stop_while_starting)  # the runner's handler is done with
        try:
            if deployment_ids:
                cancel_pending_runs(api_url, deployment_ids, "trajforge serve stopped before this run started")
        finally:
            if server:
                server.stop()
            signal.signal(signal.SIGTERM, previous)
