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
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from ..errors import EgopoolError, OperationError, install_hint

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
#: Seconds the probe of a cluster address waits for a TCP connect, then for a Ray Client ping.
PROBE_TIMEOUT_S = 5.0
#: The port ``ray start --head`` opens for Ray Client (``--ray-client-server-port``) by default.
RAY_CLIENT_PORT = 10001
#: Times ``ray.init("ray://…")`` is tried when the cluster's per-client server dies at its start.
CLIENT_INIT_TRIES = 2
#: What Ray Client's error says then (the proxy forked the server while its gRPC threads ran: Ray issue 63202).
_SERVER_DIED = "Starting Ray client server failed"
_HINT_FORK = ("the head node's Ray Client server could not start a server for this client (Ray issue 63202): "
              "start the head node with GRPC_ENABLE_FORK_SUPPORT=false in its environment")
_HINT_GCS = ("start one with `ray start --head` and pass the address it prints, "
             "or leave --ray without ADDRESS for a local instance")
_HINT_CLIENT = (f"start the head node with `ray start --head --ray-client-server-port={RAY_CLIENT_PORT}` (Ray's "
                f"default port) and pass ray://HEAD:{RAY_CLIENT_PORT}; the port must be reachable from this machine")
_HINT_NOT_CLIENT = ("a GCS address (what `ray start --head` prints, port 6379 by default) is passed as HOST:PORT "
                    f"without ray://; Ray Client listens on the head node's --ray-client-server-port ({RAY_CLIENT_PORT} "
                    "by default)")


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
        ``"ray://host:10001"`` (Ray Client, ``ray[client]``: this process stays the driver, only
        the units run on the cluster, their inputs and results go over gRPC), ``"auto"`` (a cluster started on this machine,
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
        Ray (or, for ``ray://``, Ray Client) is not installed, or the cluster cannot be reached:
        the address is probed first (:func:`_probe`, seconds), then ``ray.init`` connects.
    """

    name = "ray"

    def __init__(self, address: str | None = RAY_DEFAULT_ADDRESS, *, max_retries: int = 3, num_cpus: float = 1.0,
                 max_in_flight: int | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise EgopoolError("--ray needs Ray, which is not installed",
                               hint=install_hint("ray") + " (on every node of the cluster)") from exc
        self._ray = ray
        self.address = address or None
        self.max_retries = int(max_retries)
        self.num_cpus = float(num_cpus)
        self._owns = False
        if not ray.is_initialized():
            target = _effective_address(self.address)
            _probe(target)
            client = _is_client_address(target)
            refused: tuple[type[BaseException], ...] = (ConnectionError, RuntimeError, ValueError, OSError,
                                                        *_grpc_errors())
            try:
                self._init(client)
            except refused as exc:
                hint = _HINT_GCS
                if client:
                    hint = _HINT_FORK if _SERVER_DIED in str(exc) else _HINT_CLIENT
                raise EgopoolError(f"cannot reach the Ray cluster at {_shown(target)}: {_one_line(exc)}",
                                   hint=hint) from exc
            self._owns = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.max_in_flight = max_in_flight if max_in_flight else max(8, 4 * cpus)

    def _init(self, client: bool) -> None:
        """``ray.init``; through Ray Client, again (up to :data:`CLIENT_INIT_TRIES` times) when the cluster's
        per-client server died at its start (Ray issue 63202): nothing was submitted yet, so a retry is safe."""
        for attempt in range(1, CLIENT_INIT_TRIES + 1):
            try:
                with warnings.catch_warnings():
                    # Ray Client warns before it raises its own timeout: the error says it in one line
                    warnings.filterwarnings("ignore", module=r"ray(\.|$)")
                    self._ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING,
                                   configure_logging=False, **self._start_kwargs())
                return
            except ConnectionError as exc:
                if not client or _SERVER_DIED not in str(exc) or attempt == CLIENT_INIT_TRIES:
                    raise
                self._ray.shutdown()

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


def _effective_address(address: str | None) -> str | None:
    """The address ``ray.init(address)`` will use: ``RAY_ADDRESS`` stands in for None and ``"auto"``."""
    env = os.environ.get("RAY_ADDRESS")
    return env if env and address in (None, "auto") else address


def _is_client_address(address: str | None) -> bool:
    """``ray://…``: ``ray.init`` connects as a Ray Client (through the head node's client server)."""
    return address is not None and address.startswith("ray://")


def _shown(address: str | None) -> str:
    """The address as the user wrote it (or where it came from) for a message."""
    if not address:
        return "the default address"
    return address if address != os.environ.get("RAY_ADDRESS") else f"{address} (RAY_ADDRESS)"


def _probe(address: str | None, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast when a cluster address does not answer (``ray.init`` retries for 30 s to minutes).

    ``host:port`` (the GCS): a TCP connect to the address canonicalised as Ray does (it
    replaces ``localhost``/``127.0.0.1`` by the machine's outward address), so what is probed
    is what Ray will dial. ``ray://host:port`` (Ray Client): a TCP connect, then Ray Client's
    own ping over gRPC, so a port that answers but is no Ray Client server (the GCS port, a web
    server) is named too. Each step waits at most ``timeout`` s. ``auto``, ``local``, other
    ``scheme://`` addresses and None are left to ``ray.init``.

    Raises
    ------
    EgopoolError
        The address does not answer, is no Ray Client server, lacks its port, or Ray Client
        (``grpcio``) is not installed.
    """
    if not address or address in ("auto", "local"):
        return
    if _is_client_address(address):
        _probe_client(address, timeout)
        return
    if "://" in address:
        return
    try:
        from ray._private.services import canonicalize_bootstrap_address

        target = canonicalize_bootstrap_address(address) or address
    except Exception:  # noqa: BLE001 - a private helper; probe what the user gave
        target = address
    host, _, port = target.rpartition(":")
    given = address.rpartition(":")[0].strip("[]")
    why = ""
    if host.strip("[]") != given:  # Ray dials 127.0.0.1 / localhost as the machine's outward address
        why = (f"; Ray connects to {given} through this machine's network address {host.strip('[]')}, "
               f"so {target} was tried")
    _tcp_probe(address, host.strip("[]"), port, timeout, _HINT_GCS, why)


def _tcp_probe(address: str, host: str, port: int | str, timeout: float, hint: str, why: str = "") -> None:
    """A TCP connect to ``host:port`` (what Ray will dial for ``address``); ``why`` says why that
    is not ``address`` itself. Raises EgopoolError naming ``address`` when nothing answers."""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        what = f"nothing answers ({reason}{why})" if why else f"{host}:{port} does not answer ({reason})"
        raise EgopoolError(f"cannot reach the Ray cluster at {_shown(address)}: {what}", hint=hint) from exc


def _probe_client(address: str, timeout: float) -> None:
    """``ray://host:port``: the port must be open and answer Ray Client's ping (see :func:`_probe`)."""
    try:
        parts = urlsplit(address)
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or port is None:
        raise EgopoolError(f"--ray {address}: a Ray Client address is ray://HOST:PORT",
                           hint=f"e.g. ray://head-node:{RAY_CLIENT_PORT}, Ray Client's default port")
    try:
        import grpc
        from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc
    except ImportError as exc:
        raise EgopoolError(f"--ray {address} needs Ray Client, which is not installed (no module {exc.name!r})",
                           hint=install_hint("ray") + " (it brings 'ray[client]')") from exc
    _tcp_probe(address, host, port, timeout, _HINT_CLIENT)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:  # Ray's own channel: TLS (RAY_USE_TLS) and token authentication as ray.init will use them
        from ray._private.grpc_utils import init_grpc_channel

        channel = init_grpc_channel(target)
    except Exception:  # noqa: BLE001 - a private helper; a plain channel pings the same server
        channel = grpc.insecure_channel(target)
    try:
        ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
        ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") and exc.code() is not None else type(exc).__name__
        raise EgopoolError(f"cannot reach the Ray cluster at {_shown(address)}: {host}:{port} answers but not as "
                           f"a Ray Client server (gRPC {code})",
                           hint=_HINT_NOT_CLIENT if code == "UNIMPLEMENTED" else _HINT_CLIENT) from exc
    finally:
        channel.close()


def _grpc_errors() -> tuple[type[BaseException], ...]:
    """``grpc.RpcError`` where Ray Client is installed: what a Ray Client call raises when the server fails."""
    try:
        import grpc
    except ImportError:
        return ()
    return (grpc.RpcError,)


def _latest_local_cluster() -> bool:
    """True when ``ray start`` left an address file on this machine (``ray.init()`` would join it)."""
    import tempfile

    return os.path.exists(os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster"))


def _first_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _one_line(exc: BaseException, limit: int = 400) -> str:
    """The whole message on one line (Ray's version-mismatch error puts the versions on the next lines)."""
    text = " ".join(str(exc).split())
    if not text:
        return type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def make_executor(ray_address: str | None = None, **ray_options: Any) -> Executor[Any, Any, Any]:
    """:class:`RayExecutor` when ``ray_address`` is not None (``""`` = Ray's default), else in-process.

    ``ray_options`` go to :class:`RayExecutor` (``max_retries``, ``num_cpus``, ``max_in_flight``).
    """
    if ray_address is None:
        return LocalExecutor()
    return RayExecutor(ray_address, **ray_options)
