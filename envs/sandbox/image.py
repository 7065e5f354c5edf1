"""The Docker backend's default image, built offline from this host's files.

No registry is contacted: the image is the bubblewrap sandbox's assembled root
(`envs.sandbox.sysroot`: the listed shell tools, the system python3 with its standard
library, git, their shared libraries, a synthetic `/etc`), plus this environment's pytest
and its pure-Python dependencies in the system python's site folder, an empty `/workspace`
owned by the sandbox user (uid 1000), `/sandbox-io` and `/tmp`. It is written as a tar and
`docker import`ed (`trajforge sandbox build-image`, `make sandbox-image`, or on first use).

The tag carries a content hash (`trajforge-sandbox:<hash>` of the root's key, the pytest
files and the layout), so a rebuild is skipped while nothing changed, and a host upgrade
gives a new tag. Any other image works too (`image=...`): it needs `sh`, coreutils'
`timeout`, python3 and pytest for terminal tasks, and uid 1000 able to write `/workspace`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from envs.sandbox.base import SandboxError
from envs.sandbox.sysroot import SYSTEM_PATH, SysRoot, system_root

log = logging.getLogger(__name__)

REPOSITORY = "trajforge-sandbox"
LAYOUT = 1  # bump when the image layout changes
SANDBOX_UID = 1000
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp"}


def _site_folder(python: str = "/usr/bin/python3") -> str:
    """The system interpreter's first site folder (on its default `sys.path`)."""
    try:
        out = subprocess.run([python, "-I", "-c", "import site; print(site.getsitepackages()[0])"],
                             capture_output=True, text=True, timeout=30, env={"PATH": SYSTEM_PATH})
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxError(f"cannot ask {python} for its site folder: {e}") from e
    if out.returncode != 0 or not out.stdout.strip().startswith("/"):
        raise SandboxError(f"cannot ask {python} for its site folder: {out.stderr.strip()}")
    return out.stdout.strip()


def _pytest_files() -> list[tuple[str, Path]]:
    """(name inside the site folder, host path) of every file of pytest and its dependencies."""
    from envs.workspace import pytest_paths

    files: list[tuple[str, Path]] = []
    for p in map(Path, pytest_paths()[1]):
        if p.is_file():
            files.append((p.name, p))
            continue
        for f in sorted(p.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                files.append((str(f.relative_to(p.parent)), f))
    return files


def image_tag(root: SysRoot | None = None) -> str:
    """`trajforge-sandbox:<hash>` of what `build_image` would put in the image."""
    root = root or system_root()
    h = hashlib.sha256(f"{LAYOUT}\n{root.key}\n{sorted(ENV.items())}\n".encode())
    for name, path in _pytest_files():
        st = path.stat()
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return f"{REPOSITORY}:{h.hexdigest()[:16]}"


def _dir(tar: tarfile.TarFile, name: str, mode: int = 0o755, uid: int = 0) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, mode, uid, uid, 0
    tar.addfile(info)


def write_image_tar(out: Path, root: SysRoot | None = None) -> None:
    """The image's root filesystem as a tar at `out`."""
    root = root or system_root()
    site = _site_folder().lstrip("/")
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for top in root.tops:  # usr/, etc/: hard links inside the root stay hard links
            tar.add(root.path / top, arcname=top, recursive=True, filter=_owned_by_root)
        for name, target in root.links:  # bin -> usr/bin and the like
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
        made: set[str] = set()
        for name, path in _pytest_files():
            parts = f"{site}/{name}".split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in made and not (root.path / d).is_dir():
                    _dir(tar, d)
                made.add(d)
            info = tar.gettarinfo(str(path), arcname=f"{site}/{name}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o644
            with open(path, "rb") as f:
                tar.addfile(info, f)
        for name, mode, uid in (("workspace", 0o755, SANDBOX_UID), ("sandbox-io", 0o755, 0),
                                ("tmp", 0o1777, 0), ("proc", 0o555, 0), ("sys", 0o555, 0),
                                ("dev", 0o755, 0), ("run", 0o755, 0)):
            _dir(tar, name, mode, uid)


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode &= 0o1777  # no setuid or setgid bits in the image
    return info


def build_image(client: Any = None, force: bool = False) -> str:
    """Make (unless it exists) the default image and return its tag."""
    import docker

    client = client or docker.from_env()
    root = system_root()
    tag = image_tag(root)
    if not force:
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
    repo, _, version = tag.partition(":")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trajforge-image-") as tmp:
        path = Path(tmp) / "rootfs.tar"
        write_image_tar(path, root)
        changes = [f"ENV {k}={v}" for k, v in ENV.items()] + ["WORKDIR /workspace", 'CMD ["sh"]']
        try:
            client.api.import_image_from_file(str(path), repository=repo, tag=version, changes=changes)
        except docker.errors.APIError as e:
            raise SandboxError(f"docker import of the sandbox image failed: {e}") from e
        size = path.stat().st_size
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        raise SandboxError(f"docker import reported success but {tag} is not there") from None
    log.info("built %s (%.0f MB tar) in %.1f s", tag, size / 2**20, time.monotonic() - t0)
    return tag


def image_contents() -> dict[str, Any]:
    """What the default image holds (for docs and `trajforge sandbox build-image`)."""
    root = system_root()
    bins = sorted({os.path.basename(f) for f in root.files if "/bin/" in f})
    return {"tag": image_tag(root), "commands": bins, "files": len(root.files),
            "pytest_site": _site_folder(), "pytest_files": len(_pytest_files())}

