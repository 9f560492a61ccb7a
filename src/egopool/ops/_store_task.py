"""A task seen through its :class:`~egopool.storage.Store` (issue 24): one implementation of a command for a task
directory and for ``s3://bucket/prefix/task``.

Reads go through the task's path (``pathlib.Path`` or :class:`~egopool.storage.ObjectPath`: the readers read
both); writes through the store (atomic per object; ``CREATE`` / ``UPDATE`` conditional). What only a directory
has (the ``flock`` task lock, the recorder's reservations, ``pipeline.db``) stays the directory's extra; on a
bucket a command's journal object is its ownership: created with ``CREATE`` (two runs cannot both own the job),
rewritten with ``UPDATE`` at the version it read (a run that lost the job to another notices at its next step),
and taken over by a later run only when its owner is dead (same host: its pid is gone; another host: the
journal is older than :data:`STALE_AFTER`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._holders import (EDIT_JOURNAL, STALE_AFTER, edit_in_progress, holder_alive, holder_text, journal_doc,
                        lock_holder, pid_alive)
from ..errors import FormatError, LockError
from ..meta.info import read_info
from ..publish import json_bytes as _json_bytes
from ..storage import ObjectPath, PreconditionFailed, PutMode, Store, as_path, open_store
from ..storage.directory_store import DirectoryStore

__all__ = ["EDIT_JOURNAL", "STALE_AFTER", "StoreTask", "edit_in_progress", "holder_alive", "holder_text", "json_bytes",
           "lock_holder", "open_store_task", "refuse_edited"]

def json_bytes(obj: Any, *, indent: int | None = 2) -> bytes:
    """:func:`egopool.publish.json_bytes` with an indent of 2 by default (the journal objects of this module).

    Raises
    ------
    FormatError
        ``obj`` holds NaN or Infinity.
    """
    return _json_bytes(obj, indent=indent)


def refuse_edited(store: Store, task: str, nothing: str) -> None:
    """Refuse (:func:`edit_in_progress`) when the task at ``store`` holds an edit's journal; else nothing.

    Raises
    ------
    LockError
        The task holds an edit's journal (named: in progress, or interrupted with the fix).
    """
    got = store.get(EDIT_JOURNAL)
    if got is None:
        return
    raise edit_in_progress(journal_doc(got[0]), store.url(EDIT_JOURNAL), task, nothing)


@dataclass
class StoreTask:
    """One task: ``root`` to read (a ``Path`` or an ``ObjectPath``), ``store`` to write (rooted at the task).

    Attributes
    ----------
    local:
        The task directory when the task is one (its lock, reservations and registry apply), else None.
    owner:
        This run's identity in a journal: ``{"host", "pid", "id", "at"}``.
    """

    root: Path | ObjectPath
    store: Store
    local: Path | None
    owner: dict[str, Any] = field(default_factory=lambda: {"host": socket.gethostname(), "pid": os.getpid(),
                                                           "id": uuid.uuid4().hex})

    @property
    def uri(self) -> str:
        """The task's location, for messages."""
        return str(self.root)

    def key(self, path: Path | ObjectPath | str) -> str:
        """The task-relative key of a path under ``root`` (``videos/chunk-000/k/episode-000.mkv``)."""
        text, base = str(path), str(self.root).rstrip("/")
        if not text.startswith(base + "/"):
            raise ValueError(f"{text} is not under {base}")
        return text[len(base) + 1:]

    def path(self, key: str) -> Path | ObjectPath:
        """The readable path of ``key``."""
        return self.root / key

    # -- JSON objects ------------------------------------------------------------------------------------
    def get_json(self, key: str, what: str) -> tuple[dict[str, Any], str] | None:
        """``(document, version)`` of a JSON object, None when absent.

        Raises
        ------
        FormatError
            Not a JSON object (named).
        """
        got = self.store.get(key)
        if got is None:
            return None
        try:
            doc = json.loads(got[0].decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise FormatError(f"{what} is not JSON ({exc})", path=self.store.url(key)) from exc
        if not isinstance(doc, dict):
            raise FormatError(f"{what} is not a JSON object", path=self.store.url(key))
        return doc, got[1]

    def download(self, key: str, dest: Path) -> Path:
        """The object ``key`` as a local file: its own file for a directory, else a copy at ``dest``."""
        if self.local is not None:
            return self.local / key
        dest.parent.mkdir(parents=True, exist_ok=True)
        with self.store.open_input(key) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        return dest

    # -- a journal as the job's ownership (bucket) ---------------------------------------------------------
    def own_journal(self, key: str, doc: dict[str, Any] | None, version: str | None, command: str) -> str | None:
        """Make this run the owner of the journal ``key`` (``doc``/``version`` as read; None: there is none).

        A directory's journal is owned through the task lock the caller holds: nothing to do (returns
        ``version``). On a bucket: a journal whose owner may still run is refused; a dead one's is taken over by
        a compare-and-swap (two re-runs cannot both take it). Returns the journal's version now (None: none yet).

        Raises
        ------
        LockError
            Another run owns the job (named: host, pid, age) or took it over meanwhile.
        """
        if self.local is not None or doc is None or version is None:
            return version
        prev = doc.get("owner")
        prev = prev if isinstance(prev, dict) else {}
        host, pid, at = prev.get("host"), prev.get("pid"), float(prev.get("at") or 0.0)
        mine = prev.get("id") == self.owner["id"]
        if not mine:
            alive = (pid_alive(int(pid)) if host == self.owner["host"] and isinstance(pid, int)
                     else time.time() - at < STALE_AFTER)
            if alive:
                raise LockError(f"another `egopool {command}` (pid {pid} on {host}) owns this task's job "
                                f"({self.store.url(key)})", path=self.uri,
                                hint=f"wait for it to finish; a journal of a killed run is taken over at once on "
                                     f"{host}, elsewhere after {STALE_AFTER / 3600:.0f} h")
        try:
            return self.store.put(key, json_bytes({**doc, "owner": self.stamp()}), mode=PutMode.UPDATE,
                                  version=version)
        except PreconditionFailed as exc:
            raise LockError(f"another `egopool {command}` took over this task's job meanwhile "
                            f"({self.store.url(key)})", path=self.uri, hint="let it finish") from exc

    def stamp(self) -> dict[str, Any]:
        """This run's owner record, with the time of this step."""
        return {**self.owner, "at": time.time()}

    def write_journal(self, key: str, doc: dict[str, Any], version: str | None, command: str) -> str:
        """Write the journal this run owns; returns its new version.

        Directory: a plain atomic write (the task lock is held). Bucket: ``CREATE`` when ``version`` is None,
        else ``UPDATE`` at ``version``.

        Raises
        ------
        LockError
            Another run created or took over the journal meanwhile.
        """
        data = json_bytes({**doc, "owner": self.stamp()})
        if self.local is not None:
            return self.store.put(key, data)
        try:
            if version is None:
                return self.store.put(key, data, mode=PutMode.CREATE)
            return self.store.put(key, data, mode=PutMode.UPDATE, version=version)
        except PreconditionFailed as exc:
            raise LockError(f"another `egopool {command}` owns this task's job ({self.store.url(key)})",
                            path=self.uri, hint="let it finish; nothing of this run was switched") from exc


def open_store_task(location: str | os.PathLike[str] | ObjectPath) -> StoreTask:
    """The task at ``location`` (a directory or ``s3://bucket/prefix/task``), its ``info.json`` checked.

    Raises
    ------
    FormatError
        Not a task (``meta/info.json`` missing, the directory or prefix does not exist), named.
    ObjectStoreError
        The bucket does not exist or refuses the credentials (one line naming the URI and the fix).
    """
    root = as_path(location if isinstance(location, ObjectPath) else os.fspath(location))
    read_info(root)  # one line for a wrong directory, a missing bucket, a prefix that is not a task
    store = open_store(str(root))
    local = store.root if isinstance(store, DirectoryStore) else None
    return StoreTask(root, store, local)
