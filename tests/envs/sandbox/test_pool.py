"""`SandboxPool`: sandboxes reset between uses, bounded, shared by threads; a closed pool
leaves no thread or folder behind."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from envs.sandbox import SandboxError
from envs.sandbox.pool import SandboxPool
from tests.envs.sandbox.conftest import FAST, REASON


def reset_workers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "sandbox-pool-reset"}


@pytest.fixture
def base_dir():
    """A folder for the pool's workspaces that the sandbox uid can reach (pytest's tmp_path
    is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="trajforge-pooltest-"))
    d.chmod(0o755)
    yield d / "sandboxes"
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("backend", ["bwrap", "unsafe"])
def test_pool_close_joins_its_worker_and_leaves_no_folder(backend: str, base_dir: Path) -> None:
    if backend == "bwrap" and REASON is not None:
        pytest.skip(f"bubblewrap unusable: {REASON}")
    opts = {"allow_unsafe": True} if backend == "unsafe" else {}
    base = base_dir
    before = reset_workers()
    pool = SandboxPool(None, size=3, backend=backend, limits=FAST, base_dir=base, **opts)
    assert len(os.listdir(base)) == 3
    a, b, c = pool.acquire(), pool.acquire(), pool.acquire()
    for sb in (a, b, c):
        assert sb.run("echo dirty > junk").ok
    resetting = threading.Event()
    reset = a.reset

    def slow_reset() -> None:  # a reset still running when close() is called
        resetting.set()
        time.sleep(0.5)
        reset()

    a.reset = slow_reset  # type: ignore[method-assign]
    pool.release(a)
    assert resetting.wait(10)
    pool.release(b)  # queued behind a
    pool.close()
    assert not {t for t in reset_workers() - before if t.is_alive()}
    assert sorted(os.listdir(base)) == [c.workdir.parent.name]  # only the busy one is left
    pool.release(c)  # closed when released
    assert os.listdir(base) == []


def test_pool_resets_bounds_and_threads(backend: str, src: Path) -> None:
    def setup(box) -> None:
        box.run("echo prepared > setup.txt")

    with SandboxPool(src, size=1, backend=backend, limits=FAST, background_reset=False) as plain:
        with plain.sandbox() as box:
            box.run("echo dirty > README")
        with plain.sandbox() as box:  # reset in release itself
            assert box.read_file("README") == b"hello\n"
    with SandboxPool(src, size=2, backend=backend, limits=FAST, setup=setup) as pool:
        assert pool.idle == 2
        with pool.sandbox() as a:
            a.run("rm README; echo dirty > junk")
            b = pool.acquire()
            with pytest.raises(TimeoutError):
                pool.acquire(timeout=0.2)
            pool.release(b)
        with pytest.raises(ValueError):
            pool.release(a)  # twice
        seen: list[list[str]] = []
        errors: list[BaseException] = []

        def worker() -> None:
            try:
                for _ in range(3):
                    with pool.sandbox(timeout=30) as box:
                        seen.append(sorted(os.listdir(box.workdir)))
                        box.run(f"echo {uuid.uuid4().hex} > junk_{threading.get_ident()}")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert seen and all(s == ["README", "pkg", "run.sh", "setup.txt"] for s in seen), seen
        assert pool.wait_ready(timeout=30)
        assert pool.in_use == 0 and pool.idle == 2
    assert pool.idle == 0
    with pytest.raises(SandboxError):
        pool.acquire()
    with pytest.raises(ValueError):
        SandboxPool(src, size=0, backend=backend)
