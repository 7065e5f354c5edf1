"""The part of the host a sandbox sees: an explicit list, assembled once into a folder.

Tasks need a shell and its usual tools, python3 (the system interpreter, for scripts and
for pytest, which the test runner binds in from this process's environment) and git. The
sandbox root is built from exactly that:

- the commands of `COMMANDS` (plus a world's `commands`), found on the system PATH
  (`/usr/bin:/bin:/usr/sbin:/sbin`, never `/usr/local`), with every symlink on the way
  (`awk` -> `/etc/alternatives/awk` -> `mawk`);
- the system python's standard library (without its tests, IDLE, Tk and the build
  config) and git's exec path and templates;
- the shared libraries all of these load (`ldd`), and the dynamic loader;
- a synthetic `/etc`: `passwd` and `group` naming only root, the sandbox user and nobody,
  `hosts`, `nsswitch.conf`, and empty mount points for `resolv.conf` and `ssl` (bound from
  the host only when the network is on).

Only world-readable files are taken. Files are hard-linked into
`$TRAJFORGE_SANDBOX_DIR` (default: the temp folder) as `trajforge-sysroot-<uid>-<key>`
(copied where links are refused), so building costs well under a second and binding it is
one mount per top folder. The key hashes the list and the host files' identities (and
`/etc/ld.so.cache`, which changes whenever libraries do), so a host upgrade makes a new root.
`/opt`, `/home`, `/root`, `/var`, the rest of `/usr` and the host's `/etc` are not there
unless a world binds them (`ro_binds`). The same folder is the Docker backend's offline image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from envs.sandbox.base import SandboxError

VERSION = 1  # bump when the layout changes
SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
COMMANDS = (
    # shells and process tools
    "sh", "dash", "bash", "env", "timeout", "prlimit", "setsid", "nohup", "nice", "kill", "ps",
    "pgrep", "pkill", "sleep", "true", "false", "test", "[", "yes", "xargs", "which", "time",
    # files
    "ls", "cat", "cp", "mv", "rm", "mkdir", "rmdir", "touch", "chmod", "ln", "readlink",
    "realpath", "basename", "dirname", "stat", "du", "df", "find", "mktemp", "install", "sync",
    "truncate", "dd",
    # text
    "echo", "printf", "head", "tail", "wc", "sort", "uniq", "cut", "tr", "tee", "paste", "join",
    "comm", "fold", "fmt", "nl", "od", "rev", "tac", "shuf", "split", "csplit", "expand",
    "unexpand", "column", "seq", "expr", "grep", "egrep", "fgrep", "sed", "awk", "mawk", "gawk",
    "diff", "cmp", "diff3", "sdiff", "patch", "iconv", "base64", "base32", "md5sum", "sha1sum",
    "sha256sum", "sha512sum", "cksum", "hexdump", "xxd", "strings",
    # archives
    "tar", "gzip", "gunzip", "zcat", "bzip2", "bunzip2", "xz", "unxz", "zip", "unzip",
    # identity and time
    "id", "whoami", "groups", "uname", "hostname", "date", "nproc", "getconf", "locale", "tty",
    "stty", "printenv", "pwd",
    # languages and tools the tasks use
    "python3", "git", "make",
)
SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
               "site-packages", "dist-packages", "sitecustomize.py", "__phello__"}
ETC_FILES = {
    "passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n"
              "sandbox:x:1000:1000:sandbox:/tmp:/bin/sh\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
    "resolv.conf": "",  # a mount point: the host's is bound when the network is on
}
ETC_DIRS = ("ssl",)  # mount points too
READY = ".trajforge-sysroot.json"


@dataclass(frozen=True)
class SysRoot:
    """An assembled root: `path` holds the host paths in `files` below the top folders in
    `tops`; `links` are the host's top-level symlinks (`/bin` -> `usr/bin`)."""

    path: Path
    key: str
    tops: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    files: frozenset[str]

    def visible(self, host_path: str) -> bool:
        """Whether a host path (a binary, say) exists inside the sandbox."""
        return _normal(host_path) in self.files

    def bwrap_args(self) -> list[str]:
        """bwrap arguments that mount this root (read-only) as the sandbox's system."""
        args: list[str] = []
        for top in self.tops:
            args += ["--ro-bind", str(self.path / top), "/" + top]
        for name, target in self.links:
            args += ["--symlink", target, "/" + name]
        return args


def _normal(path: str) -> str:
    """`path` with its folder resolved (`/bin/sh` -> `/usr/bin/sh` on a merged /usr)."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _readable(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IROTH)


def _chain(path: str, out: dict[str, os.stat_result], limit: int = 16) -> None:
    """Add `path` and every symlink on the way to its target to `out`."""
    for _ in range(limit):
        path = _normal(path)
        if path in out:
            return
        try:
            st = os.lstat(path)
        except OSError:
            return
        if not _readable(st) and not stat.S_ISLNK(st.st_mode):
            return
        out[path] = st
        if not stat.S_ISLNK(st.st_mode):
            return
        path = os.path.join(os.path.dirname(path), os.readlink(path))


def _tree(root: str, out: dict[str, os.stat_result], skip: frozenset[str] | set[str] = frozenset()) -> None:
    """Add `root` and everything under it (symlinks as links, not followed)."""
    root = _normal(root)
    if not os.path.isdir(root):
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            if name in skip:
                continue
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                _chain(p, out)
            elif stat.S_ISREG(st.st_mode) and _readable(st):
                out[p] = st


def _python_paths(python: str) -> list[str]:
    """The standard library folder of the system interpreter `python`."""
    try:
        proc = subprocess.run([python, "-I", "-S", "-c",
                               "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [p for p in proc.stdout.split() if os.path.isdir(p)] if proc.returncode == 0 else []


def _git_paths(git: str) -> list[str]:
    try:
        proc = subprocess.run([git, "--exec-path"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    paths = [proc.stdout.strip()] if proc.returncode == 0 else []
    return [p for p in paths + ["/usr/share/git-core/templates"] if p and os.path.isdir(p)]


def _libraries(files: Iterable[str]) -> list[str]:
    """The shared libraries (and loader) that the ELF files among `files` load."""
    elves = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    elves.append(f)
        except OSError:
            continue
    ldd = shutil.which("ldd", path=SYSTEM_PATH)
    if not elves or ldd is None:
        return []
    libs: set[str] = set()
    for i in range(0, len(elves), 200):
        try:
            proc = subprocess.run([ldd, *elves[i:i + 200]], capture_output=True, text=True,
                                  timeout=120, env={"PATH": SYSTEM_PATH, "LC_ALL": "C"})
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SandboxError(f"ldd failed while assembling the sandbox root: {e}") from e
        for line in proc.stdout.splitlines():
            line = line.strip()
            if "=>" in line:
                target = line.split("=>", 1)[1].strip().split(" (", 1)[0]
            else:
                target = line.split(" (", 1)[0]
            if target.startswith("/"):
                libs.add(target)
    return sorted(libs)


def _collect(commands: Iterable[str]) -> dict[str, os.stat_result]:
    out: dict[str, os.stat_result] = {}
    found: dict[str, str] = {}
    for name in commands:
        path = shutil.which(name, path=SYSTEM_PATH)
        if path is not None:
            found[name] = path
            _chain(path, out)
    if "python3" in found:
        for p in _python_paths(found["python3"]):
            _tree(p, out, SKIP_STDLIB | {n for n in os.listdir(p) if n.startswith("config-")})
    if "git" in found:
        for p in _git_paths(found["git"]):
            _tree(p, out)
    if os.path.isdir("/usr/lib/locale/C.utf8"):
        _tree("/usr/lib/locale/C.utf8", out)
    regular = [p for p, st in out.items() if stat.S_ISREG(st.st_mode)]
    for lib in _libraries(regular):
        _chain(lib, out)
    return out


def _key(commands: tuple[str, ...]) -> str:
    """Cheap identity of what `_collect` would find: the list, the commands' files, the
    python and git folders, and the loader cache (rewritten whenever libraries change)."""
    parts: list[str] = [str(VERSION), json.dumps(ETC_FILES, sort_keys=True), *commands]
    for name in commands:
        path = shutil.which(name, path=SYSTEM_PATH)
        if path is not None:
            real = os.path.realpath(path)
            st = os.stat(real)
            parts.append(f"{name}={real}:{st.st_size}:{st.st_mtime_ns}")
    for extra in ("/etc/ld.so.cache", "/usr/lib/git-core"):
        try:
            parts.append(f"{extra}:{os.stat(extra).st_mtime_ns}")
        except OSError:
            parts.append(f"{extra}:-")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _place(src: str, st: os.stat_result, dest: Path, inodes: dict[tuple[int, int], Path]) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dest)
        return
    seen = inodes.get((st.st_dev, st.st_ino))
    try:
        os.link(seen if seen is not None else src, dest)
    except OSError:  # another file system, or protected hard links: copy
        shutil.copy2(src, dest)
        os.chmod(dest, stat.S_IMODE(st.st_mode) & 0o755 | 0o444)
    inodes.setdefault((st.st_dev, st.st_ino), dest)


def _build(target: Path, commands: tuple[str, ...]) -> None:
    files = _collect(commands)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        os.chmod(tmp, 0o755)
        inodes: dict[tuple[int, int], Path] = {}
        for src, st in sorted(files.items()):
            _place(src, st, tmp / src.lstrip("/"), inodes)
        etc = tmp / "etc"
        etc.mkdir(exist_ok=True)
        for name, text in ETC_FILES.items():
            (etc / name).write_text(text)
            (etc / name).chmod(0o644)
        for name in ETC_DIRS:
            (etc / name).mkdir(exist_ok=True)
        for dirpath, _, _ in os.walk(tmp):
            os.chmod(dirpath, 0o755)
        manifest = {"version": VERSION, "commands": list(commands), "files": sorted(files)}
        (tmp / READY).write_text(json.dumps(manifest))
        if target.exists():  # damaged (a temp-folder cleaner took files): swap it out
            stale = target.with_name(f"{target.name}.stale-{os.getpid()}")
            os.rename(target, stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / READY).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _trusted(path: Path) -> bool:
    """A root folder we made: ours, a real folder, not writable by others."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _intact(target: Path) -> bool:
    """A finished root with every file of its manifest still there (temp folders get
    cleaned; checked once per process)."""
    try:
        manifest = json.loads((target / READY).read_text())
    except (OSError, ValueError):
        return False
    return all(os.path.lexists(target / f.lstrip("/")) for f in manifest.get("files", []))


_cache: dict[tuple[str, ...], SysRoot] = {}
_lock = threading.Lock()


def system_root(commands: Iterable[str] = (), base_dir: Path | str | None = None) -> SysRoot:
    """The assembled root for `COMMANDS` plus `commands` (built on first use, then reused
    by every process of this user on this host until the host's files change)."""
    cmds = tuple(dict.fromkeys([*COMMANDS, *commands]))
    base = Path(base_dir or os.environ.get("TRAJFORGE_SANDBOX_DIR") or tempfile.gettempdir())
    with _lock:
        cached = _cache.get((str(base), *cmds))
        if cached is not None and cached.path.is_dir():  # host changes show in the next process
            return cached
        key = _key(cmds)
        base.mkdir(parents=True, exist_ok=True)
        target = base / f"trajforge-sysroot-{os.geteuid()}-{key}"
        if target.exists() and not _trusted(target):
            raise SandboxError(f"{target} exists but is not a sandbox root made by this user")
        if not _intact(target):
            _build(target, cmds)
        manifest = json.loads((target / READY).read_text())
        # Paths were collected with their folders resolved, so the host's top-level links
        # (a merged /usr) never hold files here: they are recreated as links.
        tops = tuple(sorted(n for n in os.listdir(target) if n != READY))
        links = tuple((n, os.readlink("/" + n)) for n in ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
                      if os.path.islink("/" + n) and n not in tops)
        root = SysRoot(path=target, key=key, tops=tops, links=links, files=frozenset(manifest["files"]))
        _cache[(str(base), *cmds)] = root
        return root
