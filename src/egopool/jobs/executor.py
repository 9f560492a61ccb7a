"""Run one function per work item, in this process or as one Ray task each (docs/decisions.md K3).

A collection-wide job (validate, stats recalc, keypoints extract) is a list of small,
independent *units* (one episode, or the episodes sharing one legacy meta shard) and a
per-unit function ``fn(shared, unit) -> result``. An :class:`Executor` runs the units and
returns the results **in unit order**, whatever order they finished in, so the driver
merges them exactly as an in-process run would:

* :class:`LocalExecutor` calls ``fn`` in a loop (no Ray, the default);
* :class:`RayExecutor` submits one Ray core task per unit (``ray.remote(fn)``), at most
  ``max_in_flight`` at a time, with ``shared`` stored once in the object store. A worker
  that dies mid-task (killed, out of memory, node lost) is retried by Ray up to
  ``max_retries`` times; an exception raised *by* ``fn`` is not retried (it would fail
  again) and is re-raised on the driver as the original :class:`~egopool.errors.EgopoolError`.

Units read and write files by path, so every Ray node must see the task directories
under the same paths (a shared file system) and have egopool installed. Writes a unit
makes go through the task lock (``flock`` on ``meta/episodes/.lock``), so a Ray job and
a local recorder can work on one task at once.

::

    with make_executor(ray_address) as ex:          # None = in-process
        results = ex.map(fn, shared, units, progress=cb)
"""

from __future__ import annotations

import abc
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ..errors import EgopoolError, OperationError

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "UnitProgress", "make_executor"]

S = TypeVar("S")
U = TypeVar("U")
R = TypeVar("R")

#: ``progress(done_units, total_units)``: called on the driver after each unit finished.
UnitProgress = Callable[[int, int], None]

#: ``--ray`` without an ADDRESS: let ``ray.init()`` find the cluster (``RAY_ADDRESS``, the
#: latest ``ray start`` on this machine) or start a private local one.
RAY_DEFAULT_ADDRESS = ""
#: Seconds a failing ``map`` waits for its cancelled units to stop (force-cancel kills their workers).
CANCEL_WAIT_S = 30.0


class Executor(abc.ABC, Generic[S, U, R]):
    """Runs ``fn(shared, unit)`` for every unit; results in unit order. Use as a context manager."""

    #: Shown in reports: ``"in-process"`` or ``"ray"``.
    name = "executor"

    @abc.abstractmethod
    def map(self, fn: Callable[[S, U], R], shared: S, units: Sequence[U], *,
            progress: UnitProgress | None = None) -> list[R]:
        """Run ``fn`` on every unit.

        Parameters
        ----------
        fn:
            A module-level function (Ray ships it to workers by reference).
        shared:
            Read-only input common to every unit (task path, ``info.json``...), sent once.
        units:
            The work items, e.g. lists of :class:`~egopool.layout.EpisodeFiles`.
        progress:
            ``progress(done, total)`` after each finished unit.

        Returns
        -------
        list
            ``fn``'s results, ``result[i]`` for ``units[i]``.

        Raises
        ------
        EgopoolError
            Whatever ``fn`` raised for the first failing unit (the other units are cancelled).
        OperationError
            A unit's worker died more often than the retries allow, or Ray failed.
        """

    def close(self) -> None:
        """Release what the executor holds (the Ray connection)."""

    def __enter__(self) -> Executor[S, U, R]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor[S, U, R]):
    """Every unit in this process, one after the other (what runs without ``--ray``)."""

    name = "in-process"

    def map(self, fn: Callable[[S, U], R], shared: S, units: Sequence[U], *,
            progress: UnitProgress | None = None) -> list[R]:
        out: list[R] = []
        for i, unit in enumerate(units):
            out.append(fn(shared, unit))
            if progress is not None:
                progress(i + 1, len(units))
        return out


class RayExecutor(Executor[S, U, R]):
    """One Ray core task per unit on a Ray cluster (the ``ray`` extra: ``pip install egopool[ray]``).

    Parameters
    ----------
    address:
        ``"host:port"`` of a running cluster's GCS (``ray start --head`` prints it),
        ``"ray://host:10001"`` (Ray Client), ``"auto"`` (a cluster started on this machine,
        error when none), ``"local"`` (a new private instance) or ``""``/None:
        ``ray.init()``'s own resolution (``RAY_ADDRESS``, else the latest cluster started
        on this machine, else a new private instance).
    max_retries:
        Times Ray re-runs a unit whose worker died (SIGKILL, OOM, lost node).
    num_cpus:
        CPUs each unit reserves (1: as many units at once as the cluster has CPUs).
    max_in_flight:
        Units submitted but not finished at any time (default ``4 ×`` the cluster's
        CPUs, at least 8): bounds driver memory on a 10⁶-unit job.

    Raises
    ------
    EgopoolError
        Ray is not installed, or the cluster cannot be reached.
    """

    name = "ray"

    def __init__(self, address: str | None = RAY_DEFAULT_ADDRESS, *, max_retries: int = 3, num_cpus: float = 1.0,
                 max_in_flight: int | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise EgopoolError("--ray needs Ray, which is not installed",
                               hint="pip install 'egopool[ray]' (on every node of the cluster)") from exc
        self._ray = ray
        self.address = address or None
        self.max_retries = int(max_retries)
        self.num_cpus = float(num_cpus)
        self._owns = False
        if not ray.is_initialized():
            _probe(self.address)
            try:
                ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING,
                         configure_logging=False, **self._start_kwargs())
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise EgopoolError(f"cannot reach the Ray cluster at {address or 'the default address'}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                                   hint="start one with `ray start --head` and pass its address, "
                                        "or leave --ray without ADDRESS for a local instance") from exc
            self._owns = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.max_in_flight = max_in_flight if max_in_flight else max(8, 4 * cpus)

    def _start_kwargs(self) -> dict[str, Any]:
        """Options that only apply when ``ray.init`` starts a new instance (it refuses them otherwise)."""
        starts = self.address == "local" or (self.address is None and not os.environ.get("RAY_ADDRESS")
                                             and not _latest_local_cluster())
        # a private instance only serves this driver: keep it on the loopback interface
        return {"include_dashboard": False, "_node_ip_address": "127.0.0.1"} if starts else {}

    def map(self, fn: Callable[[S, U], R], shared: S, units: Sequence[U], *,
            progress: UnitProgress | None = None) -> list[R]:
        ray = self._ray
        from ray.exceptions import RayError, RayTaskError

        remote = ray.remote(fn).options(num_cpus=self.num_cpus, max_retries=self.max_retries,
                                        retry_exceptions=False, name=f"egopool.{fn.__name__}")
        shared_ref = ray.put(shared)
        results: list[Any] = [None] * len(units)
        pending: dict[Any, int] = {}
        submitted = done = 0
        try:
            while done < len(units):
                while submitted < len(units) and len(pending) < self.max_in_flight:
                    pending[remote.remote(shared_ref, units[submitted])] = submitted
                    submitted += 1
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    i = pending.pop(ref)
                    results[i] = ray.get(ref)
                    done += 1
                    if progress is not None:
                        progress(done, len(units))
        except RayTaskError as exc:
            self._cancel(pending)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, EgopoolError):
                raise cause from None
            raise OperationError(f"a Ray task of {fn.__name__} failed: {_first_line(cause or exc)}") from exc
        except RayError as exc:  # worker died more often than max_retries, object lost, ...
            self._cancel(pending)
            raise OperationError(f"Ray could not finish {fn.__name__} ({type(exc).__name__}: {_first_line(exc)})",
                                 hint=f"each unit is retried {self.max_retries} times when its worker dies; "
                                      "check the cluster (`ray status`) and run the command again") from exc
        except BaseException:
            self._cancel(pending)
            raise
        return results

    def _cancel(self, pending: dict[Any, int]) -> None:
        """Cancel the units still pending and wait (up to :data:`CANCEL_WAIT_S`) until they stopped.

        A unit still running after ``map`` raised could write after the driver cleaned up
        (an export's staging directory, a mirror's temps): the wait makes ``map`` return
        only when its units no longer run.
        """
        for ref in pending:
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - best effort: the job is failing anyway
                pass
        if pending:
            try:
                self._ray.wait(list(pending), num_returns=len(pending), timeout=CANCEL_WAIT_S)
            except Exception:  # noqa: BLE001 - best effort, as above
                pass

    def close(self) -> None:
        """Disconnect (and stop the instance when this executor started it)."""
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns = False


def _probe(address: str | None, timeout: float = 5.0) -> None:
    """Fail fast when a ``host:port`` cluster address does not answer (``ray.init`` retries for minutes).

    The address is first canonicalised as Ray does (it replaces ``localhost``/``127.0.0.1`` by the
    machine's outward address), so what is probed is what Ray will dial.
    """
    if not address or address in ("auto", "local") or "://" in address:
        return
    try:
        from ray._private.services import canonicalize_bootstrap_address

        target = canonicalize_bootstrap_address(address) or address
    except Exception:  # noqa: BLE001 - a private helper; probe what the user gave
        target = address
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        raise EgopoolError(f"cannot reach the Ray cluster at {address}: {host}:{port} does not answer "
                           f"({getattr(exc, 'strerror', None) or exc})",
                           hint="start one with `ray start --head` and pass the address it prints, "
                                "or leave --ray without ADDRESS for a local instance") from exc


def _latest_local_cluster() -> bool:
    """True when ``ray start`` left an address file on this machine (``ray.init()`` would join it)."""
    import tempfile

    return os.path.exists(os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster"))


def _first_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def make_executor(ray_address: str | None = None, **ray_options: Any) -> Executor[Any, Any, Any]:
    """:class:`RayExecutor` when ``ray_address`` is not None (``""`` = Ray's default), else in-process.

    ``ray_options`` go to :class:`RayExecutor` (``max_retries``, ``num_cpus``, ``max_in_flight``).
    """
    if ray_address is None:
        return LocalExecutor()
    return RayExecutor(ray_address, **ray_options)
