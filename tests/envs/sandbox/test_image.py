"""The offline sandbox image (`envs.sandbox.image`): its content-hashed tag and, with a
daemon, the image itself."""

from __future__ import annotations

import dataclasses
import re
import time

from envs.sandbox import open_sandbox
from envs.sandbox.image import image_tag
from envs.sandbox.sysroot import system_root
from tests.envs.sandbox.conftest import FAST


def test_the_tag_hashes_the_root_and_is_stable() -> None:
    root = system_root()
    tag = image_tag(root)
    assert re.fullmatch(r"trajforge-sandbox:[0-9a-f]{16}", tag)
    assert image_tag(root) == tag == image_tag()  # the default root is the same
    assert image_tag(dataclasses.replace(root, key="0" * 16)) != tag  # other host files, other image


def test_docker_offline_image(docker_ok) -> None:
    import docker

    from envs.sandbox.image import build_image

    tag = image_tag()
    assert tag.startswith("trajforge-sandbox:") and len(tag.split(":")[1]) == 16
    t0 = time.perf_counter()
    assert build_image() == tag and time.perf_counter() - t0 < 5  # same content: not rebuilt
    image = docker.from_env().images.get(tag)
    assert not image.attrs.get("RepoDigests")  # never pulled from (or pushed to) a registry
    with open_sandbox("docker", None, FAST) as sb:
        r = sb.run("python3 -c 'import pytest, sys; print(pytest.__version__, sys.version_info[0])'; "
                   "git --version; timeout --version | head -1; ls /opt /home 2>&1; true")
        assert r.stdout.split()[1] == "3" and "git version" in r.stdout and "timeout" in r.stdout, r
        assert r.stdout.count("No such file") == 2
