"""The default sandbox: bubblewrap, one `bwrap` process per command.

A sandbox is a private workspace folder on the host plus a fresh bubblewrap namespace for
each command; nothing is started or kept between commands, so opening one is a folder copy.

Each command sees:
- only the parts of the host that tasks need, read-only: the assembled root of
  `envs.sandbox.sysroot` (the listed commands, python3 with its standard library, git, the
  libraries they load, a synthetic `/etc`) as `/usr` and `/etc` with the merged-/usr links,
  plus `ro_binds` if given (a world's `sandbox_options`) and, with the network on, the
  host's `/etc/resolv.conf` and `/etc/ssl`. No `/opt`, `/home`, `/root`, `/work`, `/var`,
  `/run`, host `/etc` or the rest of `/usr`; extra commands come from `commands`;
- the workspace read-write at `/workspace` (its cwd), a private `/tmp` and `/dev/shm`
  (tmpfs, sized by `memory_split`), a fresh `/proc` (own pid namespace) and a minimal
  `/dev`; the rest of the sandbox's root is read-only;
- every namespace unshared (no network unless `Limits.network`), uid/gid 1000 without
  capabilities, no further user namespaces, a new session, and death with its parent;
- a seccomp filter (`envs.sandbox.seccomp`: no ptrace, mount, keyctl, bpf, perf_event_open,
  unshare/setns, namespace clones, ...); `seccomp=False` opens without it (controls and
  debugging only);
- the rlimits of `Limits` (set by `process.limit_argv` inside the namespace).

Memory: tmpfs files are host RAM, so `/tmp` and `/dev/shm` come out of `Limits.memory_mb`
(as they do in Docker's memory cgroup): together they get at most half of it (`/dev/shm` an
eighth, `/tmp` three eighths or `Limits.disk_mb` if smaller), and RLIMIT_AS is what is
left. A command that fills them gets ENOSPC, so their files plus any one process's address
space stay within `memory_mb` (RLIMIT_AS is per process: unlike a cgroup it does not add up
several processes).

When the host process is root, `bwrap` itself is started as uid 1000 (so the sandbox is
uid 1000 on the host too: RLIMIT_NPROC applies and root-only host files stay unreadable);
the workspace is owned by that uid. Background processes die with the command, since the
pid namespace ends with it; `/tmp` is per command, the workspace persists.

Install: `apt-get install -y bubblewrap` (Debian/Ubuntu), `dnf install -y bubblewrap`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import NamedTuple

from envs.sandbox import seccomp as sc
from envs.sandbox.base import SANDBOXES, ExecResult, Limits, SandboxError
from envs.sandbox.folder import FolderSandbox, checked_limits
from envs.sandbox.process import MB, classify, limit_argv, next_disk_floor, run_limited
from envs.sandbox.sysroot import SysRoot, system_root
from envs.sandbox.workspace import Workspace

SANDBOX_UID = 1000
WORKSPACE = "/workspace"
NETWORK_BINDS = ("/etc/resolv.conf", "/etc/ssl")  # from the host, only with the network on
DEFAULT_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
               "LANG": "C.UTF-8", "USER": "sandbox", "PWD": WORKSPACE}
INSTALL_HINT = "install bubblewrap: `apt-get install -y bubblewrap` (or dnf/yum/apk)"


def bwrap_binary() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(f"bubblewrap (`bwrap`) is not on PATH; {INSTALL_HINT}")
    return path


class MemorySplit(NamedTuple):
    """How one command's `Limits.memory_mb` is shared out, in bytes."""

    tmp: int  # size of the /tmp tmpfs
    shm: int  # size of the /dev/shm tmpfs
    process: int  # RLIMIT_AS of each process


def memory_split(limits: Limits) -> MemorySplit:
    """The tmpfs sizes and RLIMIT_AS of a command under `limits` (see the module docstring):
    they add up to `memory_mb`, so files in /tmp and /dev/shm count against it."""
    total = limits.memory_mb * MB
    shm = total // 8
    tmp = 3 * total // 8
    if limits.disk_mb is not None:
        tmp = min(tmp, limits.disk_mb * MB)
    return MemorySplit(tmp=tmp, shm=shm, process=total - tmp - shm)


def bwrap_argv(workspace: Path, limits: Limits, *, ro_binds: Iterable[str] = (),
               env: dict[str, str] | None = None, status_fd: int | None = None,
               root: SysRoot | None = None, seccomp_fd: int | None = None) -> list[str]:
    """The `bwrap ... --` prefix for one command in `workspace` under `limits`: the system
    from `root` (default: `system_root()`), the filter read from `seccomp_fd` if given."""
    root = root or system_root()
    split = memory_split(limits)
    args = [bwrap_binary(), "--unshare-all", "--unshare-user"]
    if limits.network:
        args.append("--share-net")
    args += ["--disable-userns", "--die-with-parent", "--new-session",
             "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
    args += root.bwrap_args()
    if limits.network:
        for path in NETWORK_BINDS:
            args += ["--ro-bind-try", path, path]
        if os.path.islink("/etc/resolv.conf"):  # e.g. systemd-resolved's stub
            target = os.path.dirname(os.path.realpath("/etc/resolv.conf"))
            args += ["--ro-bind-try", target, target]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(split.tmp), "--tmpfs", "/tmp",
             "--size", str(split.shm), "--tmpfs", "/dev/shm",
             "--bind", str(workspace), WORKSPACE]
    # Extra read-only binds go after the tmpfs mounts, so a bind under /tmp (a checkout or
    # venv there) is not hidden by the sandbox's private /tmp.
    for d in ro_binds:
        args += ["--ro-bind", d, d]
    args += ["--remount-ro", "/", "--chdir", WORKSPACE,
             "--clearenv"]
    for key, value in {**DEFAULT_ENV, **(env or {})}.items():
        if not isinstance(key, str) or not key or "=" in key or not isinstance(value, str):
            raise ValueError(f"bad environment variable {key!r}={value!r}")
        args += ["--setenv", key, value]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args + ["--"]


def drop_privileges() -> tuple[list[str], dict]:
    """(argv prefix, Popen keywords) that start bwrap as the sandbox uid when we are root.

    `setpriv` (util-linux) is preferred: Popen's own `user=` forces a full fork() of this
    process, which costs ~100 ms when the parent holds a model in memory (vfork: ~1 ms).
    """
    if os.geteuid() != 0:
        return [], {}
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups"], {}
    return [], {"user": SANDBOX_UID, "group": SANDBOX_UID, "extra_groups": []}


def _read_status(fd: int) -> list[dict]:
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    docs, text, i = [], data.decode(errors="replace"), 0
    dec = json.JSONDecoder()
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        try:
            doc, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break
        if isinstance(doc, dict):
            docs.append(doc)
    return docs


@cache
def bwrap_unusable() -> str | None:
    """None when a sandbox can start here, else why not (for skips and clear errors)."""
    try:
        with BwrapSandbox(None, Limits(timeout_s=20)) as sb:
            r = sb.run(["true"])
            if not r.ok:
                return f"bwrap ran but `true` failed: rc={r.returncode} {r.stderr.strip()}"
    except SandboxError as e:
        return str(e)
    return None


@SANDBOXES.register("bwrap")
class BwrapSandbox(FolderSandbox):
    """A bubblewrap sandbox (see the module docstring). Not for concurrent commands: calls
    on one sandbox are serialized; use one sandbox per thread (or a `SandboxPool`)."""

    backend = "bwrap"

    def __init__(self, source: Path | None = None, limits: Limits | None = None, *,
                 ro_binds: Iterable[str | Path] = (), base_dir: Path | str | None = None,
                 commands: Iterable[str] = (), seccomp: bool = True) -> None:
        self.limits = checked_limits(limits)
        self._binds = []
        for b in ro_binds:
            p = os.path.abspath(b)
            if not os.path.exists(p):
                raise SandboxError(f"ro_binds path {p!r} does not exist")
            self._binds.append(p)
        bwrap_binary()
        self.seccomp = seccomp
        if seccomp and (why := sc.seccomp_unavailable()) is not None:
            raise SandboxError(f"no seccomp filter: {why}; open with seccomp=False to run without one")
        self._root = system_root(commands)
        binds = self._binds
        self._prefix = limit_argv(
            self.limits, memory_bytes=memory_split(self.limits).process,
            visible=lambda p: self._root.visible(p) or any(
                os.path.realpath(p).startswith(b.rstrip("/") + "/") for b in binds))
        self._open(Workspace(Path(source) if source is not None else None,
                             owner=SANDBOX_UID, base_dir=base_dir))

    def run(self, cmd: str | list[str], *, timeout: float | None = None,
            env: dict[str, str] | None = None, stdin: str | None = None) -> ExecResult:
        argv, t = self._command(cmd, timeout)
        with self._lock:
            self._check_open()
            r, w = os.pipe()
            filt = sc.write_program_fd() if self.seccomp else None
            try:
                drop, popen_kw = drop_privileges()
                full = drop + bwrap_argv(self.workdir, self.limits, ro_binds=self._binds,
                                         env=env, status_fd=w, root=self._root,
                                         seccomp_fd=filt) + self._prefix + argv
                raw = run_limited(
                    full, timeout=t, limits=self.limits, cwd=str(self._ws.root),
                    env={"PATH": DEFAULT_ENV["PATH"]}, stdin=stdin,
                    popen_kw={**popen_kw, "pass_fds": (w,) if filt is None else (w, filt)},
                    disk_usage=self._ws.disk_bytes, disk_floor=self._disk_floor)
                self._disk_floor = next_disk_floor(raw.killed_by, raw.disk_bytes, self._disk_floor,
                                                    self.limits, self._ws.disk_bytes)
            finally:
                os.close(w)
                if filt is not None:
                    os.close(filt)
                status = _read_status(r)
                os.close(r)
        if not any("child-pid" in d for d in status) and raw.killed_by is None:
            raise SandboxError(f"bubblewrap could not start the sandbox (rc={raw.returncode}): "
                               f"{raw.stderr.decode(errors='replace').strip()}")
        for d in status:
            if isinstance(d.get("exit-code"), int):
                raw.returncode = d["exit-code"]
        return classify(raw, self.limits)
