"""Scheduled pipelines: serve deployments of the flows on cron or interval schedules.

A schedules file lists deployments::

    server: null                      # a Prefect API URL; null starts one on loopback
    deployments:
      - name: nightly-airline
        flow: run                     # run | synth | rollout | verify | curate | release
        config: configs/tiny-scripted.yaml   # a run config file (optional)
        set: {synthesis.n_tasks: 16}  # dotted overrides (optional)
        out: out/scheduled
        cron: "0 3 * * *"             # or interval_s: 3600

`trajforge serve FILE` connects to the server (or starts `prefect server start` on
127.0.0.1 and waits until it is healthy), registers each deployment with its schedule and
then runs scheduled flow runs until stopped. Every scheduled `run` publishes a new release
version under `<out>/releases` whose pointer (`LATEST.json`) names the previous one as
parent. Schedules only fire against a real server, never against Prefect's temporary one.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

FLOWS = {"run": "run_flow", "synth": "synth_flow", "rollout": "rollout_flow", "verify": "verify_flow",
         "curate": "curate_flow", "release": "release_flow"}


class DeploymentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    flow: Literal["run", "synth", "rollout", "verify", "curate", "release"] = "run"
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
    deployments: list[DeploymentSpec]


def load_serve_config(path: Path | str) -> ServeConfig:
    data = yaml.safe_load(Path(path).read_text()) or {}
    return ServeConfig.model_validate(data)


def _healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(api_url.rstrip("/") + "/health", timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


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
        self.api_url = f"http://127.0.0.1:{self.port}/api"

    def start(self) -> str:
        env = dict(os.environ, PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="WARNING")
        env.pop("PREFECT_API_URL", None)
        if self.home:
            env["PREFECT_HOME"] = str(self.home)
        exe = Path(sys.executable).with_name("prefect")
        cmd = [str(exe) if exe.exists() else "prefect", "server", "start", "--host", "127.0.0.1",
               "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
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
    relative paths in it are taken from `base` (default: the working directory)."""
    from pipelines import flows
    from pipelines.config import load_config

    base = base or Path.cwd()
    deployments = []
    for spec in cfg.deployments:
        config_path = (base / spec.config) if spec.config and not Path(spec.config).is_absolute() else spec.config
        run_cfg = load_config(config_path, spec.overrides)
        out = spec.out if Path(spec.out).is_absolute() else str(base / spec.out)
        flow_fn = getattr(flows, FLOWS[spec.flow]).with_options(task_runner=flows.build_runner(run_cfg.runner))
        schedule = {"cron": spec.cron} if spec.cron else {"interval": spec.interval_s}
        deployments.append(flow_fn.to_deployment(
            name=spec.name, parameters={"config": run_cfg.model_dump(mode="json"), "out": out},
            description=f"trajforge {spec.flow} → {out}", tags=["trajforge", spec.flow], **schedule))
    return deployments


def serve(path: Path | str, limit: int | None = None) -> None:
    """Serve the deployments of a schedules file until interrupted."""
    from prefect import serve as prefect_serve

    cfg = load_serve_config(path)
    server: PrefectServer | None = None
    api_url = cfg.server or os.environ.get("PREFECT_API_URL")
    if api_url is None:
        server = PrefectServer()
        api_url = server.start()
    elif not _healthy(api_url):
        raise RuntimeError(f"no healthy Prefect server at {api_url}")
    os.environ["PREFECT_API_URL"] = api_url
    from prefect.settings import PREFECT_API_URL, temporary_settings

    try:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            prefect_serve(*build_deployments(cfg), limit=limit, pause_on_shutdown=False)
    finally:
        if server:
            server.stop()
