"""Sandboxes: escape probes and functions on every isolating backend (bwrap and docker).

Each probe runs a real attack inside a sandbox, checks it was blocked or killed within its
limit and reported, that the host is untouched, and that the next command works. Where it
matters, the same probe is run without isolation (the unsafe backend, or `network=True`)
to show that the probe itself would succeed: a probe that cannot succeed proves nothing.
Tests taking `backend` (or `sb`, both in conftest.py) run once per backend; a backend that cannot start here
(no bubblewrap, no Docker daemon) skips with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from envs.sandbox import Limits, SandboxError, open_sandbox
from envs.sandbox.pool import SandboxPool
from tests.envs.sandbox.conftest import FAST, healthy, needs_py, python_probe, unsafe
from tests.paths import ROOT

# ---------------------------------------------------------------- functional -----------

def test_run_basics(sb) -> None:
    r = sb.run("pwd; id -u; id -g; echo err >&2; exit 3")
    assert r.returncode == 3 and not r.ok
    assert r.stdout.split() == ["/workspace", "1000", "1000"] and r.stderr == "err\n"
    assert sb.run(["printf", "%s|", "a b", "c"]).stdout == "a b|c|"
    assert sb.run("cat", stdin="piped\n").stdout == "piped\n"
    assert sb.run("echo $FOO", env={"FOO": "bar"}).stdout == "bar\n"
    assert "HOST_ONLY" not in sb.run("env").stdout  # the host environment is not passed on
    r = sb.run("grep CapEff /proc/self/status")
    assert r.stdout.split()[1] == "0000000000000000"  # no capabilities
    r = sb.run("kill -9 $$")
    assert r.returncode == 128 + 9 and r.killed_reason is None
    with pytest.raises(ValueError):
        sb.run("")
    with pytest.raises(ValueError):
        sb.run("true", timeout=0)


def test_source_copy_files_and_paths(backend: str, src: Path) -> None:
    with open_sandbox(backend, src, FAST) as sb:
        assert sb.run("cat README && ./run.sh && cat pkg/mod.py").stdout == "hello\nran\nX = 1\n"
        sb.run("echo changed > README && mkdir -p out && echo 1 > out/a")
        assert (src / "README").read_text() == "hello\n"  # the source is never touched
        assert sb.read_file("out/a") == b"1\n" and (sb.workdir / "out" / "a").exists()
        sb.write_file("new/deep/f.txt", "text")
        assert sb.run("cat new/deep/f.txt && touch new/deep/g").ok  # writable by the sandbox
        for bad in ("../x", "/etc/passwd", "a/../../x", "", "."):
            with pytest.raises(ValueError):
                sb.read_file(bad)
        with pytest.raises(FileNotFoundError):
            sb.read_file("missing")
        with pytest.raises(ValueError):
            sb.read_file("pkg")  # a folder
    assert not sb.workdir.exists()  # close removes the workspace
    with pytest.raises(SandboxError):
        sb.run("true")
    with pytest.raises(SandboxError):
        open_sandbox(backend, src / "README", FAST)


def test_snapshot_restore_reset(backend: str, src: Path) -> None:
    with open_sandbox(backend, src, FAST) as sb:
        sb.run("echo v1 > state && ln -s state link && mkdir empty && chmod 600 state")
        snap = sb.snapshot()
        sb.run("echo v2 > state && rm -r empty pkg && echo x > extra")
        sb.restore(snap)
        r = sb.run("cat state link; ls -d empty pkg; test ! -e extra && stat -c %a state")
        assert r.stdout.split() == ["v1", "v1", "empty", "pkg", "600"], r
        assert os.path.islink(sb.workdir / "link")
        sb.reset()
        assert sorted(os.listdir(sb.workdir)) == ["README", "pkg", "run.sh"]
        assert sb.run("./run.sh && touch ok").ok  # modes and ownership came back
        with pytest.raises(TypeError):
            sb.restore(b"not a snapshot")


# ---------------------------------------------------------------- escape probes --------

@pytest.fixture
def planted():
    """Secret files on the host: under the home folder (/root), the repo, and host /tmp."""
    token, name = f"SECRET-{uuid.uuid4().hex}", uuid.uuid4().hex
    repo = ROOT
    paths = [Path.home() / f".trajforge_probe_{name}", repo / f".probe_{name}",
             Path(tempfile.gettempdir()) / f"probe_{name}"]
    for p in paths:
        p.write_text(token)
        p.chmod(0o644)  # world-readable: only the mount layout can hide it
    yield token, paths
    for p in paths:
        p.unlink(missing_ok=True)


def test_probe_host_files_are_hidden(sb, planted) -> None:
    token, paths = planted
    script = "; ".join(f"cat {p}" for p in paths) + "; ls /root /home /work /var /run; true"
    r = sb.run(script)
    assert token not in r.stdout + r.stderr
    assert "No such file" in r.stderr
    for p in paths:  # nor through a symlink the host follows when reading the workspace
        sb.run(f"ln -sf {p} link")
        with pytest.raises(ValueError):
            sb.read_file("link")
    sb.run("ln -sf /etc leak_dir")
    with pytest.raises(ValueError):
        sb.read_file("leak_dir/hostname")
    with pytest.raises(ValueError):  # would write /etc/x if links were followed
        sb.write_file("leak_dir/x", "y")
    assert not Path("/etc/x").exists()
    # The host's /proc is not there: a fresh one with the sandbox's few processes.
    r = sb.run("ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '")
    assert int(r.stdout.split()[0]) < 8 and ("bwrap" if sb.backend == "bwrap" else "docker-init") in r.stdout
    healthy(sb)
    with unsafe() as u:  # control: the same reads succeed without isolation
        assert token in u.run(script).stdout


@needs_py
def test_probe_network_and_host_sockets(sb, tmp_path: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    upath = tmp_path / "host.sock"
    usrv = socket.socket(socket.AF_UNIX)
    usrv.bind(str(upath))
    usrv.listen(8)
    abstract = f"\0trajforge-probe-{uuid.uuid4().hex}"
    asrv = socket.socket(socket.AF_UNIX)
    asrv.bind(abstract)
    asrv.listen(8)
    code = f"""
import socket
def tcp(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close(); return "OPEN"
    except OSError as e:
        return "blocked:" + type(e).__name__
def unix(addr):
    s = socket.socket(socket.AF_UNIX); s.settimeout(2)
    try:
        s.connect(addr); return "OPEN"
    except OSError as e:
        return "blocked:" + type(e).__name__
print(tcp("127.0.0.1", {port}), tcp("1.1.1.1", 80), tcp("8.8.8.8", 53),
      unix({str(upath)!r}), unix({abstract!r}))
"""
    try:
        r = python_probe(sb, code, timeout=20)
        assert r.ok, r
        assert "OPEN" not in r.stdout and r.stdout.count("blocked:") == 5, r.stdout
        healthy(sb)
        # Controls: a sandbox with the network on reaches the host's TCP port, and a plain
        # process reaches both Unix sockets, so the probes above can succeed.
        with open_sandbox(sb.backend, None, Limits(timeout_s=20, network=True)) as net:
            assert python_probe(net, code).stdout.split()[0] == "OPEN"
        with unsafe(limits=Limits(timeout_s=20)) as u:
            out = python_probe(u, code).stdout.split()
            assert out[0] == "OPEN" and out[3:] == ["OPEN", "OPEN"], out
    finally:
        for s in (srv, usrv, asrv):
            s.close()


def test_probe_writes_outside_the_workspace(sb) -> None:
    name = f"probe_{uuid.uuid4().hex}"
    targets = [f"/etc/{name}", f"/usr/{name}", f"/{name}", f"/workspace/../{name}",
               f"/proc/{name}", f"/opt/{name}"]
    r = sb.run("; ".join(f"echo x > {t}" for t in targets) + f"; echo x > /tmp/{name}; "
               f"ls /tmp/{name}")
    assert r.stdout.strip() == f"/tmp/{name}"  # the private /tmp is writable ...
    assert r.stderr.count("cannot create") == len(targets), r.stderr
    for t in targets + [f"/tmp/{name}"]:  # ... and none of it reached the host
        assert not Path(os.path.normpath(t)).exists()
    assert not list(Path(tempfile.gettempdir()).glob(f"**/{name}"))
    assert sb.run(f"test ! -e /tmp/{name}").ok  # /tmp does not outlive the command
    healthy(sb)


def test_probe_sleep_past_timeout_and_leftovers(sb) -> None:
    t0 = time.perf_counter()
    r = sb.run("sleep 30", timeout=1)
    assert r.timed_out and r.killed_reason == "timeout" and not r.ok
    assert time.perf_counter() - t0 < 4
    # Background and detached processes die with the command, they do not hold it open.
    t0 = time.perf_counter()
    n = uuid.uuid4().int % 10**6  # this test's own sleeps, not another run's on the same host
    sleeps = [f"sleep 6{i}.{n:06d}" for i in range(3)]
    r = sb.run(f"{sleeps[0]} & setsid {sleeps[1]} & nohup {sleeps[2]} >/dev/null 2>&1 & echo started")
    assert r.ok and r.stdout == "started\n" and time.perf_counter() - t0 < 4
    # killed, not running: a killed process can stay a zombie (state Z) until the container's
    # init reaps it, which on a loaded machine may come after the next command starts
    alive = [line for line in sb.run("ps -eo stat=,comm=").stdout.splitlines() if not line.lstrip().startswith("Z")]
    assert not [line for line in alive if "sleep" in line or "setsid" in line or "nohup" in line], alive
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not any(a in out for a in sleeps)
    healthy(sb)


@needs_py
def test_probe_fork_bomb(backend: str) -> None:
    lim = Limits(timeout_s=4, processes=16, cpu_s=10)
    with open_sandbox(backend, None, lim) as sb:
        counter = """
import os, time
kids = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(30); os._exit(0)
        kids.append(pid)
except OSError as e:
    print("stopped", len(kids), type(e).__name__)
"""
        r = python_probe(sb, counter)
        stopped, n, err = r.stdout.split()
        assert stopped == "stopped" and int(n) < 16 and err == "BlockingIOError", r
        r = python_probe(sb, "import os, time\nfor _ in range(64):\n    os.fork()\ntime.sleep(1)\n")
        assert r.killed_reason == "processes" and "BlockingIOError" in r.stderr, r  # named
        t0 = time.perf_counter()
        r = sb.run("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived")
        assert time.perf_counter() - t0 < lim.timeout_s + 3
        assert "Cannot fork" in r.stderr  # the process limit, not luck, stopped it
        assert r.killed_reason == "processes", r
        assert subprocess.run(["true"]).returncode == 0  # the host can still fork
        healthy(sb)


@needs_py
def test_probe_memory_bomb(backend: str) -> None:
    with open_sandbox(backend, None, Limits(timeout_s=20, memory_mb=256)) as sb:
        r = python_probe(sb, "x = bytearray(2 * 1024**3)\nprint('allocated')")
        assert not r.ok and "allocated" not in r.stdout
        assert r.killed_reason == "memory", r
        r = python_probe(sb, "x = bytearray(64 * 1024**2)\nprint('fine')")  # under the limit
        assert r.stdout == "fine\n"
        healthy(sb)


def test_probe_disk_fill(backend: str) -> None:
    lim = Limits(timeout_s=20, file_size_mb=8, disk_mb=64)
    with open_sandbox(backend, None, lim) as sb:
        r = sb.run("dd if=/dev/zero of=big bs=1M count=100")  # one big file
        assert r.killed_reason == "file_size" and not r.ok, r
        assert (sb.workdir / "big").stat().st_size <= 8 << 20
        t0 = time.perf_counter()  # many files, each under the file size limit
        r = sb.run("i=0; while :; do i=$((i+1)); dd if=/dev/zero of=f$i bs=1M count=7 "
                   "2>/dev/null; done")
        assert r.killed_reason == "disk" and time.perf_counter() - t0 < 10, r
        used = sum(p.stat().st_size for p in sb.workdir.iterdir())
        assert used < 64 * 4 << 20  # within a poll of the limit, not GBs at the timeout
        r = sb.run("dd if=/dev/zero of=/tmp/fill bs=1M count=7 2>/dev/null; "
                   "for i in $(seq 1 20); do cp /tmp/fill /tmp/c$i || break; done; du -sm /tmp")
        assert "No space left" in r.stderr and int(r.stdout.split()[0]) <= 64, r
        assert sb.run("rm f*").ok  # a full workspace can be cleaned up by the next command
        healthy(sb)


def test_probe_cpu_and_output_floods(backend: str) -> None:
    with open_sandbox(backend, None, Limits(timeout_s=30, cpu_s=1,
                                            max_output_bytes=10_000)) as sb:
        t0 = time.perf_counter()
        r = sb.run("while :; do :; done")
        assert r.killed_reason == "cpu" and not r.timed_out, r
        assert time.perf_counter() - t0 < 25
        r = sb.run("yes")
        assert r.killed_reason == "output" and r.truncated and len(r.stdout) == 10_000
        r = sb.run("head -c 20000 /dev/zero | tr '\\0' a; echo; echo done >&2")
        assert r.ok and r.truncated and len(r.stdout) == 10_000 and r.stderr == "done\n"
        healthy(sb)


# ---------------------------------------------------------------- issue 18 probes ------
# Each probe runs in the default sandbox and, as a control, with isolation off: the unsafe
# backend (the host, as this user) and, for the seccomp filter, the backend with `seccomp=False`.

SYSCALL_PROBE = r"""
import ctypes, errno, json, os, platform, signal, struct, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": dict(keyctl=250, add_key=248, bpf=321, perf_event_open=298, io_uring_setup=425,
                     userfaultfd=323, setns=308),
      "aarch64": dict(keyctl=219, add_key=217, bpf=280, perf_event_open=241, io_uring_setup=425,
                      userfaultfd=282, setns=268)}[platform.machine()]
out = {}
def result(name, rc):
    out[name] = "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def ptrace_child():
    pid = os.fork()
    if pid == 0:
        time.sleep(5); os._exit(0)
    rc = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
    result("ptrace_child", rc)
    os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)
ptrace_child()
result("unshare", libc.unshare(0))
result("keyctl", libc.syscall(NR["keyctl"], 0, -3, 1))  # KEYCTL_GET_KEYRING_ID, session
result("add_key", libc.syscall(NR["add_key"], b"user", b"probe", b"v", 1, -2))
attr = ctypes.create_string_buffer(struct.pack("IIQ", 1, 128, 0) + bytes(24) + struct.pack("Q", 1 << 5)
                                   + bytes(128 - 48))  # software cpu-clock, exclude_kernel
result("perf_event_open", libc.syscall(NR["perf_event_open"], attr, 0, -1, -1, 0))
params = ctypes.create_string_buffer(120)
result("io_uring_setup", libc.syscall(NR["io_uring_setup"], 1, params))
result("userfaultfd", libc.syscall(NR["userfaultfd"], 0))
bpf_attr = ctypes.create_string_buffer(struct.pack("IIII", 2, 4, 4, 1) + bytes(112))  # array map
result("bpf", libc.syscall(NR["bpf"], 0, bpf_attr, 128))
fd = os.open("/proc/self/ns/uts", os.O_RDONLY)
result("setns", libc.syscall(NR["setns"], fd, 0))
# mount: in a private mount namespace of its own when that is allowed (the host control)
libc.unshare(0x00020000)  # CLONE_NEWNS
libc.mount(None, b"/", None, (1 << 14) | (1 << 18), None)  # MS_REC | MS_PRIVATE
os.makedirs("mnt", exist_ok=True)
result("mount", libc.mount(b"none", os.path.abspath("mnt").encode(), b"tmpfs", 0, None))
result("umount2", libc.umount2(os.path.abspath("mnt").encode(), 2))
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
out["seccomp_mode"] = status.get("Seccomp", "?").strip()
print(json.dumps(out))
"""
PROBED = ("ptrace_child", "unshare", "keyctl", "add_key", "perf_event_open", "io_uring_setup",
          "userfaultfd", "bpf", "setns", "mount", "umount2")


def syscalls(sb) -> dict[str, str]:
    import json

    r = python_probe(sb, SYSCALL_PROBE, timeout=20)
    assert r.returncode == 0 and r.stdout.strip(), r
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_py
def test_probe_seccomp_denies_dangerous_syscalls(sb) -> None:
    got = syscalls(sb)
    assert got["seccomp_mode"] == "2", got  # a filter is installed
    assert {k: got[k] for k in PROBED} == dict.fromkeys(PROBED, "EPERM"), got
    healthy(sb)
    # Controls: without the filter the unprivileged calls succeed in the same sandbox, and
    # on the host (as root) the privileged ones do too; every probe can succeed somewhere.
    with open_sandbox(sb.backend, None, FAST, seccomp=False) as off:
        bare = syscalls(off)
    assert bare["seccomp_mode"] == "0"
    assert bare["ptrace_child"] == bare["unshare"] == bare["keyctl"] == "ok", bare
    with unsafe() as u:
        host = syscalls(u)
    works = {k for k in PROBED if "ok" in (bare[k], host[k])}
    if os.geteuid() == 0:
        assert works == set(PROBED), (bare, host)


def test_probe_reset_restores_the_workspace_root(backend: str, src: Path) -> None:
    with SandboxPool(src, size=1, backend=backend, limits=FAST, background_reset=False) as pool:
        for attack in ("chmod 000 .", "chmod 0777 .", "chmod 1700 . && mkdir -p d/e && chmod 000 d/e d"):
            with pool.sandbox() as box:
                before = box.run("stat -c %a .").stdout.strip()
                box.run(attack)
                # control: without the reset the attack does carry over to the next command
                after = box.run("stat -c %a . 2>&1; ls >/dev/null 2>&1 && echo listed")
                assert after.stdout != before + "\nlisted\n", (attack, after)
            with pool.sandbox() as box:  # the next trajectory gets the workspace as prepared
                r = box.run("stat -c %a .; ls")
                assert r.ok and r.stdout.split() == [before, "README", "pkg", "run.sh"], (attack, r)
                assert os.stat(box.workdir).st_mode & 0o7777 == int(before, 8)


@pytest.fixture
def opt_canary():
    """A world-readable canary under host /opt (root only)."""
    if not os.access("/opt", os.W_OK):
        pytest.skip("cannot plant a canary under /opt (not root)")
    token = f"CANARY-{uuid.uuid4().hex}"
    path = Path("/opt") / f"trajforge_probe_{uuid.uuid4().hex}"
    path.write_text(token)
    path.chmod(0o644)
    yield token, path
    path.unlink(missing_ok=True)


def test_probe_only_the_listed_host_parts_are_visible(sb, opt_canary) -> None:
    token, path = opt_canary
    host_passwd = Path("/etc/passwd").read_text()
    script = f"cat {path}; cat /etc/passwd; ls /opt /etc /usr /usr/share /usr/include 2>&1; true"
    r = sb.run(script)
    assert token not in r.stdout + r.stderr
    passwd = sb.run("cat /etc/passwd").stdout
    assert passwd != host_passwd and "sandbox:x:1000:1000" in passwd
    assert set(sb.run("ls /etc").stdout.split()) <= {"passwd", "group", "hosts", "nsswitch.conf",
                                                     "resolv.conf", "ssl", "alternatives", "hostname", "mtab"}
    assert "No such file" in sb.run("ls /opt /usr/include /usr/share/doc 2>&1; true").stdout
    # what tasks need is there: the shell tools, python3 and git
    r = sb.run("for c in sh bash ls cat grep sed awk sort find xargs tar gzip diff head tail wc "
               "tr cut python3 git prlimit timeout ps; do command -v $c >/dev/null || echo no $c; done; "
               "python3 -c 'import json, sqlite3, csv, subprocess; print(1)'; git --version")
    assert r.ok and "no " not in r.stdout and "git version" in r.stdout, r
    with unsafe() as u:  # control: the host's files are there without isolation
        out = u.run(script).stdout
        assert token in out and host_passwd in out


