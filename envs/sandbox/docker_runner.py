"""The command runner that lives inside a Docker sandbox (standard library only).

`docker exec` costs a runtime round trip (`runc exec`: namespaces, cgroup, seccomp set up
again), about 45 ms on two cores, whatever the command. The Docker backend therefore starts
this script once per container, as the sandbox user, with one exec whose stdin and stdout
stay attached, and sends it one JSON line per command; it answers with one JSON line. A
command then costs a fork and an exec inside the container.

It does for each command what the backend's shell wrapper does for a `docker exec`:

- the command runs in `/workspace` with the container's environment plus the request's,
  stdin from the request's file (else `/dev/null`), stdout and stderr kept up to `cap`
  bytes each and counted past it; past `flood` bytes on one stream it is killed ("output");
- past `timeout` seconds it is killed ("timeout", exit status 137);
- afterwards every other process of the sandbox user is killed (`kill(-1, SIGKILL)` spares
  only the caller: this runner) and `/tmp` and `/dev/shm` are emptied, so nothing a command
  starts outlives it.

The runner makes itself non-dumpable first (`prctl(PR_SET_DUMPABLE, 0)`), so commands of the
same uid cannot open its `/proc/<pid>/fd` or memory to read a request or forge an answer;
it refuses to run where it cannot. Answers carry the request's `id`, a random value the
command never sees. A command can still kill the runner (same uid, e.g. `kill -9 -1`): the
backend sees the stream end, reports the command as lost (exit status 137, what it printed
is gone), restarts the container and starts a new runner.

Protocol: the source arrives on stdin (its length is argv[1], see `RUNNER_BOOT`); the first
line out is `{"ready": VERSION}`; then per request
`{"id", "argv", "timeout", "env", "stdin", "cap", "flood"}` the answer
`{"id", "rc", "out", "err" (base64), "seen": [stdout, stderr], "killed_by", "duration_s",
"cpu_s"}`. Written for any python3 of the last years (3.6+), since images vary.
"""

import base64
import contextlib
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time

VERSION = 1
WORKSPACE = "/workspace"
SCRATCH = ("/tmp", "/dev/shm")


def nondumpable():
    """True once this process is non-dumpable (PR_SET_DUMPABLE = 4, value 0). It is also
    renamed (PR_SET_NAME = 15), so a command's `pkill python` or `killall python3` (which
    match the name) leaves it alone."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, b"sandbox-runner", 0, 0, 0)
        return libc.prctl(4, 0, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001 - no ctypes or no prctl: refuse to run
        return False


def kill_all():
    """SIGKILL every process this uid may signal except this one (twice: a fork may race)."""
    for _ in range(2):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(-1, signal.SIGKILL)


def empty_scratch():
    for folder in SCRATCH:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


def run(req):
    """Run one request; the answer without its `id`."""
    t0 = time.monotonic()
    cap, flood = int(req["cap"]), int(req["flood"])
    env = dict(os.environ)
    env.update(req.get("env") or {})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        stdin = open(req.get("stdin") or os.devnull, "rb")  # noqa: SIM115 - closed once started
    except OSError as e:
        return {"rc": 126, "out": "", "err": base64.b64encode(str(e).encode()).decode(),
                "seen": [0, len(str(e))], "killed_by": None, "duration_s": 0.0, "cpu_s": 0.0}
    try:
        proc = subprocess.Popen(req["argv"], cwd=WORKSPACE, env=env, stdin=stdin,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                close_fds=True, start_new_session=True)
    except OSError as e:  # as `timeout` reports a command it cannot run
        stdin.close()
        msg = "{}: {}\n".format(req["argv"][0], e.strerror or e)
        rc = 127 if isinstance(e, FileNotFoundError) else 126
        return {"rc": rc, "out": "", "err": base64.b64encode(msg.encode()).decode(),
                "seen": [0, len(msg)], "killed_by": None,
                "duration_s": time.monotonic() - t0, "cpu_s": 0.0}
    stdin.close()
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    fds = {proc.stdout.fileno(): 0, proc.stderr.fileno(): 1}
    bufs, seen = [bytearray(), bytearray()], [0, 0]
    deadline = t0 + float(req["timeout"])
    killed_by = None
    status = None
    drain_until = None
    while True:
        if status is None:
            pid, st = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                status = st
                kill_all()  # what it left running would hold the pipes open
                drain_until = time.monotonic() + 1.0
        now = time.monotonic()
        if not fds and status is not None:
            break
        if drain_until is not None and now >= drain_until:
            break  # a writer outside our reach: stop waiting for EOF
        if killed_by is None and now >= deadline:
            killed_by = "timeout"
            kill_all()
        wait = max(0.0, deadline - now) if status is None and killed_by is None else 0.05
        watch = list(fds) + ([pidfd] if pidfd is not None and status is None else [])
        if not watch:
            time.sleep(min(wait, 0.005))
            continue
        ready = select.select(watch, [], [], wait if pidfd is not None or status is not None
                              else min(wait, 0.01))[0]
        for fd in ready:
            if fd == pidfd:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                del fds[fd]
                continue
            i = fds[fd]
            seen[i] += len(chunk)
            room = cap - len(bufs[i])
            if room > 0:
                bufs[i] += chunk[:room]
            if seen[i] > flood and killed_by is None:
                killed_by = "output"
                kill_all()
    if status is None:  # killed while it ran: reap it
        _, status = os.waitpid(proc.pid, 0)
    if pidfd is not None:
        os.close(pidfd)
    proc.stdout.close()
    proc.stderr.close()
    kill_all()
    empty_scratch()
    rc = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    if killed_by == "timeout":
        rc = 137
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": rc, "out": base64.b64encode(bytes(bufs[0])).decode(),
            "err": base64.b64encode(bytes(bufs[1])).decode(), "seen": seen,
            "killed_by": killed_by, "duration_s": time.monotonic() - t0, "cpu_s": cpu}


def main():
    out = sys.stdout.buffer
    if not nondumpable():
        out.write(b'{"error": "cannot make the runner non-dumpable"}\n')
        out.flush()
        return 3
    out.write(json.dumps({"ready": VERSION}).encode() + b"\n")
    out.flush()
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        req = json.loads(line)
        answer = run(req)
        answer["id"] = req["id"]
        out.write(json.dumps(answer).encode() + b"\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
