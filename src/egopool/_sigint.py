"""Holding Ctrl-C back over a stretch of code that must not be cut in the middle."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def sigint_deferred() -> Iterator[list[int]]:
    """While inside, Ctrl-C (SIGINT) is recorded in the yielded list instead of raising
    KeyboardInterrupt; the caller acts on it afterwards. Main thread only: elsewhere signals cannot
    be handled and nothing changes (the list stays empty)."""
    hits: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield hits
        return
    old = signal.signal(signal.SIGINT, lambda signum, frame: hits.append(signum))
    try:
        yield hits
    finally:
        signal.signal(signal.SIGINT, old)
