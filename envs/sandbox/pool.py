"""A bounded, thread-safe pool of prepared sandboxes for one source folder.

    pool = SandboxPool("worlds/repo", size=4, setup=lambda sb: sb.run("make deps"))
    with pool.sandbox() as sb:      # or sb = pool.acquire(); ...; pool.release(sb)
        sb.run("make test")

Each sandbox is opened on a copy of `source` and then given to `setup` (if any); that state
is what `release` puts back before the sandbox goes to the next caller. The reset runs on a
background thread (`background_reset=False`: in `release` itself), so `release` returns at
once and `acquire` only ever hands out a reset sandbox. At most `size` sandboxes exist;
`acquire` waits (up to `timeout`) when all are in use or resetting. A sandbox whose reset
fails is closed and replaced on demand.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envs.sandbox.base import Limits, Sandbox, SandboxError, open_sandbox

log = logging.getLogger(__name__)


class SandboxPool:
    def __init__(self, source: Path | str | None = None, size: int = 4, *,
                 backend: str = "bwrap", limits: Limits | None = None,
                 setup: Callable[[Sandbox], Any] | None = None, prewarm: int | None = None,
                 background_reset: bool = True, **options: Any) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"pool size must be an int >= 1, got {size!r}")
        if source is not None and not Path(source).is_dir():
            raise SandboxError(f"pool source {str(source)!r} is not a folder")
        self.source = Path(source) if source is not None else None
        self.size = size
        self.backend = backend
        self.limits = limits or Limits()
        self._setup = setup
        self._options = options
        self._cond = threading.Condition()
        self._free: list[Sandbox] = []
        self._busy: dict[int, Sandbox] = {}
        self._snaps: dict[int, Any] = {}
        self._count = 0  # sandboxes open or being opened
        self._resetting = 0
        self._closed = False
        self._queue: queue.SimpleQueue[Sandbox | None] | None = None
        self._worker: threading.Thread | None = None
        if background_reset:
            self._queue = queue.SimpleQueue()
            self._worker = threading.Thread(target=self._reset_worker, name="sandbox-pool-reset",
                                            daemon=True)
            self._worker.start()
        for _ in range(size if prewarm is None else min(prewarm, size)):
            with self._cond:
                self._count += 1
            try:
                sb = self._open()
            except BaseException:
                self.close()
                raise
            with self._cond:
                self._free.append(sb)

    def _open(self) -> Sandbox:
        sb = open_sandbox(self.backend, self.source, self.limits, **self._options)
        try:
            if self._setup is not None:
                self._setup(sb)
                self._snaps[id(sb)] = sb.snapshot()
        except BaseException:
            sb.close()
            raise
        return sb

    def acquire(self, timeout: float | None = None) -> Sandbox:
        """A ready sandbox; waits up to `timeout` seconds (None: forever) for one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxError("sandbox pool is closed")
                if self._free:
                    sb = self._free.pop()
                    self._busy[id(sb)] = sb
                    return sb
                if self._count < self.size:
                    self._count += 1
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no sandbox free in the pool of {self.size} "
                                       f"after {timeout} s")
                self._cond.wait(left)
        try:
            sb = self._open()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._busy[id(sb)] = sb
        return sb

    def release(self, sb: Sandbox) -> None:
        """Reset `sb` to its prepared state and make it available again."""
        with self._cond:
            if self._busy.pop(id(sb), None) is None:
                raise ValueError("sandbox was not acquired from this pool (or was released)")
            if self._closed:
                self._drop(sb)
                self._cond.notify_all()
                return
            self._resetting += 1
            if self._queue is not None:
                self._queue.put(sb)
                return
        self._reset_and_return(sb)

    def _reset_and_return(self, sb: Sandbox) -> None:
        ok = False
        if not self._closed:
            try:
                snap = self._snaps.get(id(sb))
                if snap is None:
                    sb.reset()
                else:
                    sb.restore(snap)
                ok = True
            except Exception:  # noqa: BLE001 - a broken sandbox is replaced, not returned
                log.exception("sandbox reset failed; closing it")
        with self._cond:
            self._resetting -= 1
            if ok and not self._closed:
                self._free.append(sb)
            else:
                self._drop(sb)
            self._cond.notify_all()

    def _reset_worker(self) -> None:
        assert self._queue is not None
        while (sb := self._queue.get()) is not None:
            self._reset_and_return(sb)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until no released sandbox is still being reset; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._resetting == 0, timeout)

    def _drop(self, sb: Sandbox) -> None:
        self._snaps.pop(id(sb), None)
        self._count -= 1
        try:
            sb.close()
        except Exception:  # noqa: BLE001
            log.exception("closing a sandbox failed")

    @contextmanager
    def sandbox(self, timeout: float | None = None) -> Iterator[Sandbox]:
        sb = self.acquire(timeout)
        try:
            yield sb
        finally:
            self.release(sb)

    @property
    def idle(self) -> int:
        with self._cond:
            return len(self._free)

    @property
    def in_use(self) -> int:
        with self._cond:
            return len(self._busy)

    def close(self) -> None:
        """Close the idle sandboxes and those being reset, and stop the reset worker; busy
        ones are closed when they are released. Returns once the worker has stopped, so no
        workspace folder of a sandbox it held is left behind."""
        with self._cond:
            self._closed = True
            free, self._free = self._free, []
            for sb in free:
                self._drop(sb)
            self._cond.notify_all()
        worker = self._worker
        if self._queue is not None and worker is not None:
            self._queue.put(None)  # the worker closes what it still holds, then stops
            if worker is not threading.current_thread():
                worker.join()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
