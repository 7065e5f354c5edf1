"""The docker container's configuration (`envs.sandbox.container`): limits, seccomp profile,
volumes and the exec wrapper, checked without a daemon."""

from __future__ import annotations

import pytest

from envs.sandbox import Limits


def test_docker_config_applies_limits() -> None:
    pytest.importorskip("docker")
    import json

    from envs.sandbox.container import WRAPPER, container_config, exec_argv, seccomp_profile

    lim = Limits(memory_mb=300, processes=20, cpu_s=5, file_size_mb=2, open_files=99,
                 disk_mb=50)
    cfg = container_config(lim, "img", volume="v", io_volume="io", cpus=0.5)
    assert cfg["mem_limit"] == cfg["memswap_limit"] == "300m" and cfg["pids_limit"] == 20
    assert cfg["network_disabled"] and cfg["network_mode"] == "none" and cfg["read_only"]
    assert cfg["nano_cpus"] == 500_000_000 and cfg["init"] and cfg["user"] == "0:0"
    assert cfg["volumes"]["v"] == {"bind": "/workspace", "mode": "rw"}
    assert "size=50m" in cfg["tmpfs"]["/tmp"] and cfg["cap_drop"] == ["ALL"]
    assert "no-new-privileges" in cfg["security_opt"]
    profile = json.loads(next(o for o in cfg["security_opt"] if o.startswith("seccomp="))[8:])
    assert profile == seccomp_profile() and profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {n for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ERRNO" and "args" not in r
              for n in r["names"]}
    assert {"ptrace", "mount", "keyctl", "bpf", "perf_event_open", "unshare", "setns"} <= denied
    assert sum(r["names"] == ["clone"] for r in profile["syscalls"]) == 8  # one per namespace flag
    ul = {u["Name"]: (u["Soft"], u["Hard"]) for u in cfg["ulimits"]}
    assert ul["cpu"] == (5, 6) and ul["fsize"] == (2 << 20, 2 << 20) and ul["nofile"] == (99, 99)
    net = container_config(Limits(network=True), "img", volume="v", io_volume="io", seccomp=False)
    assert not net["network_disabled"] and net["network_mode"] == "host"  # as bwrap's --share-net
    assert "seccomp=unconfined" in net["security_opt"]
    assert exec_argv(["ls"], 2.5) == ["sh", "-c", WRAPPER, "sh", "2.500", "", "ls"]
    assert exec_argv(["cat"], 1, "/sandbox-io/stdin-1")[4:] == ["1.000", "/sandbox-io/stdin-1", "cat"]
    with pytest.raises(ValueError):
        container_config(lim, "img", volume="v", io_volume="io", cpus=0)
