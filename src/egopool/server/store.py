"""The server's store: pooled task directories plus the server's own dot directory.

::

    <store>/
    ├── <task>/ ...                   pooled_episodes_v1 tasks (file_format.md §1)
    └── .egopool-server/              the server's state (a dot directory: ignored by readers, §11)
        ├── server.db                 uploads and the (client host id, client N) -> server N mapping
        ├── server.lock               held by the running server (one server per store)
        ├── locks/<task hash>.lock    per-task import lock
        ├── journals/                 publish journals of imports in progress
        ├── spool/                    request bodies being received
        ├── staging/                  uploads being verified
        └── trash/                    finished staging trees, removed by a background thread

Spool and staging are on the store's file system, so a verified file reaches its final
place with a rename (atomic, never a copy).

What readers see (docs/decisions.md U5): an episode exists from its commit object on, its
``meta/episodes`` row, placed last by :func:`egopool.server.publish.publish_episode`; a task
the server is creating exists from its first episode's commit on (:meth:`Store.tasks`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import queue
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .._atomic import exclusive_lock
from .._safe_read import read_json
from ..errors import EgopoolError, LockError, UploadRejectedError
from ..meta import server_imports
from ..write.checks import check_task_name
from .db import ServerDB

__all__ = ["STATE_DIR", "Store"]

STATE_DIR = server_imports.STATE_DIR


class Store:
    """Paths and locks of one store directory (created if missing).

    Parameters
    ----------
    root:
        The store directory: every task is ``root / <task name>``.
    state_dir:
        The state directory (default ``root / .egopool-server``; a bucket store's is local,
        :class:`~egopool.server.bucket_store.BucketStore`).

    Raises
    ------
    StorageError, RegistryError
        The state directory or ``server.db`` cannot be created.
    """

    #: the bucket of a :class:`~egopool.server.bucket_store.BucketStore`; None: tasks are directories under root
    bucket: Any = None

    def __init__(self, root: str | Path, *, state_dir: str | Path | None = None) -> None:
        self.root = Path(root).resolve()
        self.state = Path(state_dir).resolve() if state_dir is not None else self.root / STATE_DIR
        for d in (self.spool_dir, self.staging_dir, self.journal_dir, self.trash_dir, self.state / "locks"):
            d.mkdir(parents=True, exist_ok=True)
        self.db = ServerDB(self.state / "server.db")
        self._server_fd: int | None = None
        self._trash: queue.SimpleQueue[Path] = queue.SimpleQueue()
        self._trash_lock = threading.Lock()
        self._sweeper: threading.Thread | None = None

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
        """Take a finished staging tree off the request path: rename it into :attr:`trash_dir` (one
        rename, the same file system) and remove it in a background thread (issue 15 H: removing a
        tree of directories costs an import ~10 ms of ``rmdir``). Falls back to removing it here
        when the rename fails. A tree left by a killed server is removed by :meth:`clean_scratch`.
        """
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

    @property
    def journal_dir(self) -> Path:
        """Publish journals."""
        return self.state / "journals"

    def task_dir(self, name: str) -> Path:
        """``root / name`` after checking the name (one directory name, no dot or ``_`` prefix).

        Raises
        ------
        UploadRejectedError
            400 ``bad_task_name``.
        """
        try:
            check_task_name(name)
        except EgopoolError as exc:
            raise UploadRejectedError(400, "bad_task_name", exc.message, hint=exc.hint) from exc
        return self.tasks_root / name

    @property
    def tasks_root(self) -> Path:
        """Where :meth:`task_dir` places a task: the store root (a bucket store: its local scratch, O13)."""
        return self.root

    def tasks(self) -> list[str]:
        """Names of the tasks readers see, sorted: directories holding ``meta/info.json``, except a
        task whose first episode is being published (it exists from that episode's commit on)."""
        out = []
        for e in os.scandir(self.root):
            if e.is_dir(follow_symlinks=False) and not e.name.startswith((".", "_")) and \
                    os.path.isfile(os.path.join(e.path, "meta", "info.json")):
                out.append(e.name)
        creating = self.creating_tasks() if out else set()  # after the listing: see creating_tasks
        return sorted(n for n in out if n not in creating)

    def has_task(self, name: str) -> bool:
        """True when readers see task ``name`` (:meth:`tasks`)."""
        try:
            check_task_name(name)
        except EgopoolError:
            return False
        return (self.root / name / "meta" / "info.json").is_file() and name not in self.creating_tasks()

    def acquire(self) -> None:
        """Take ``server.lock`` for the life of this process (one server per store).

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
            raise LockError("another egopool server is running on this store", path=self.root,
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
        """Serialise imports into one task (threads and processes): ``locks/<sha1 of name>.lock``.

        Held around the whole publish; the task directory's own lock (``meta/episodes/.lock``)
        is taken inside it once the task exists.
        """
        key = hashlib.sha1(name.encode("utf-8")).hexdigest()[:20]
        with exclusive_lock(self.state / "locks" / f"{key}.lock"):
            yield

    def journal_prefix(self, name: str) -> str:
        """File-name prefix of the publish journals of task ``name``."""
        return server_imports.journal_prefix(name)  # ls and validate on the store read them too (U16)

    def journals(self, task: str | None = None) -> list[tuple[Path, dict[str, Any] | None]]:
        """The publish journals of ``task`` (None: of every task), by file name.

        Returns
        -------
        list of (path, document)
            The document is None when the file does not read as a JSON object naming its task,
            N and files (a journal is written atomically, so such a file was never written
            through: nothing was placed).
        """
        prefix = self.journal_prefix(task) if task is not None else "import-"
        out: list[tuple[Path, dict[str, Any] | None]] = []
        for jp in sorted(self.journal_dir.glob(f"{prefix}*.json")):
            try:
                doc = read_json(jp, what="publish journal")
            except EgopoolError:
                if not jp.exists():  # finished and unlinked meanwhile
                    continue
                doc = None
            whole = isinstance(doc, dict) and isinstance(doc.get("task"), str) and \
                isinstance(doc.get("index"), int) and isinstance(doc.get("files"), list)
            out.append((jp, doc if whole else None))
        return out

    def committed(self, journal: Mapping[str, Any]) -> bool:
        """True when the publish ``journal`` describes has reached its commit point: its commit object
        (the episode's ``meta/episodes`` row, placed after every other file of the episode) exists.

        The journal records intent only; the commit is the row itself, so what readers see
        and what recovery keeps are one and the same (docs/decisions.md U5).
        """
        files = journal.get("files") or []
        rel = journal.get("commit") or (files[-1] if files else None)  # older journals: the row is last
        return isinstance(rel, str) and (self.root / str(journal.get("task")) / rel).is_file()

    def creating_tasks(self) -> set[str]:
        """Tasks whose first episode is being published and has not committed (readers do not see them yet).

        Call it after listing the task directories: a publish writes its journal before the
        new task's ``info.json``, so a task seen by the listing is either here or committed.
        """
        return {str(doc["task"]) for _, doc in self.journals()
                if doc is not None and doc.get("new_task") and not self.committed(doc)}

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
