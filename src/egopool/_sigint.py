"""Holding Ctrl-C (and SIGTERM, which the CLI handles like it) back over a stretch of code that must not be cut
in the middle, and making SIGTERM a Ctrl-C."""

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
    """While inside, Ctrl-C (SIGINT) and SIGTERM are recorded in the yielded list instead of raising
    KeyboardInterrupt; the caller acts on it afterwards. Main thread only: elsewhere signals cannot
    be handled and nothing changes (the list stays empty)."""
    hits: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield hits
        return
    old = {sig: signal.signal(sig, lambda signum, frame: hits.append(signum)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield hits
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def sigterm_as_interrupt() -> None:
    """From now on SIGTERM (``kill``, systemd, a container stop) raises KeyboardInterrupt in the main thread, as
    Ctrl-C does: every command then discards or finishes what it was writing the way it does for Ctrl-C, instead
    of dying with its temp files and reservations left behind (issue 16 E). Main thread only."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
