"""Launch and stop `vllm serve` as a subprocess (an OpenAI-compatible server with tool
calling), for rollouts through `OpenAICompatibleModel`.

    cfg = VLLMServerConfig(model="Qwen/Qwen2.5-7B-Instruct", port=8000, max_model_len=16384)
    with VLLMServer(cfg) as server:                 # waits for /health and /v1/models
        ModelConfig(kind="openai", name=cfg.served_name(), base_urls=[server.base_url])

`launch_replicas` starts several servers of one model on consecutive ports, one GPU set
each (`CUDA_VISIBLE_DEVICES`): the data-parallel endpoints `ModelConfig.base_urls` spreads
conversations over. (`data_parallel_size > 1` instead runs vLLM's own data parallelism
behind one port.) The server runs in its own process group and is stopped with SIGTERM,
then SIGKILL after `stop_grace_s`. vLLM itself is never imported here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

TOOL_CALL_PARSERS = (
    "hermes",
    "llama3_json",
    "llama4_pythonic",
    "mistral",
    "pythonic",
    "qwen3_coder",
    "granite",
    "internlm",
    "jamba",
    "deepseek_v3",
    "kimi_k2",
    "openai",
    "xlam",
    "glm45",
)


class VLLMServerError(RuntimeError):
    """The server could not be started, died, or did not become ready in time."""


class VLLMServerConfig(BaseModel):
    """The `vllm serve` command line (see `build_command`)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    served_model_name: str | None = None
    enable_auto_tool_choice: bool = True
    tool_call_parser: str = "hermes"
    chat_template: str | None = None  # a file; default: the model's own
    dtype: str = "auto"
    max_model_len: int | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    data_parallel_size: int = Field(1, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    enable_prefix_caching: bool = True
    seed: int | None = None
    api_key: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    executable: str = "vllm"

    def served_name(self) -> str:
        return self.served_model_name or self.model


def build_command(cfg: VLLMServerConfig) -> list[str]:
    """The argv of `vllm serve` for `cfg`."""
    if cfg.enable_auto_tool_choice and cfg.tool_call_parser not in TOOL_CALL_PARSERS:
        raise ValueError(
            f"unknown tool_call_parser {cfg.tool_call_parser!r}; known: {', '.join(TOOL_CALL_PARSERS)}"
        )
    if cfg.dtype not in ("auto", "bfloat16", "float16", "float32", "half", "float"):
        raise ValueError(f"unknown dtype {cfg.dtype!r}")
    cmd = [
        cfg.executable,
        "serve",
        cfg.model,
        "--host",
        cfg.host,
        "--port",
        str(cfg.port),
        "--dtype",
        cfg.dtype,
        "--gpu-memory-utilization",
        str(cfg.gpu_memory_utilization),
    ]
    if cfg.served_model_name:
        cmd += ["--served-model-name", cfg.served_model_name]
    if cfg.enable_auto_tool_choice:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", cfg.tool_call_parser]
    if cfg.chat_template:
        cmd += ["--chat-template", cfg.chat_template]
    if cfg.max_model_len is not None:
        cmd += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.data_parallel_size > 1:
        cmd += ["--data-parallel-size", str(cfg.data_parallel_size)]
    if cfg.tensor_parallel_size > 1:
        cmd += ["--tensor-parallel-size", str(cfg.tensor_parallel_size)]
    cmd += [
        "--enable-prefix-caching" if cfg.enable_prefix_caching else "--no-enable-prefix-caching"
    ]
    if cfg.seed is not None:
        cmd += ["--seed", str(cfg.seed)]
    if cfg.api_key:
        cmd += ["--api-key", cfg.api_key]
    return cmd + list(cfg.extra_args)


class VLLMServer:
    """One `vllm serve` process: `start()` returns once `/health` answers 200 and
    `/v1/models` lists the served model; `stop()` ends the whole process group."""

    def __init__(
        self,
        cfg: VLLMServerConfig,
        startup_timeout_s: float = 900.0,
        stop_grace_s: float = 30.0,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        poll_s: float = 0.5,
    ) -> None:
        self.cfg = cfg
        self.command = build_command(cfg)
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.env = env
        self.poll_s = poll_s
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def root_url(self) -> str:
        host = "127.0.0.1" if self.cfg.host in ("0.0.0.0", "::") else self.cfg.host
        return f"http://{host}:{self.cfg.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def start(self) -> VLLMServer:
        if self.proc is not None and self.proc.poll() is None:
            raise VLLMServerError("server already running")
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"vllm-{self.cfg.port}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child keeps writing to it
        try:
            self.proc = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                start_new_session=True,
            )
        except OSError as e:
            raise VLLMServerError(f"could not run `{shlex.join(self.command)}`: {e}") from e
        finally:
            log.close()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        """Poll until healthy and serving the model; raise if it dies or times out."""
        deadline = time.monotonic() + self.startup_timeout_s
        last = "no answer yet"
        while True:
            self.check_alive()
            status, body = _get(f"{self.root_url}/health")
            if status == 200:
                status, body = _get(f"{self.base_url}/models")
                if status == 200 and self.cfg.served_name() in _model_ids(body):
                    return
                last = f"/v1/models answered {status}: {body[:200]!r}"
            else:
                last = f"/health answered {status}" if status else f"/health: {body}"
            if time.monotonic() >= deadline:
                raise VLLMServerError(
                    f"vLLM server on port {self.cfg.port} not ready within"
                    f" {self.startup_timeout_s:.0f}s ({last}); log tail:\n{self.log_tail()}"
                )
            time.sleep(self.poll_s)

    def check_alive(self) -> None:
        if self.proc is None:
            raise VLLMServerError("server not started")
        code = self.proc.poll()
        if code is not None:
            raise VLLMServerError(
                f"vLLM server on port {self.cfg.port} exited with code {code};"
                f" log tail:\n{self.log_tail()}"
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL it after `stop_grace_s`; the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # children that outlived their parent
        return proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def launch_replicas(
    cfg: VLLMServerConfig, replicas: int, gpus_per_replica: int = 1, **server_kw: Any
) -> Iterator[list[VLLMServer]]:
    """`replicas` servers of `cfg` on ports `cfg.port`, `cfg.port + 1`, ..., replica i on
    GPUs `[i * gpus_per_replica, (i + 1) * gpus_per_replica)`; all stopped on exit."""
    if replicas < 1 or gpus_per_replica < 1:
        raise ValueError("need replicas >= 1 and gpus_per_replica >= 1")
    servers: list[VLLMServer] = []
    base_env = dict(server_kw.pop("env", None) or {})
    try:
        for i in range(replicas):
            gpus = ",".join(str(g) for g in range(i * gpus_per_replica, (i + 1) * gpus_per_replica))
            env = {**base_env, "CUDA_VISIBLE_DEVICES": gpus}
            server = VLLMServer(cfg.model_copy(update={"port": cfg.port + i}), env=env, **server_kw)
            servers.append(server)
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def _get(url: str, timeout_s: float = 2.0) -> tuple[int, str]:
    """(status, body) of a GET; status 0 and the error when there was no answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (OSError, ValueError) as e:
        return 0, f"{type(e).__name__}: {e}"


def _model_ids(body: str) -> Sequence[str]:
    try:
        data = json.loads(body)
    except ValueError:
        return []
    entries = data.get("data") if isinstance(data, dict) else None
    return [e.get("id") for e in entries or [] if isinstance(e, dict)]
