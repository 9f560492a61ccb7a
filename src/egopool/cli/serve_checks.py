"""What ``egopool serve`` checks before it writes anything or starts uvicorn (issue 28).

A file given as ``--store``, a task directory, a port another process listens on and a store directory that
cannot be written were each found only inside uvicorn's start-up (a 20-line traceback, "Application startup
complete" followed by a bind error, a new store left behind). Each is one line here, before the store exists.
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from pathlib import Path

from ..errors import EgopoolError

__all__ = ["check_port", "check_store_bucket", "check_store_directory"]


def check_port(host: str, port: int) -> None:
    """Refuse a port that another socket holds on ``host`` (a bind on the same address, closed at once).

    Raises
    ------
    EgopoolError
        The port is in use, or ``host`` is not an address of this machine.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise EgopoolError(f"port {port} on {host} is in use (another server is listening there)",
                                   hint="stop it, or pick another port with --port") from exc
            raise EgopoolError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                               hint="--host takes an address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from exc


def check_store_directory(store: Path) -> None:
    """Refuse a ``--store`` that is a file, a task (or inside one), or a directory that cannot be written.

    Raises
    ------
    EgopoolError
        One line naming the path and the fix; nothing is created.
    """
    path = store.expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise EgopoolError(f"{path}: --store is a file, not a directory",
                           hint="give the directory the server keeps its tasks in; it is created when missing")
    for d in (path, *path.parents):
        if (d / "meta" / "info.json").is_file():
            where = "is a task" if d == path else f"is inside the task {d}"
            raise EgopoolError(f"{path} {where} (it holds meta/info.json): --store is the directory that holds "
                               "tasks, one per upload name",
                               hint=f"e.g. --store {d.parent} serves {d.name} among its tasks")
    existing = next(d for d in (path, *path.parents) if d.exists())
    try:  # an actual file: root passes os.access everywhere, a read-only mount refuses even root
        with tempfile.TemporaryFile(dir=existing, prefix=".egopool-serve-probe-"):
            pass
    except OSError as exc:
        raise EgopoolError(f"{path}: cannot write the store in {existing} ({os.strerror(exc.errno or 0) or exc})",
                           hint="give a directory this user may write, or fix its permissions") from exc


def check_store_bucket(uri: str) -> None:
    """Refuse an ``s3://`` store that is a task or lies inside one (a HEAD of ``meta/info.json`` per level of
    the prefix), as :func:`check_store_directory` refuses a task directory.

    Raises
    ------
    EgopoolError
        One line naming the task and the store to give instead; ObjectStoreError: the bucket cannot be read.
    """
    from ..storage import open_store
    from ..storage.bucket import parse_bucket_uri

    name, prefix = parse_bucket_uri(uri)
    root = open_store(f"s3://{name}")
    parts = [p for p in prefix.split("/") if p]
    for i in range(len(parts), 0, -1):
        task = "/".join(parts[:i])
        if root.exists(f"{task}/meta/info.json"):
            where = "is a task" if i == len(parts) else f"is inside the task s3://{name}/{task}"
            parent = "/".join(parts[:i - 1])
            raise EgopoolError(f"{uri} {where} (it holds meta/info.json): --store is the prefix that holds tasks, one "
                               "per upload name", hint=f"e.g. --store s3://{name}/{parent}".rstrip("/") +
                               f" serves {parts[i - 1]} among its tasks")
