"""Worker processes for the verification of uploads (issue 15 H; docs/decisions.md U14).

An import's verification (zip checks, extraction with sha256, footer and frame-size bounds,
egopool's validator decoding every frame, the stats blocks) is Python and C work under one
GIL: ~20 ms of CPU for a small episode. :class:`VerifyPool` runs it in ``workers`` separate
processes (``spawn``: the server's threads are never forked), so the server process itself
keeps only the HTTP, the database and the publish. Each worker verifies one upload at a time,
so the per-import bounds of docs/decisions.md U9 hold per worker unchanged, and the pool has as
many workers as ``egopool serve --max-imports``: at most that many uploads are verified at a time.

The workers are started when the pool is (at server start-up; the server answers meanwhile, and a
verification waits until a worker has imported pyarrow and PyAV: :attr:`VerifyPool.ready`), and
leave on their own within half a second when the server process is gone (a SIGKILLed server: the
crash tests, :envvar:`EGOPOOL_SERVER_PAUSE`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import EgopoolError

if TYPE_CHECKING:
    from ..jobs.executor import RayExecutor

__all__ = ["RayVerifier", "VerifierLost", "VerifyPool", "Verifier"]

T = TypeVar("T")
log = logging.getLogger("egopool.server")
_WATCH_S = 0.5


class VerifierLost(EgopoolError):
    """The process (or Ray task) verifying an upload died mid-call: the upload was not verified; the importer
    verifies it once more (docs/decisions.md U28), else the client gets a 500 and sends it again."""


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(_WATCH_S)
        if os.getppid() != parent:  # the server died (SIGKILL): this worker's work has no one to answer
            os._exit(1)


def _init_worker(parent: int, modules: tuple[str, ...]) -> None:
    threading.Thread(target=_watch_parent, args=(parent,), name="egopool-parent-watch", daemon=True).start()
    for name in modules:  # imported once per worker, before its first request
        __import__(name)


def _threaded(one_thread: bool, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
    """``fn(*args, **kwargs)`` in a worker, decoding video in one thread or with FFmpeg's slice threads (U34)."""
    from ..codecs.decode_scan import decode_in_one_thread

    decode_in_one_thread(one_thread)
    return fn(*args, **kwargs)


def cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ready(pause_s: float) -> int:
    time.sleep(pause_s)  # each warm-up call holds its worker a moment, so every worker is started
    return os.getpid()


class VerifyPool:
    """``workers`` processes running verification calls (module docstring).

    Parameters
    ----------
    workers:
        Number of processes (>= 1).
    modules:
        Modules each worker imports at start (the verification code).
    one_thread:
        A call decodes video in one thread (:func:`~egopool.codecs.decode_scan.decode_in_one_thread`) when
        True; with FFmpeg's slice threads when False; None (the default): in one thread when, counting it,
        as many calls as there are cores are in flight (every core has its verification: the threads would
        only add their cost), with the threads when fewer are (a lone upload uses every core), docs/decisions.md
        U34.

    Raises
    ------
    VerifierLost
        From :meth:`run` when a worker died mid-call (killed by the OOM killer, a crash in
        native code); the pool is replaced (every call in flight in it fails the same way: the
        executor ends its other workers too) and the importer verifies the upload again, once.
    """

    def __init__(self, workers: int, modules: tuple[str, ...] = ("egopool.server.importer",),
                 one_thread: bool | None = None) -> None:
        self.workers = max(1, int(workers))
        self.modules = modules
        self.one_thread = one_thread
        self.cores = cores()
        self._busy = 0
        self._lock = threading.Lock()
        self._warm: list[Future[int]] = []
        self._pool = self._start()

    def _start(self) -> ProcessPoolExecutor:
        """A new executor whose workers are all being started (not waited for: :attr:`ready`)."""
        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker, initargs=(os.getpid(), self.modules))
        self._warm = [pool.submit(_ready, 0.2) for _ in range(self.workers)]  # one per worker: all spawn now
        return pool

    @property
    def ready(self) -> bool:
        """True once every worker has started and imported its modules."""
        return all(f.done() for f in self._warm)

    def _replace(self, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is broken:
                broken.shutdown(wait=False, cancel_futures=True)
                self._pool = self._start()
            return self._pool

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a worker; its result, or its exception re-raised here. A pool that
        lost a worker while idle is replaced before the call (the call itself is not at fault)."""
        with self._lock:
            pool = self._pool
            self._busy += 1
            one = self._busy >= self.cores if self.one_thread is None else self.one_thread
        try:
            try:
                future = pool.submit(_threaded, one, fn, args, kwargs)
            except BrokenProcessPool:
                pool = self._replace(pool)
                future = pool.submit(_threaded, one, fn, args, kwargs)
            try:
                return future.result()
            except BrokenProcessPool as exc:
                self._replace(pool)
                raise VerifierLost("a verification worker of the server died mid-upload",
                                   hint="the upload was not imported; send it again") from exc
        finally:
            with self._lock:
                self._busy -= 1

    def close(self) -> None:
        """Stop the workers (pending calls are cancelled)."""
        with self._lock:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _call(shared: None, unit: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]) -> Any:
    fn, args, kwargs = unit
    return fn(*args, **kwargs)


class RayVerifier:
    """Verification calls as Ray tasks (``egopool serve --ray``; docs/decisions.md U28): one task per upload, on
    any node with a free CPU, beside the preview builds. The task reads the spooled zip and writes the staging
    directory by path, so every node must see the server's state directory under the same path (one machine,
    or a shared file system), as the preview builds see the store.

    The cluster is joined at the first verification, as the previews join it at their first build: while it
    cannot be reached, uploads are verified in ``workers`` worker processes of this server instead (started
    then; a warning is logged) and Ray is tried again after :attr:`RETRY_S` — an unreachable cluster never
    fails an import.

    Parameters
    ----------
    address:
        As ``serve --ray`` (:class:`~egopool.jobs.executor.RayExecutor`).
    workers:
        Worker processes of the fallback :class:`VerifyPool`.

    Raises
    ------
    VerifierLost
        From :meth:`run` when the task's worker died (Ray does not retry it: the importer does, once, into a
        clean staging directory).
    """

    ready = True
    #: Seconds before an unreachable cluster is tried again.
    RETRY_S = 60.0

    def __init__(self, address: str | None, workers: int = 2) -> None:
        self.address = address
        self.workers = workers
        self._lock = threading.Lock()
        self._ex: RayExecutor[None, Any, Any] | None = None
        self._fallback: VerifyPool | None = None
        self._retry_at = 0.0

    def _target(self) -> RayExecutor[None, Any, Any] | VerifyPool:
        """The Ray executor, or the fallback pool while the cluster cannot be reached."""
        from ..jobs.executor import RayExecutor

        with self._lock:
            if self._ex is None and time.monotonic() >= self._retry_at:
                try:
                    self._ex = RayExecutor(self.address, max_retries=0, max_in_flight=1)
                except EgopoolError as exc:
                    log.warning("verifying uploads in worker processes: %s", exc.one_line())
                    self._retry_at = time.monotonic() + self.RETRY_S
            if self._ex is not None:
                return self._ex
            if self._fallback is None:
                self._fallback = VerifyPool(self.workers)
            return self._fallback

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` as one Ray task (or in the fallback pool); its result, or the ``EgopoolError`` it
        raised re-raised here."""
        from ..errors import OperationError

        ex = self._target()
        if isinstance(ex, VerifyPool):
            return ex.run(fn, *args, **kwargs)
        try:
            [out] = ex.map(_call, None, [(fn, args, kwargs)])
        except OperationError as exc:  # the worker died (or Ray failed): not a verdict on the upload
            raise VerifierLost(f"the Ray task verifying the upload failed: {exc.one_line()}",
                               hint="the upload was not imported; send it again") from exc
        result: T = out
        return result

    def close(self) -> None:
        """Disconnect from the cluster; stop the fallback workers."""
        with self._lock:
            if self._ex is not None:
                self._ex.close()
            if self._fallback is not None:
                self._fallback.close()


#: What runs verification calls: worker processes of this server, or Ray tasks.
Verifier = VerifyPool | RayVerifier
