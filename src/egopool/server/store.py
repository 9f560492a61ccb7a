"""The server's store: pooled tasks in a :class:`~egopool.storage.Store` plus the server's local state.

::

    <tasks>  a directory, or s3://bucket/prefix           (egopool serve --store)
    ├── <task>/ ...                                      pooled_episodes_v1 tasks (file_format.md §1)
    └── .egopool-server/journals/<sha1(task)[:20]>/<N>.json   publish journals = N claims (§11: a dot prefix)

    <state>  <tasks>/.egopool-server/ for a directory; --state DIR or the per-URI default for a bucket
    ├── server.db, server.lock, owner-id                 the catalog, one server per state directory, the journals' owner
    ├── locks/<task hash>.lock                           per-task import guards
    ├── spool/, staging/, trash/                         request bodies, uploads being verified, finished staging trees
    └── tasks/<task>/meta/                               a bucket task's info.json / stats.json copied for the checks

A directory store's spool and staging are on the tasks' file system, so a verified file reaches its final
place with a link/rename (never a copy); a bucket store's are local and its objects are PUT. Both publish
with one algorithm (:mod:`egopool.publish`, docs/decisions.md O26). What readers see: an episode exists from
its ``meta/episodes`` row on, a task from its ``info.json`` on (created after its first episode's commit).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._atomic import exclusive_lock, task_lock
from .._state import state_dir
from ..errors import EgopoolError, FormatError, LockError, UploadRejectedError
from ..meta import server_imports
from ..meta.info import read_info
from ..publish import JOURNALS, new_owner_id, recover
from ..storage import ObjectPath, Store, as_path, open_store, require_conditional_writes
from ..storage.directory_store import DirectoryStore
from ..storage.s3_store import S3Store
from ..write.checks import check_task_name
from .db import EpisodeRow, ServerDB

__all__ = ["STATE_DIR", "ServerStore", "default_state_dir", "episode_row", "record_into"]

STATE_DIR = server_imports.STATE_DIR


def default_state_dir(uri: str) -> Path:
    """A bucket store's state: ``$XDG_STATE_HOME/egopool/serve/<sha1 of the URI, 16 hex>`` (``~/.local/state``
    without XDG)."""
    return state_dir() / "serve" / hashlib.sha1(uri.rstrip("/").encode("utf-8")).hexdigest()[:16]


def episode_row(doc: dict[str, Any]) -> EpisodeRow:
    """The ``server.db`` row a journal's ``episode`` document holds (:meth:`EpisodeRow.to_dict`)."""
    return EpisodeRow.from_dict(doc)


def record_into(db: ServerDB) -> Any:
    """The publish's ``record`` (:data:`egopool.publish.Record`) writing ``server.db`` in one transaction."""
    def record(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        db.add_episodes_imported([(episode_row(ep), fields) for ep, fields in rows])
    return record


class ServerStore:
    """Tasks in a :class:`~egopool.storage.Store` and the server's local state directory (module docstring).

    Parameters
    ----------
    location:
        A directory (created if missing) or ``s3://bucket/prefix`` (the bucket is created when missing).
    state:
        A bucket store's state directory (None: :func:`default_state_dir`); a directory store's is
        ``<location>/.egopool-server`` (given: used instead).

    Raises
    ------
    StorageError, RegistryError
        The state directory or ``server.db`` cannot be created; ObjectStoreError: the bucket cannot be reached.
    """

    def __init__(self, location: str | os.PathLike[str], *, state: str | os.PathLike[str] | None = None) -> None:
        text = os.fspath(location)
        self.objects: Store = open_store(text if text.startswith("s3://") else Path(text).resolve())
        if isinstance(self.objects, S3Store):
            self.objects.ensure_bucket()
            require_conditional_writes(self.objects, "the server's publish")
        self.uri = self.objects.uri
        #: the tasks' directory (None: a bucket store)
        self.root: Path | None = self.objects.root if isinstance(self.objects, DirectoryStore) else None
        if state is not None:
            self.state = Path(state).resolve()
        elif self.root is not None:
            self.state = self.root / STATE_DIR
        else:
            self.state = default_state_dir(self.uri)
        for d in (self.spool_dir, self.staging_dir, self.trash_dir, self.state / "locks"):
            d.mkdir(parents=True, exist_ok=True)
        if self.root is not None:
            (self.root / JOURNALS).mkdir(parents=True, exist_ok=True)
        idf = self.state / "owner-id"
        if not idf.is_file():
            idf.write_text(new_owner_id() + "\n")
        #: this server's id in the journals it writes
        self.owner = idf.read_text().strip()
        self.db = ServerDB(self.state / "server.db")
        self._server_fd: int | None = None
        self._trash: queue.SimpleQueue[Path] = queue.SimpleQueue()
        self._trash_lock = threading.Lock()
        self._sweeper: threading.Thread | None = None

    # -- local state -----------------------------------------------------------------------------------
    @property
    def spool_dir(self) -> Path:
        """Request bodies being received."""
        return self.state / "spool"

    @property
    def staging_dir(self) -> Path:
        """Uploads being verified."""
        return self.state / "staging"

    @property
    def trash_dir(self) -> Path:
        """Finished staging trees waiting for the background removal (:meth:`discard`)."""
        return self.state / "trash"

    def discard(self, tree: Path) -> None:
        """Take a finished staging tree off the request path: rename it into :attr:`trash_dir` and remove it in a
        background thread (issue 15 H: removing a tree costs an import ~10 ms of ``rmdir``). Falls back to
        removing it here when the rename fails; a tree a killed server left is removed by :meth:`clean_scratch`."""
        dest = self.trash_dir / uuid.uuid4().hex
        try:
            os.rename(tree, dest)
        except FileNotFoundError:
            return
        except OSError:
            shutil.rmtree(tree, ignore_errors=True)
            return
        self._trash.put(dest)
        with self._trash_lock:
            if self._sweeper is None or not self._sweeper.is_alive():
                self._sweeper = threading.Thread(target=self._sweep, name="egopool-trash", daemon=True)
                self._sweeper.start()

    def _sweep(self) -> None:
        while True:
            try:
                tree = self._trash.get(timeout=5.0)
            except queue.Empty:
                with self._trash_lock:
                    if self._trash.empty():
                        self._sweeper = None
                        return
                continue
            shutil.rmtree(tree, ignore_errors=True)

    def new_spool(self) -> Path:
        """A fresh spool file path (not created)."""
        return self.spool_dir / f"{uuid.uuid4().hex}.zip"

    def new_staging(self, upload_id: int, task: str) -> Path:
        """A fresh staging task directory ``staging/<id>-<hex>/<task>/`` (created)."""
        d = self.staging_dir / f"{upload_id}-{uuid.uuid4().hex[:8]}" / task
        d.mkdir(parents=True)
        return d

    def clean_scratch(self) -> None:
        """Empty spool and staging (at start-up: what a killed server left), drop pause markers."""
        for p in self.state.glob("paused-*"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        for d in (self.spool_dir, self.staging_dir, self.trash_dir):
            for e in os.scandir(d):
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(e.path)

    def acquire(self) -> None:
        """Take ``server.lock`` for the life of this process (one server per state directory).

        Raises
        ------
        LockError
            Another ``egopool serve`` holds it.
        """
        fd = os.open(self.state / "server.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockError("another egopool server is running on this store", path=self.state,
                            hint="stop it first; one server per store") from None
        self._server_fd = fd

    def release(self) -> None:
        """Give ``server.lock`` back."""
        if self._server_fd is not None:
            fcntl.flock(self._server_fd, fcntl.LOCK_UN)
            os.close(self._server_fd)
            self._server_fd = None

    @contextlib.contextmanager
    def task_guard(self, name: str) -> Iterator[None]:
        """Serialise this server's imports into one task (threads and processes): ``locks/<sha1 of name>.lock``."""
        key = hashlib.sha1(name.encode("utf-8")).hexdigest()[:20]
        with exclusive_lock(self.state / "locks" / f"{key}.lock"):
            yield

    @contextlib.contextmanager
    def task_lock(self, name: str) -> Iterator[None]:
        """A directory task's writer lock (DESIGN §5: ``sync`` and the local tools take it) when the task exists;
        nothing for a bucket (its writers coordinate by conditional writes alone, O12/O13)."""
        local = self.local_task(name)
        if local is not None and (local / "meta" / "info.json").is_file():
            with task_lock(local):
                yield
        else:
            yield
            if local is not None and (local / "meta" / "info.json").is_file():
                with task_lock(local):  # a task created here gets its lock's anchor now, as the writer's have
                    pass

    # -- tasks -----------------------------------------------------------------------------------------
    def check_task(self, name: str) -> str:
        """``name`` if it is a task name (one path segment, no dot or ``_`` prefix).

        Raises
        ------
        UploadRejectedError
            400 ``bad_task_name``.
        """
        try:
            check_task_name(name)
        except EgopoolError as exc:
            raise UploadRejectedError(400, "bad_task_name", exc.message, hint=exc.hint) from exc
        return name

    def local_task(self, name: str) -> Path | None:
        """The task's directory in a directory store, None in a bucket."""
        return self.root / name if self.root is not None else None

    def task_location(self, name: str) -> Path | ObjectPath:
        """Where readers open the task: ``<store>/<task>`` or ``s3://.../<task>``."""
        return as_path(self.objects.url(name))

    def tasks(self) -> list[str]:
        """Names of the tasks readers see, sorted: ``<name>/`` holding ``meta/info.json`` (created after a task's
        first commit, so a task exists from its first committed episode on)."""
        dirs, _ = self.objects.list_dir("")
        out = []
        for p in dirs:
            name = p.rstrip("/")
            if name and not name.startswith((".", "_")) and self.objects.exists(f"{name}/meta/info.json"):
                out.append(name)
        return sorted(out)

    def has_task(self, name: str) -> bool:
        """True when readers see task ``name``."""
        try:
            check_task_name(name)
        except EgopoolError:
            return False
        return self.objects.exists(f"{name}/meta/info.json")

    def task_info(self, name: str) -> dict[str, Any] | None:
        """The task's ``info.json`` (None: no such task).

        Raises
        ------
        FormatError
            It does not read as a task's ``info.json``.
        """
        local = self.local_task(name)
        if local is not None:
            return read_info(local) if (local / "meta" / "info.json").is_file() else None
        got = self.objects.get(f"{name}/meta/info.json")
        if got is None:
            return None
        try:
            info = json.loads(got[0].decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise FormatError(f"{self.objects.url(name + '/meta/info.json')} is not JSON ({exc})") from exc
        if not isinstance(info, dict):
            raise FormatError(f"{self.objects.url(name + '/meta/info.json')} is not a JSON object")
        return info

    def checks_dir(self, name: str) -> Path:
        """A directory whose ``meta/`` holds the task's ``info.json`` / ``stats.json`` for the writer's own merge
        checks: the task itself in a directory store, a fresh copy under the state in a bucket store."""
        local = self.local_task(name)
        if local is not None:
            return local
        d = self.state / "tasks" / name
        shutil.rmtree(d, ignore_errors=True)
        (d / "meta").mkdir(parents=True)
        for doc in ("info.json", "stats.json"):
            got = self.objects.get(f"{name}/meta/{doc}")
            if got is not None:
                (d / "meta" / doc).write_bytes(got[0])
        return d

    def recover(self, task: str | None = None) -> list[str]:
        """Finish or undo this server's interrupted publishes (and any older than 6 h) of ``task`` (None: every
        task): :func:`egopool.publish.recover`, recording into ``server.db``."""
        return recover(self.objects, self.owner, record_into(self.db), task=task)
