"""Holding Ctrl-C back over a stretch of code that must not be cut in the middle."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

#: Test seam: ``<point>:<write fd>:<read fd>`` makes the CLI's start-up stop at ``point`` (``start``:
#: nothing of the CLI loaded yet, in ``egopool.cli.entry``; ``commands``: the app loaded, the named
#: command's modules not, in ``egopool.cli.app``), write one byte to the first fd and wait for one on the
#: second, so a test can send Ctrl-C at a known point (docs/decisions.md R19). Unset in production.
SEAM_ENV = "EGOPOOL_LOADING_SEAM"


def loading_seam(point: str) -> None:
    """Stop at ``point`` of the start-up when :data:`SEAM_ENV` names it (tests only); else nothing."""
    spec = os.environ.get(SEAM_ENV, "")
    name, _, fds = spec.partition(":")
    if name != point:
        return
    wfd, _, rfd = fds.partition(":")
    os.write(int(wfd), b"!")
    os.read(int(rfd), 1)


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
