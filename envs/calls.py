"""The tool-call path every live environment shares: look the tool up, validate the
arguments, run it, and return what happened as an `Observation`, never as an exception.

An environment (`envs.world.Env` on a database, `envs.workspace.WorkspaceEnv` on a sandboxed
folder) differs only in how a validated call executes and how its failures map to error
classes: its `_execute`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from data.records import ToolCall
from envs.tools import MESSAGE_CHARS, ToolArgumentError, ToolSpec, clip


@dataclass
class Observation:
    """What a tool call returned: content for the model plus the error class, if any."""

    content: str
    error: str | None = None  # unknown_tool, bad_arguments, rule_violation, ...
    code: str | None = None  # rule id or finer error kind
    detail: str | None = None
    wrote: bool = False
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def error_observation(kind: str, code: str, message: str) -> Observation:
    """A failed call's observation: `{"error", "code", "message"}` with the message clipped
    (tools' messages may quote the model's strings, paths and arguments)."""
    message = clip(message, MESSAGE_CHARS)
    body = {"error": kind, "code": code, "message": message}
    return Observation(content=json.dumps(body), error=kind, code=code, detail=message)


class ToolEnv:
    """The shared `call` of a live environment; subclasses give `world` (with `tools`) and
    `_execute`."""

    world: Any  # has `tools: dict[str, ToolSpec]`

    def call(self, call: ToolCall) -> Observation:
        """Run one tool call; every failure comes back as an Observation, never raised."""
        t0 = time.perf_counter()
        obs = self._call(call)
        obs.latency_s = time.perf_counter() - t0
        return obs

    def _call(self, call: ToolCall) -> Observation:
        spec = self.world.tools.get(call.name)
        if spec is None:
            known = ", ".join(self.world.tools)
            return error_observation("unknown_tool", "unknown_tool",
                                     f"no tool named {clip(call.name)!r}; tools are: {known}")
        try:
            args = spec.validate(call.arguments)
        except ToolArgumentError as exc:
            return error_observation("bad_arguments", exc.code, exc.message)
        return self._execute(spec, args)

    def _execute(self, spec: ToolSpec, args: dict[str, Any]) -> Observation:
        """Run `spec` with validated `args`: its result, or its failure as an Observation."""
        raise NotImplementedError
