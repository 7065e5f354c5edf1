"""The command runner inside a docker sandbox (`envs.sandbox.docker_runner`): its protocol,
run here in a bubblewrap sandbox (a private pid namespace, so its `kill(-1)` reaches only
the sandbox), and, with a daemon, what commands in a container can do to it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import envs.sandbox.docker_runner as docker_runner
from envs.sandbox import Limits, open_sandbox
from tests.envs.sandbox.conftest import FAST, SYS_PY, healthy, needs_bwrap, needs_py


def request(rid: str, argv: list[str], timeout: float = 5, **kw: object) -> str:
    return json.dumps({"id": rid, "argv": argv, "timeout": timeout, "env": {}, "stdin": None, "cap": 100,
                       "flood": 800, **kw}) + "\n"


@needs_bwrap
@needs_py
def test_runner_protocol_output_timeout_flood_and_leftovers() -> None:
    reqs = [request("a", ["sh", "-c", "echo $X; echo err >&2; sleep 30 & exit 3"], env={"X": "from-request"}),
            request("b", ["sleep", "10"], timeout=0.5),
            request("c", ["yes"]),
            request("d", ["no-such-command"]),
            request("e", ["sh", "-c", "ps -eo comm | grep -c '^sleep$'; true"])]
    with open_sandbox("bwrap", None, Limits(timeout_s=20)) as sb:
        sb.write_file("runner.py", Path(docker_runner.__file__).read_text())
        r = sb.run([SYS_PY, "runner.py"], stdin="".join(reqs))
    assert r.ok, r
    ready, *answers = [json.loads(line) for line in r.stdout.splitlines()]
    assert ready == {"ready": docker_runner.VERSION}
    got = {a["id"]: a for a in answers}
    assert list(got) == ["a", "b", "c", "d", "e"]

    def out(rid: str, stream: str = "out") -> bytes:
        return base64.b64decode(got[rid][stream])

    assert got["a"]["rc"] == 3 and out("a") == b"from-request\n" and out("a", "err") == b"err\n"
    assert got["b"]["rc"] == 137 and got["b"]["killed_by"] == "timeout" and got["b"]["duration_s"] < 3
    assert got["c"]["killed_by"] == "output" and len(out("c")) == 100 and got["c"]["seen"][0] > 800
    assert got["d"]["rc"] == 127 and b"no-such-command" in out("d", "err")
    assert out("e") == b"0\n"  # the sleep "a" left behind was killed after it


def test_docker_runner_what_commands_can_reach_and_losing_it(docker_ok) -> None:
    """Commands go through the container's runner: renamed and non-dumpable, so a command of
    the same uid sees it but cannot open its fds, environment or memory (to read a request
    or forge an answer), and `pkill python3` misses it. A command that kills it is reported
    lost, the container restarts and the next command gets a new runner. Without the runner
    (`exec_server=False`) the wrapper's shell is the caller of `kill -9 -1`, and its output
    survives."""
    with open_sandbox("docker", None, FAST) as sb:
        assert sb.runner_unusable is None and sb._runner is not None
        r = sb.run('for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sandbox-runner ] && echo $p; done; true')
        (proc,) = r.stdout.split()
        r = sb.run(f"ls {proc}/fd; cat {proc}/environ; head -c 8 {proc}/mem; pkill python3; pkill -x python3; true")
        assert r.stderr.count("Permission denied") == 3, r
        assert sb.run(f"cat {proc}/comm").stdout == "sandbox-runner\n"  # still there
        r = sb.run("""echo '{"id": "x", "rc": 0, "out": "", "err": ""}'; exit 3""")
        assert r.returncode == 3 and r.stdout.startswith('{"id": "x"'), r  # only its output
        r = sb.run("kill -9 -1; echo after")
        assert r.returncode == 137 and "runner lost" in r.stderr and not r.ok, r
        healthy(sb)
        assert sb._runner is not None
    with open_sandbox("docker", None, FAST, exec_server=False) as sb:
        assert sb._runner is None and sb.runner_unusable == "exec_server=False"
        r = sb.run("kill -9 -1; echo after")
        assert r.stdout == "after\n", r  # (its `timeout` parent was killed: exit status 137)
        healthy(sb)
