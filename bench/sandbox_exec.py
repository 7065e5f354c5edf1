"""Sandbox start + run `true` + teardown, per backend, against a plain subprocess (the
baseline), measured in the same run with the arms interleaved round by round.

    .venv/bin/python bench/sandbox_exec.py [--quick] [--n N]

Arms: `plain` (subprocess.run(["true"])), `bwrap_raw` (the same bwrap command line run
directly, with the same flags: the assembled system root and the seccomp filter read from a
pipe; the floor of the backend), `bwrap` cold (open a sandbox on a small source folder, run,
close), `bwrap_warm` (acquire from a warm `SandboxPool`, run, release, which resets the
workspace), `bwrap_run` (one more command in an open sandbox), `unsafe` cold, and where a
Docker daemon answers: `docker_raw` (`exec_create` + `exec_start` + `exec_inspect` of `true`
in a started container: the floor of the backend), `docker` cold (container and volumes
created, run, removed), `docker_warm` (from a pool of two started containers) and
`docker_run`, all through the container's runner (`envs.sandbox.docker_runner`), and the
same two without it (`docker_exec_warm`, `docker_exec_run`: one `docker exec` per command,
what an image without python3 gets). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from envs.sandbox import Limits, open_sandbox
from envs.sandbox.bwrap import bwrap_argv, bwrap_unusable, drop_privileges, memory_split
from envs.sandbox.docker import docker_unusable
from envs.sandbox.pool import SandboxPool
from envs.sandbox.process import limit_argv
from envs.sandbox.seccomp import write_program_fd
from envs.sandbox.sysroot import system_root


def make_source(root: Path, files: int = 20) -> Path:
    src = root / "src"
    for i in range(files):
        d = src / f"pkg{i % 4}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(f"X = {i}\n" * 200)
    return src


def stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return {"p50_ms": round(statistics.median(xs), 2), "p95_ms": round(p95, 2)}


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (well under a minute)")
    ap.add_argument("--n", type=int, default=None, help="rounds (default 60, quick 25)")
    args = ap.parse_args()
    n = args.n or (25 if args.quick else 60)
    if n < 2:
        ap.error("--n must be >= 2")
    why_bwrap = bwrap_unusable()
    why_docker = docker_unusable()
    limits = Limits(timeout_s=30)
    tmp = Path(tempfile.mkdtemp(prefix="trajforge-bench-"))
    src = make_source(tmp)
    arms: dict[str, Callable[[], object]] = {"plain": lambda: subprocess.run(["true"])}

    def cold(backend: str, **kw: object) -> Callable[[], object]:
        def go() -> None:
            with open_sandbox(backend, src, limits, **kw) as sb:
                r = sb.run(["true"])
                assert r.ok, r
        return go

    def warm(pool: SandboxPool) -> Callable[[], object]:
        def go() -> None:
            with pool.sandbox() as sb:
                r = sb.run(["true"])
                assert r.ok, r
        return go

    closers: list[Callable[[], None]] = []
    arms["unsafe"] = cold("unsafe", allow_unsafe=True)
    if why_bwrap is None:
        held = open_sandbox("bwrap", src, limits)
        closers.append(held.close)
        drop, popen_kw = drop_privileges()
        root = system_root()

        def raw() -> None:
            fd = write_program_fd()
            try:
                argv = drop + bwrap_argv(held.workdir, limits, root=root, seccomp_fd=fd)
                argv += limit_argv(limits, visible=root.visible,
                                   memory_bytes=memory_split(limits).process) + ["true"]
                subprocess.run(argv, pass_fds=(fd,), **popen_kw)
            finally:
                os.close(fd)

        arms["bwrap_raw"] = raw
        arms["bwrap"] = cold("bwrap")
        pool = SandboxPool(src, size=2, limits=limits)
        closers.append(pool.close)
        arms["bwrap_warm"] = warm(pool)
        arms["bwrap_run"] = lambda: held.run(["true"])
    if why_docker is None:
        dheld = open_sandbox("docker", src, limits)
        closers.append(dheld.close)
        api, cid = dheld._client.api, dheld._container.id

        def docker_raw() -> None:
            e = api.exec_create(cid, ["true"], stdout=True, stderr=True, user="1000:1000")
            api.exec_start(e, demux=True)
            api.exec_inspect(e)

        arms["docker_raw"] = docker_raw
        arms["docker"] = cold("docker")
        dpool = SandboxPool(src, size=2, backend="docker", limits=limits)
        closers.append(dpool.close)
        arms["docker_warm"] = warm(dpool)
        arms["docker_run"] = lambda: dheld.run(["true"])
        xheld = open_sandbox("docker", src, limits, exec_server=False)
        closers.append(xheld.close)
        xpool = SandboxPool(src, size=2, backend="docker", limits=limits, exec_server=False)
        closers.append(xpool.close)
        arms["docker_exec_warm"] = warm(xpool)
        arms["docker_exec_run"] = lambda: xheld.run(["true"])
    samples: dict[str, list[float]] = {k: [] for k in arms}
    try:
        for fn in arms.values():  # warm caches (page cache, imports) before measuring
            fn()
        for _ in range(n):
            for name, fn in arms.items():
                samples[name].append(timed(fn))
    finally:
        for close in closers:
            close()
        subprocess.run(["rm", "-rf", str(tmp)])
    figures: dict[str, object] = {"bench": "sandbox_exec", "quick": args.quick, "rounds": n,
                                  "load_avg_1m": round(os.getloadavg()[0], 2),
                                  "cpus": os.cpu_count()}
    for name, xs in samples.items():
        s = stats(xs)
        figures[f"{name}_p50_ms"] = s["p50_ms"]
        figures[f"{name}_p95_ms"] = s["p95_ms"]
    for key in ("bwrap_p50_ms", "bwrap_warm_p50_ms", "docker_warm_p50_ms", "docker_warm_p95_ms"):
        figures.setdefault(key, None)
    figures["bwrap_skipped"] = why_bwrap
    figures["docker_skipped"] = why_docker
    if why_bwrap is None:
        figures["bwrap_warm_overhead_vs_plain_ms"] = round(
            figures["bwrap_warm_p50_ms"] - figures["plain_p50_ms"], 2)  # type: ignore[operator]
        figures["bwrap_warm_target_20ms_met"] = figures["bwrap_warm_p50_ms"] <= 20  # type: ignore[operator]
    if why_docker is None:
        figures["docker_warm_target_50ms_met"] = figures["docker_warm_p50_ms"] <= 50  # type: ignore[operator]
        figures["docker_warm_speedup_vs_exec"] = round(
            figures["docker_exec_warm_p50_ms"] / figures["docker_warm_p50_ms"], 1)  # type: ignore[operator]
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
