"""Sandboxes: isolated workspaces where agents run shell commands and tests run.

`open_sandbox(backend, source, limits)` is the one entry point; backends register in
`SANDBOXES` ("bwrap" default, "docker", "unsafe" for development only).
"""

from envs.sandbox.base import SANDBOXES, ExecResult, Limits, Sandbox, SandboxError, open_sandbox

__all__ = ["SANDBOXES", "ExecResult", "Limits", "Sandbox", "SandboxError", "open_sandbox"]
