"""The server's intake: what verifies uploads, how many wait, and the answer to one too many (docs/decisions.md U28-U30).

An upload is *admitted* from its authenticated headers until its verification ended: while its body is received
and spooled, while it waits for a verification worker (the queue) and while it is verified. At most
``ServerConfig.max_queue`` uploads are admitted at a time; one more is answered ``503`` with ``Retry-After``
(seconds, :meth:`IntakeQueue.retry_after`) from its headers, before its body is read or a log row is written, and
the client waits that long and sends it again (:mod:`egopool.transfer.posting`): a queue that is full costs the
server nothing but the answer, and memory and scratch disk stay bounded by the admitted uploads (U9).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import anyio
from fastapi.responses import JSONResponse

from .config import ServerConfig
from .importer import Importer
from .store import ServerStore
from .workers import RayVerifier, Verifier, VerifyPool

__all__ = ["IntakeQueue", "Place", "start_intake"]


class Place:
    """One admitted upload's place in the :class:`IntakeQueue`; :meth:`leave` gives it back (idempotent)."""

    def __init__(self, queue: IntakeQueue) -> None:
        self._queue: IntakeQueue | None = queue

    def leave(self) -> None:
        """Give the place back (the first call only)."""
        if self._queue is not None:
            self._queue.leave()
            self._queue = None


class IntakeQueue:
    """Counts admitted uploads and estimates when a refused one should come back.

    Parameters
    ----------
    limit:
        Uploads admitted at a time (>= 1).
    workers:
        Verifications that run at a time (the estimate divides the backlog by it).
    """

    #: The longest ``Retry-After`` the server names, seconds (the client waits at most this long per answer).
    MAX_RETRY_AFTER_S = 30

    def __init__(self, limit: int, workers: int) -> None:
        self.limit = max(1, int(limit))
        self.workers = max(1, int(workers))
        self.admitted = 0
        self._mean_verify_s = 0.5  # until the first verification is measured
        self._lock = threading.Lock()

    def admit(self) -> Place | None:
        """Take a place, or None when every place is taken: the caller answers :meth:`busy`."""
        with self._lock:
            if self.admitted >= self.limit:
                return None
            self.admitted += 1
            return Place(self)

    def busy(self) -> JSONResponse:
        """The 503 answer with ``Retry-After`` for an upload that found no place."""
        return JSONResponse({"error": "busy", "message": f"the server's intake queue is full ({self.limit} uploads); "
                             "send it again after Retry-After seconds", "findings": []},
                            status_code=503, headers={"Retry-After": str(self.retry_after())})

    def leave(self) -> None:
        """Give back a place taken by :meth:`admit` (once, when the upload's verification ended or it failed)."""
        with self._lock:
            self.admitted = max(0, self.admitted - 1)

    def observe(self, verify_s: float) -> None:
        """Feed one verification's seconds into the estimate (an exponential mean, weight 1/8)."""
        with self._lock:
            self._mean_verify_s += (max(0.0, verify_s) - self._mean_verify_s) / 8

    def retry_after(self) -> int:
        """Whole seconds after which a refused upload may find a place: the admitted backlog over the workers,
        at the mean verification time; at least 1, at most :attr:`MAX_RETRY_AFTER_S`."""
        with self._lock:
            wait = self.admitted * self._mean_verify_s / self.workers
        return int(min(self.MAX_RETRY_AFTER_S, max(1, math.ceil(wait))))


def start_intake(config: ServerConfig, store: ServerStore, state: dict[str, Any]) -> None:
    """Fill ``state`` with the verifier (worker processes, or Ray tasks with ``serve --ray``), the importer, the
    admission queue and the semaphores of the upload route.

    With ``--ray`` the cluster is joined at the first verification (:class:`~egopool.server.workers.RayVerifier`).
    """
    workers = max(1, config.max_imports)
    verifier: Verifier | None = None
    if config.verify_ray is not None:
        verifier = RayVerifier(config.verify_ray, workers)
    elif config.verify_processes:
        verifier = VerifyPool(workers)
    if verifier is not None:
        state["pool"] = verifier
    state["importer"] = Importer(store, on_conflict=config.on_conflict, limits=config.limits, pool=verifier,
                                 max_publishes=workers)
    state["imports"] = anyio.Semaphore(workers)  # verifications at a time
    # publishes at a time: max_imports groups (the importer's bound), each of up to 4 waiting uploads (U18)
    state["publishing"] = anyio.Semaphore(workers * 4)
    state["receiving"] = anyio.Semaphore(max(1, config.max_receiving))
    state["intake"] = IntakeQueue(config.max_queue, workers)
