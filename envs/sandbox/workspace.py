"""The host side of a sandbox workspace: a private folder, its files, snapshots and size.

Commands inside the sandbox may leave anything in the workspace (symlinks to host files,
FIFOs, deep trees), and this code runs on the host, often as root. So every host-side access
refuses paths that leave the workspace, never follows a symlink out of it and reads only
regular files. Snapshots are uncompressed tar archives held in memory, with the mode of the
workspace folder itself: a command may `chmod 000 .` (or `0777`), and a restore puts the
root's mode and owner back, so the next user of a pooled sandbox gets it as prepared.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envs.sandbox.base import SandboxError

SANDBOX_DIR_ENV = "TRAJFORGE_SANDBOX_DIR"  # where workspaces are created (default: the temp dir)


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """An opaque, immutable copy of a workspace (a tar archive in memory; `root_mode`: the
    permission bits of the workspace folder itself)."""

    data: bytes
    root_mode: int = 0o755

    @property
    def size(self) -> int:
        return len(self.data)


class Workspace:
    """A private folder `path` (inside its own `root`), owned by `owner` when we are root."""

    def __init__(self, source: Path | None = None, *, owner: int | None = None,
                 base_dir: Path | str | None = None, prefix: str = "trajforge-sbx-",
                 at: Path | None = None) -> None:
        """A new private folder, or (`at`) an existing empty one that someone else made and
        removes (a Docker volume's mount point); `source` is copied into it."""
        if source is not None and not Path(source).is_dir():
            raise SandboxError(f"sandbox source {str(source)!r} is not a folder")
        self.owner = owner if os.geteuid() == 0 else None
        self._owned = at is None
        if at is not None:
            self.root, self.path = Path(at).parent, Path(at)
        else:
            base = base_dir or os.environ.get(SANDBOX_DIR_ENV) or None
            if base is not None:
                Path(base).mkdir(parents=True, exist_ok=True)
            self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
            self.path = self.root / "ws"
        try:
            if source is not None:
                shutil.copytree(source, self.path, symlinks=True, dirs_exist_ok=at is not None)
            elif at is None:
                self.path.mkdir()
            self.path.chmod(0o755)
            self._chown_tree(self.root if at is None else self.path)
        except BaseException:
            self.remove()
            raise

    # ---- ownership -------------------------------------------------------------------
    def _chown_tree(self, top: Path) -> None:
        if self.owner is None:
            return
        os.chown(top, self.owner, self.owner, follow_symlinks=False)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                os.chown(os.path.join(dirpath, name), self.owner, self.owner,
                         follow_symlinks=False)

    # ---- paths -----------------------------------------------------------------------
    def resolve(self, rel: str) -> Path:
        """The host path of workspace-relative `rel`; it and its parents must stay inside."""
        if not isinstance(rel, str) or not rel or "\0" in rel:
            raise ValueError(f"bad workspace path {rel!r}")
        if os.path.isabs(rel):
            raise ValueError(f"workspace path must be relative, got {rel!r}")
        parts = Path(os.path.normpath(rel)).parts
        if not parts or parts[0] in ("..", ".") or ".." in parts:
            raise ValueError(f"workspace path {rel!r} leaves the workspace")
        target = self.path.joinpath(*parts)
        real_ws = os.path.realpath(self.path)
        real_parent = os.path.realpath(target.parent)
        if os.path.commonpath([real_ws, real_parent]) != real_ws:
            raise ValueError(f"workspace path {rel!r} leaves the workspace (through a symlink)")
        return target

    def read(self, rel: str) -> bytes:
        target = self.resolve(rel)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            raise FileNotFoundError(f"no file {rel!r} in the workspace") from None
        except OSError as e:  # ELOOP: the last component is a symlink
            raise ValueError(f"cannot read {rel!r} from the workspace: {e.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(f"workspace path {rel!r} is not a regular file")
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def write(self, rel: str, data: bytes | str) -> None:
        target = self.resolve(rel)
        if isinstance(data, str):
            data = data.encode()
        missing = []
        parent = target.parent
        while not parent.exists():
            missing.append(parent)
            parent = parent.parent
        target.parent.mkdir(parents=True, exist_ok=True)
        for d in missing:
            self._chown_one(d)
        if target.is_symlink():
            target.unlink()  # replace the link itself, never write through it
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        self._chown_one(target)

    def _chown_one(self, p: Path) -> None:
        if self.owner is not None:
            os.chown(p, self.owner, self.owner, follow_symlinks=False)

    # ---- snapshots -------------------------------------------------------------------
    def snapshot(self) -> WorkspaceSnapshot:
        mode = stat.S_IMODE(os.lstat(self.path).st_mode)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for entry in sorted(os.listdir(self.path)):
                tar.add(self.path / entry, arcname=entry, recursive=True)
        return WorkspaceSnapshot(buf.getvalue(), mode)

    def clear(self) -> None:
        """Remove everything in the workspace, whatever modes the commands left on it."""
        os.chmod(self.path, 0o700)  # the owner (this process, or root) may always chmod it
        try:
            self._clear()
        except PermissionError:  # folders a command made unreadable (only without root)
            self._make_removable()
            self._clear()

    def _clear(self) -> None:
        for entry in os.scandir(self.path):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)

    def _make_removable(self) -> None:
        stack = [str(self.path)]
        while stack:
            d = stack.pop()
            try:
                os.chmod(d, stat.S_IMODE(os.lstat(d).st_mode) | 0o700)
                entries = list(os.scandir(d))
            except OSError:
                continue
            stack += [e.path for e in entries if e.is_dir(follow_symlinks=False)]

    def restore(self, snap: WorkspaceSnapshot) -> None:
        if not isinstance(snap, WorkspaceSnapshot):
            raise TypeError(f"expected a WorkspaceSnapshot, got {type(snap).__name__}")
        self.clear()
        with tarfile.open(fileobj=io.BytesIO(snap.data), mode="r") as tar:
            # Our own archive of a directory walk: members never pass through a symlink.
            tar.extractall(self.path, numeric_owner=True, filter="fully_trusted")
        self._chown_one(self.path)
        os.chmod(self.path, snap.root_mode)

    def load_archive(self, data: bytes, top: str = "workspace") -> None:
        """Replace the workspace with `top/` of a tar made elsewhere (untrusted: a remote
        container's workspace). Members that leave the workspace (absolute, `..`, through a
        symlink already extracted, hard links to outside) and devices or FIFOs are skipped;
        symlinks are kept as links (nothing here follows them); setuid bits are dropped."""
        self.clear()
        root_mode = 0o755
        real_ws = os.path.realpath(self.path)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for m in tar.getmembers():
                name = m.name.rstrip("/")
                if name == top:
                    root_mode = stat.S_IMODE(m.mode) & 0o1777
                    continue
                if not name.startswith(top + "/"):
                    continue
                rel = os.path.normpath(name[len(top) + 1:])
                if os.path.isabs(rel) or rel == ".." or rel.startswith("../") or "\0" in rel:
                    continue
                if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
                    continue
                parent = os.path.realpath(os.path.join(self.path, os.path.dirname(rel)))
                if os.path.commonpath([real_ws, parent]) != real_ws:
                    continue  # through a symlink out of the workspace
                if m.islnk():
                    link = os.path.normpath(m.linkname)
                    if not link.startswith(top + "/"):
                        continue
                    m.linkname = link[len(top) + 1:]
                m.name = rel
                m.mode &= 0o1777
                tar.extract(m, self.path, numeric_owner=True, filter="fully_trusted")
        os.chmod(self.path, root_mode)

    # ---- size ------------------------------------------------------------------------
    def disk_bytes(self) -> int:
        """Bytes of disk the workspace uses (allocated blocks; sparse holes are free)."""
        total = 0
        stack = [str(self.path)]
        while stack:
            try:
                it = os.scandir(stack.pop())
            except OSError:
                continue
            with it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(e.path)
        return total

    def remove(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)
