"""The scratch directories of exported downloads (``.rrd``, LeRobot; docs/decisions.md P22, P33): made, streamed
from, and removed for certain.

An export is written to ``<store>/.egopool-server/staging/download-<hex>/`` and streamed from there. The
directory goes away three ways, whichever comes first:

* :class:`ScratchResponse` closes the stream and removes it when the response ends: sent whole, failed, or the
  client went away mid-stream (Starlette cancels the send on ``http.disconnect``; the ``finally`` of
  :meth:`ScratchResponse.__call__` runs under a shielded cancel scope);
* :func:`sweep_scratch`, run whenever a new one is made, removes any ``download-*`` older than
  :data:`STALE_AFTER` seconds that no response of this process is streaming (a request that died before
  its response was sent, a response that was never started);
* :meth:`~egopool.server.store.ServerStore.clean_scratch` empties staging at the next start.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["PREFIX", "STALE_AFTER", "ScratchResponse", "in_use", "make_scratch", "release_scratch", "sweep_scratch"]

#: the name every download scratch directory starts with
PREFIX = "download-"
#: seconds after which a scratch directory that no response streams is removed by :func:`sweep_scratch`
STALE_AFTER = 600.0

_lock = threading.Lock()
_active: set[Path] = set()


def in_use() -> frozenset[Path]:
    """The scratch directories this process has made and not released yet."""
    with _lock:
        return frozenset(_active)


def sweep_scratch(staging: Path, *, older_than: float = STALE_AFTER) -> list[Path]:
    """Remove the ``download-*`` directories under ``staging`` last modified more than ``older_than`` s ago
    that are not :func:`in_use`; return them. A directory that vanishes meanwhile is skipped."""
    now, busy, gone = time.time(), in_use(), []
    with contextlib.suppress(FileNotFoundError):
        for d in staging.iterdir():
            if not d.name.startswith(PREFIX) or d in busy:
                continue
            try:
                if now - d.stat().st_mtime <= older_than:
                    continue
            except FileNotFoundError:
                continue
            shutil.rmtree(d, ignore_errors=True)
            gone.append(d)
    return gone


def make_scratch(staging: Path) -> Path:
    """A fresh ``download-<hex>`` directory under ``staging``, in use until :func:`release_scratch`; stale ones
    are swept first (:func:`sweep_scratch`).

    Raises
    ------
    OSError
        It cannot be made.
    """
    sweep_scratch(staging)
    d = staging / f"{PREFIX}{uuid.uuid4().hex[:12]}"
    d.mkdir(parents=True)
    with _lock:
        _active.add(d)
    return d


def release_scratch(d: Path) -> None:
    """Remove scratch directory ``d`` (gone already is fine) and forget it."""
    shutil.rmtree(d, ignore_errors=True)
    with _lock:
        _active.discard(d)


async def _in_thread(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` read in a worker thread, one at a time (the thread finishes before a cancel lands)."""
    while True:
        chunk = await anyio.to_thread.run_sync(next, chunks, None)
        if chunk is None:
            return
        yield chunk


class ScratchResponse(StreamingResponse):
    """A streamed download of ``chunks`` read from scratch directory ``scratch``: when the response ends in
    any way (module docstring) the ``chunks`` generator is closed (its own ``finally`` runs) and ``scratch``
    is released."""

    def __init__(self, chunks: Iterator[bytes], scratch: Path, *, media_type: str,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(_in_thread(chunks), media_type=media_type, headers=headers)
        self._chunks, self._scratch = chunks, scratch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._finish)

    def _finish(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # a generator still running elsewhere: removed below anyway
                close()
        release_scratch(self._scratch)
