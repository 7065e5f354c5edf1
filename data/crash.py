"""Named crash points for testing that killed runs resume (a failpoint, as databases have).

`crashpoint("store.commit.before_rename")` does nothing unless the environment variable
`TRAJFORGE_CRASH_AT` names that point (optionally `NAME:N` for its N-th hit in this
process); then the process kills itself with SIGKILL, exactly as an OOM killer or a lost
node would, with no cleanup handlers running.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

ENV = "TRAJFORGE_CRASH_AT"
_hits: Counter[str] = Counter()
_lock = threading.Lock()


def crashpoint(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, nth = spec.partition(":")
    if point != name:
        return
    with _lock:
        _hits[name] += 1
        hit = _hits[name]
    if hit >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
