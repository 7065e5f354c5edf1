"""The part of the host a sandbox sees (`envs.sandbox.sysroot`): the listed commands with
their libraries, a synthetic /etc, nothing else; built once and reused."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from envs.sandbox import SandboxError
from envs.sandbox.sysroot import ETC_FILES, SYSTEM_PATH, system_root

pytestmark = pytest.mark.skipif(shutil.which("sh", path=SYSTEM_PATH) is None, reason="no system shell")


def test_the_root_holds_the_listed_commands_and_a_synthetic_etc() -> None:
    root = system_root()
    for cmd in ("sh", "ls", "grep", "python3", "git"):
        host = shutil.which(cmd, path=SYSTEM_PATH)
        if host is not None:
            assert root.visible(host), cmd
    assert not root.visible("/usr/local/bin/anything") and not root.visible("/etc/shadow")
    assert not any(f.startswith(("/home/", "/root/", "/opt/")) for f in root.files)
    assert (root.path / "etc" / "passwd").read_text() == ETC_FILES["passwd"]
    assert set(os.listdir(root.path / "etc")) - {*ETC_FILES, "ssl"} <= {"alternatives"}  # awk's links
    args = root.bwrap_args()
    mounts = [args[i + 2] for i, a in enumerate(args) if a == "--ro-bind"]
    assert "/etc" in mounts and "/usr" in mounts and "/home" not in mounts
    assert [args[i + 1] for i, a in enumerate(args) if a == "--ro-bind"] == [str(root.path / t) for t in root.tops]
    assert system_root() is root  # built once per process


def test_a_folder_this_user_did_not_make_is_refused(tmp_path: Path) -> None:
    key = system_root().key
    target = tmp_path / system_root().path.name
    target.mkdir()
    target.chmod(0o777)  # writable by anyone: not a root this user made
    with pytest.raises(SandboxError, match="not a sandbox root made by this user"):
        system_root(base_dir=tmp_path)
    assert system_root().key == key
