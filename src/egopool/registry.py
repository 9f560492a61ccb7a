"""The local registry ``pipeline.db``: one row per recording and the per-task watermark (DESIGN §1).

``pipeline.db`` is an SQLite file beside the task directories (in the recordings
root, the parent of every ``<task>/``). It holds

* ``recordings``: one row per finished episode ``(task, episode_index)`` with its
  ``status`` (``recorded`` / ``uploaded`` / ``deleted``), total size and timestamps;
* ``recording_files``: every file of the episode's group (path relative to the task
  directory, size in bytes, sha256 hex);
* ``watermarks``: the highest N ever finished or deleted per task. It never
  decreases, so a deleted N is never handed out again even when every file of it,
  and ``info.json``, are gone (file_format.md §2 "删除不回退");
* ``uploads``: what a pooling server answered for an uploaded episode ``(task, N,
  server)``; it outlives the ``recordings`` row (``egopool upload --delete-after``), so a
  re-run knows the episode is on the server (file_format.md §9);
* ``settings``: the recordings root's ``client_key`` (a secret) and the public ``host_id``
  derived from it, the client identity an upload carries (docs/decisions.md U11).

The writer records into it after an episode is published; ``egopool delete`` marks a
row ``deleted`` before touching files and removes it once the files are verified gone
(file_format.md §2, §9). The task key is the task directory's name.

Every public call opens its own short connection (safe across processes; SQLite's
own locking serialises writers, ``timeout`` 30 s) and commits before it returns; inside
:meth:`Registry.session` the calls of one thread share one connection (still one transaction
each). Any SQLite or file error becomes a
:class:`~egopool.errors.RegistryError` naming ``pipeline.db``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import RegistryError
from .identity import ClientIdentity, derive_client_key, host_id_of_key
from .registry_records import FileRecord, Recording, UploadRecord, file_record, sha256_file

__all__ = [
    "REGISTRY_NAME",
    "STATUSES",
    "FileRecord",
    "Recording",
    "UploadRecord",
    "Registry",
    "file_record",
    "record_episode",
    "registry_path",
    "sha256_file",
    "task_key",
]

REGISTRY_NAME = "pipeline.db"
STATUSES = ("recorded", "uploaded", "deleted")
_SCHEMA_VERSION = 2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS recordings (
    task          TEXT    NOT NULL,
    episode_index INTEGER NOT NULL CHECK (episode_index >= 1),
    status        TEXT    NOT NULL CHECK (status IN ('recorded', 'uploaded', 'deleted')),
    total_bytes   INTEGER NOT NULL,
    recorded_at   REAL    NOT NULL,
    updated_at    REAL    NOT NULL,
    PRIMARY KEY (task, episode_index)
);
CREATE TABLE IF NOT EXISTS recording_files (
    task          TEXT    NOT NULL,
    episode_index INTEGER NOT NULL,
    path          TEXT    NOT NULL,
    size          INTEGER NOT NULL,
    sha256        TEXT    NOT NULL,
    PRIMARY KEY (task, episode_index, path),
    FOREIGN KEY (task, episode_index) REFERENCES recordings (task, episode_index) ON DELETE CASCADE
);
CREATE TABLE IF NOT EXISTS watermarks (
    task       TEXT    PRIMARY KEY,
    last_index INTEGER NOT NULL,
    updated_at REAL    NOT NULL
);
CREATE TABLE IF NOT EXISTS uploads (
    task                 TEXT    NOT NULL,
    episode_index        INTEGER NOT NULL,
    server               TEXT    NOT NULL,
    episode_digest       TEXT    NOT NULL,
    zip_sha256           TEXT    NOT NULL,
    server_task          TEXT    NOT NULL,
    server_episode_index INTEGER NOT NULL,
    answer               TEXT    NOT NULL,
    uploaded_at          REAL    NOT NULL,
    PRIMARY KEY (task, episode_index, server)
);
CREATE TABLE IF NOT EXISTS settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


def registry_path(task_dir: str | Path) -> Path:
    """``pipeline.db`` beside the task: ``<recordings root>/pipeline.db`` for ``<root>/<task>``."""
    return Path(os.path.abspath(task_dir)).parent / REGISTRY_NAME


def task_key(task_dir: str | Path) -> str:
    """The registry's key for a task: its directory name (symlinks not resolved)."""
    return Path(os.path.abspath(task_dir)).name


class Registry:
    """Handle on one ``pipeline.db``; the file and its tables are created on first write.

    Parameters
    ----------
    path:
        The database file.

    Raises
    ------
    RegistryError
        From every method when SQLite fails (unwritable directory, corrupt file, busy > 30 s).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._held: dict[str, Any] | None = None  # the open session (:meth:`session`)

    @classmethod
    def for_task(cls, task_dir: str | Path) -> Registry:
        """The registry beside ``task_dir`` (:func:`registry_path`)."""
        return cls(registry_path(task_dir))

    def __repr__(self) -> str:
        return f"Registry({str(self.path)!r})"

    @contextlib.contextmanager
    def session(self) -> Iterator[Registry]:
        """Keep one SQLite connection for this thread's calls inside the block (``egopool upload``'s run).

        Every call still runs in its own transaction and commits before it returns (the same
        durability as without a session); only the connect, ``PRAGMA foreign_keys`` and the close
        around each call are saved. Calls from other threads open their own connection as usual. The
        connection is opened on the first call that needs the file and reopened when ``pipeline.db``
        was replaced or removed meanwhile (another inode at the path). Re-entering is a no-op.
        """
        if self._held is not None:
            yield self
            return
        self._held = {"thread": threading.get_ident(), "con": None, "inode": None}
        try:
            yield self
        finally:
            held, self._held = self._held, None
            if held["con"] is not None:
                with contextlib.suppress(sqlite3.Error):
                    held["con"].close()

    def _open(self) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        except sqlite3.Error as exc:
            raise RegistryError(f"cannot open registry: {exc}", path=self.path,
                                hint="check that the recordings root is writable") from exc
        try:
            con.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            con.close()
            raise RegistryError(f"registry operation failed: {exc}", path=self.path,
                                hint="check that the recordings root is writable and pipeline.db is not corrupt") from exc
        return con

    def _session_connection(self) -> sqlite3.Connection | None:
        """The session's connection for this thread (opened or reopened as needed), or None outside one."""
        held = self._held
        if held is None or held["thread"] != threading.get_ident():
            return None
        try:
            st = os.stat(self.path)
            inode = (st.st_dev, st.st_ino)
        except OSError:
            inode = None
        if held["con"] is not None and (inode is None or inode != held["inode"]):  # replaced or removed
            with contextlib.suppress(sqlite3.Error):
                held["con"].close()
            held["con"] = None
        if held["con"] is None:
            held["con"], held["inode"] = self._open(), None
            with contextlib.suppress(OSError):  # None: checked (and reopened) again on the next call
                st = os.stat(self.path)
                held["inode"] = (st.st_dev, st.st_ino)
        return held["con"]

    @contextlib.contextmanager
    def _connect(self, write: bool) -> Iterator[sqlite3.Connection]:
        if not write and not self.path.exists():
            # Reading a registry that does not exist yet: behave as empty, create nothing.
            mem = sqlite3.connect(":memory:", isolation_level=None)
            try:
                _create_schema(mem)
                yield mem
            finally:
                mem.close()
            return
        shared = self._session_connection()
        con = shared if shared is not None else self._open()
        try:
            con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise RegistryError(f"registry schema version {version} is newer than this egopool "
                                    f"understands ({_SCHEMA_VERSION})", path=self.path, hint="upgrade egopool")
            if version < _SCHEMA_VERSION:
                if not write:  # upgrade under a write lock, then continue reading
                    con.execute("COMMIT")
                    con.execute("BEGIN IMMEDIATE")
                _create_schema(con)
            yield con
            con.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise RegistryError(f"registry operation failed: {exc}", path=self.path,
                                hint="check that the recordings root is writable and pipeline.db is not corrupt") from exc
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise
        finally:
            if shared is None:
                con.close()

    # -- recordings ------------------------------------------------------------------------------
    def record(self, task: str, index: int, files: Sequence[FileRecord], *, status: str = "recorded",
               recorded_at: float | None = None) -> Recording:
        """Insert or replace N's row and files, and raise the task's watermark to at least N.

        Parameters
        ----------
        task:
            Task directory name.
        index:
            Global 1-based N.
        files:
            The episode's files (:func:`file_record`).
        status:
            One of :data:`STATUSES`.
        recorded_at:
            Unix s (default: now).
        """
        _check_status(status)
        now = time.time()
        rec_at = float(now if recorded_at is None else recorded_at)
        total = sum(f.size for f in files)
        with self._connect(write=True) as con:
            con.execute("DELETE FROM recordings WHERE task = ? AND episode_index = ?", (task, index))
            con.execute("INSERT INTO recordings VALUES (?, ?, ?, ?, ?, ?)", (task, index, status, total, rec_at, now))
            con.executemany("INSERT INTO recording_files VALUES (?, ?, ?, ?, ?)",
                            [(task, index, f.path, f.size, f.sha256) for f in files])
            _bump(con, task, index, now)
        return Recording(task, index, status, total, rec_at, now, tuple(sorted(files, key=lambda f: f.path)))

    def record_many(self, task: str, recordings: Sequence[tuple[int, Sequence[FileRecord]]], *,
                    status: str = "recorded", recorded_at: float | None = None) -> int:
        """:meth:`record` for many episodes in one transaction (importing an existing task).

        Parameters
        ----------
        recordings:
            ``(N, files)`` pairs.

        Returns
        -------
        int
            The task's watermark afterwards.
        """
        _check_status(status)
        now = time.time()
        rec_at = float(now if recorded_at is None else recorded_at)
        with self._connect(write=True) as con:
            top = 0
            for index, files in recordings:
                con.execute("DELETE FROM recordings WHERE task = ? AND episode_index = ?", (task, index))
                con.execute("INSERT INTO recordings VALUES (?, ?, ?, ?, ?, ?)",
                            (task, index, status, sum(f.size for f in files), rec_at, now))
                con.executemany("INSERT INTO recording_files VALUES (?, ?, ?, ?, ?)",
                                [(task, index, f.path, f.size, f.sha256) for f in files])
                top = max(top, int(index))
            return _bump(con, task, top, now) if recordings else int(
                (con.execute("SELECT last_index FROM watermarks WHERE task = ?", (task,)).fetchone() or (0,))[0])

    def get(self, task: str, index: int) -> Recording | None:
        """N's row, or None."""
        with self._connect(write=False) as con:
            rows = _fetch(con, task, [index])
        return rows[0] if rows else None

    def recordings(self, task: str) -> list[Recording]:
        """Every row of ``task``, ascending N."""
        with self._connect(write=False) as con:
            return _fetch(con, task, None)

    def set_status(self, task: str, index: int, status: str) -> bool:
        """Set N's status; returns False when N has no row."""
        _check_status(status)
        with self._connect(write=True) as con:
            cur = con.execute("UPDATE recordings SET status = ?, updated_at = ? WHERE task = ? AND episode_index = ?",
                              (status, time.time(), task, index))
            return cur.rowcount > 0

    def replace_files(self, task: str, index: int, files: Sequence[FileRecord]) -> bool:
        """Replace N's file list (after a rename or a meta-row repair); False when N has no row."""
        with self._connect(write=True) as con:
            cur = con.execute("UPDATE recordings SET total_bytes = ?, updated_at = ? WHERE task = ? AND episode_index = ?",
                              (sum(f.size for f in files), time.time(), task, index))
            if cur.rowcount == 0:
                return False
            con.execute("DELETE FROM recording_files WHERE task = ? AND episode_index = ?", (task, index))
            con.executemany("INSERT INTO recording_files VALUES (?, ?, ?, ?, ?)",
                            [(task, index, f.path, f.size, f.sha256) for f in files])
            return True

    def refresh_files(self, task_dir: str | Path, index: int, *, written: Iterable[str] = (),
                      gone: Iterable[str] = ()) -> bool:
        """Keep N's file list in step with a change of its files in ``task_dir`` (``egopool compress``, a row
        repair, an in-place ``egopool edit``): the task-relative paths ``gone`` are dropped, those ``written``
        hashed again (:func:`file_record`), every other entry kept as recorded. False when N has no row (nothing
        is added: an episode the registry never knew stays unknown).

        Raises
        ------
        RegistryError
            A written file cannot be hashed, or the database cannot be written.
        """
        key, root = task_key(task_dir), Path(task_dir)
        rec = self.get(key, index)
        if rec is None:
            return False
        fresh = sorted(set(written))
        drop = set(gone) | set(fresh)
        files = [f for f in rec.files if f.path not in drop] + [file_record(root, root / k) for k in fresh]
        return self.replace_files(key, index, sorted(files, key=lambda f: f.path))

    def rename_task(self, old: str, new: str) -> int:
        """Move every row of the task ``old`` (recordings and their files, the watermark, uploads, imports) to the
        name ``new`` (``egopool edit rename`` of a directory task), in one transaction; rows a task of the name
        ``new`` left behind (it was deleted or renamed away) are replaced, the watermark is the higher of the two.
        Returns the number of recordings moved (0: nothing to move, e.g. a re-run).

        Raises
        ------
        RegistryError
            The database cannot be written.
        """
        if old == new or not self.path.exists():
            return 0
        with self._connect(write=True) as con:
            moved = int(con.execute("SELECT COUNT(*) FROM recordings WHERE task = ?", (old,)).fetchone()[0])
            mark = con.execute("SELECT last_index FROM watermarks WHERE task = ?", (old,)).fetchone()
            con.execute("DELETE FROM recordings WHERE task = ? AND episode_index IN "
                        "(SELECT episode_index FROM recordings WHERE task = ?)", (new, old))
            con.execute("PRAGMA defer_foreign_keys = ON")  # the files follow their recording at the commit
            con.execute("UPDATE recordings SET task = ? WHERE task = ?", (new, old))
            con.execute("UPDATE recording_files SET task = ? WHERE task = ?", (new, old))
            con.execute("UPDATE OR REPLACE uploads SET task = ? WHERE task = ?", (new, old))
            if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'imports'").fetchone() is not None:
                con.execute("UPDATE OR REPLACE imports SET task = ? WHERE task = ?", (new, old))
            if mark is not None:
                _bump(con, new, int(mark[0]), time.time())
                con.execute("DELETE FROM watermarks WHERE task = ?", (old,))
        return moved

    def remove(self, task: str, index: int) -> bool:
        """Delete N's row (and its files); returns False when there was none. The watermark stays."""
        with self._connect(write=True) as con:
            cur = con.execute("DELETE FROM recordings WHERE task = ? AND episode_index = ?", (task, index))
            return cur.rowcount > 0

    # -- watermark -------------------------------------------------------------------------------
    def watermark(self, task: str) -> int:
        """Highest N ever recorded or deleted in ``task`` (0 when none)."""
        with self._connect(write=False) as con:
            row = con.execute("SELECT last_index FROM watermarks WHERE task = ?", (task,)).fetchone()
        return int(row[0]) if row else 0

    def bump_watermark(self, task: str, index: int) -> int:
        """Raise the watermark to at least ``index`` (never lowers it); returns the new value."""
        with self._connect(write=True) as con:
            return _bump(con, task, index, time.time())

    # -- uploads ---------------------------------------------------------------------------------
    def record_upload(self, record: UploadRecord) -> None:
        """Store a server's confirmed answer and mark N's recording ``uploaded`` (if it has a row)."""
        with self._connect(write=True) as con:
            con.execute("INSERT OR REPLACE INTO uploads VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (record.task, record.episode_index, record.server, record.episode_digest,
                         record.zip_sha256, record.server_task, record.server_episode_index,
                         json.dumps(record.answer, ensure_ascii=False, sort_keys=True), record.uploaded_at))
            con.execute("UPDATE recordings SET status = 'uploaded', updated_at = ? WHERE task = ? AND "
                        "episode_index = ? AND status = 'recorded'", (time.time(), record.task, record.episode_index))

    def upload(self, task: str, index: int, server: str) -> UploadRecord | None:
        """The recorded upload of N to ``server``, or None."""
        with self._connect(write=False) as con:
            row = con.execute("SELECT * FROM uploads WHERE task = ? AND episode_index = ? AND server = ?",
                              (task, index, server)).fetchone()
        return _upload(row) if row else None

    def uploads(self, task: str) -> list[UploadRecord]:
        """Every recorded upload of ``task`` (to any server), ascending N."""
        with self._connect(write=False) as con:
            rows = con.execute("SELECT * FROM uploads WHERE task = ? ORDER BY episode_index, server",
                               (task,)).fetchall()
        return [_upload(r) for r in rows]

    # -- imports (issue 16 E) --------------------------------------------------------------------
    def imported(self, task: str, source: str) -> list[int]:
        """N that an earlier import of ``source`` (a content digest, :func:`egopool.importers._common.source_digest`)
        wrote into ``task``, ascending; [] when none (or the table does not exist yet)."""
        with self._connect(write=False) as con:
            try:
                rows = con.execute("SELECT episode_index FROM imports WHERE task = ? AND source = ? "
                                   "ORDER BY episode_index", (task, source)).fetchall()
            except sqlite3.OperationalError:  # no imports table yet: nothing was imported with one
                return []
        return [int(r[0]) for r in rows]

    def has_imports(self, task: str) -> bool:
        """Whether any episode of ``task`` was recorded as imported (:meth:`record_import`)."""
        with self._connect(write=False) as con:
            try:
                return con.execute("SELECT 1 FROM imports WHERE task = ? LIMIT 1", (task,)).fetchone() is not None
            except sqlite3.OperationalError:  # no imports table yet
                return False

    def record_import(self, task: str, source: str, index: int, what: str) -> None:
        """Remember that N of ``task`` was imported from ``source`` (its content digest); ``what`` names it
        for people (the file). The table is created on first use (no schema version change)."""
        with self._connect(write=True) as con:
            con.execute(_IMPORTS_TABLE)
            con.execute("INSERT OR REPLACE INTO imports VALUES (?, ?, ?, ?, ?)", (task, source, index, what, time.time()))

    # -- identity --------------------------------------------------------------------------------
    def identity(self) -> ClientIdentity:
        """This recordings root's client identity (docs/decisions.md U11), created on first use.

        The key is :func:`~egopool.identity.derive_client_key` of the directory holding
        ``pipeline.db`` on this machine, kept in ``settings``. A stored key that is not the one
        derived here means the root (with its ``pipeline.db``) was copied or moved from another
        machine or path: the root gets the key of this machine and path, so two copies of one
        root upload as two clients, and :attr:`~egopool.identity.ClientIdentity.notice` says so
        in one line. A registry of an egopool before U11 (a ``host_id`` and no key) gets its key
        silently; its host id becomes the key's.

        Raises
        ------
        RegistryError
            ``pipeline.db`` cannot be read or written.
        """
        here = derive_client_key(self.path.parent)
        with self._connect(write=True) as con:
            stored = dict(con.execute("SELECT key, value FROM settings WHERE key IN ('client_key', 'host_id')"))
            notice = None
            old = stored.get("client_key")
            if old is not None and old != here:
                notice = (f"{self.path.parent}: this recordings root's {REGISTRY_NAME} was made on another machine or "
                          f"at another path (copied or moved here): it uploads as a new client, host id "
                          f"{host_id_of_key(here)[:8]} (was {host_id_of_key(old)[:8]}), and the server pools the "
                          "episodes of both copies")
            host = host_id_of_key(here)
            if old != here or stored.get("host_id") != host:
                con.executemany("INSERT OR REPLACE INTO settings VALUES (?, ?)",
                                [("client_key", here), ("host_id", host)])
        return ClientIdentity(here, host, socket.gethostname(), notice)

    def host_id(self) -> str:
        """The public host id of :meth:`identity` (32 hex)."""
        return self.identity().host_id


#: Which source (content digest) each imported episode came from, for refusing a second import of it.
_IMPORTS_TABLE = """CREATE TABLE IF NOT EXISTS imports (
    task          TEXT    NOT NULL,
    source        TEXT    NOT NULL,
    episode_index INTEGER NOT NULL,
    what          TEXT    NOT NULL,
    imported_at   REAL    NOT NULL,
    PRIMARY KEY (task, source, episode_index)
)"""


def _create_schema(con: sqlite3.Connection) -> None:
    # executescript() would COMMIT the open transaction first, so run the statements one by one.
    for stmt in _SCHEMA.split(";"):
        if stmt.strip():
            con.execute(stmt)
    con.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise RegistryError(f"unknown recording status {status!r}", hint=f"use one of {STATUSES}")


def _bump(con: sqlite3.Connection, task: str, index: int, now: float) -> int:
    con.execute("INSERT INTO watermarks VALUES (?, ?, ?) ON CONFLICT (task) DO UPDATE SET "
                "last_index = MAX(last_index, excluded.last_index), updated_at = excluded.updated_at",
                (task, int(index), now))
    return int(con.execute("SELECT last_index FROM watermarks WHERE task = ?", (task,)).fetchone()[0])


def _upload(row: Sequence[Any]) -> UploadRecord:
    task, n, server, digest, zsha, stask, sn, answer, at = row
    return UploadRecord(task, int(n), server, digest, zsha, stask, int(sn), json.loads(answer), float(at))


def _fetch(con: sqlite3.Connection, task: str, indices: Iterable[int] | None) -> list[Recording]:
    if indices is None:
        rows = con.execute("SELECT * FROM recordings WHERE task = ? ORDER BY episode_index", (task,)).fetchall()
    else:
        rows = [r for i in indices for r in con.execute(
            "SELECT * FROM recordings WHERE task = ? AND episode_index = ?", (task, i)).fetchall()]
    out = []
    for t, n, status, total, rec_at, upd in rows:
        files = tuple(FileRecord(p, int(s), h) for p, s, h in con.execute(
            "SELECT path, size, sha256 FROM recording_files WHERE task = ? AND episode_index = ? ORDER BY path",
            (t, n)).fetchall())
        out.append(Recording(t, int(n), status, int(total), float(rec_at), float(upd), files))
    return out


def record_episode(task_dir: str | Path, index: int, paths: Iterable[str | Path], *,
                   registry: Registry | None = None, status: str = "recorded",
                   recorded_at: float | None = None) -> Recording:
    """Hash an episode's files and record them (the writer calls this after ``finish``).

    Parameters
    ----------
    task_dir:
        The task directory; its name is the registry's task key.
    index:
        Global 1-based N.
    paths:
        The published files of the group (videos, data parquet, episodes row).
    registry:
        Defaults to :meth:`Registry.for_task`.

    Raises
    ------
    RegistryError
        A file cannot be hashed or the database cannot be written.
    """
    task_dir = Path(task_dir)
    reg = registry or Registry.for_task(task_dir)
    files = [file_record(task_dir, p) for p in paths]
    return reg.record(task_key(task_dir), index, files, status=status, recorded_at=recorded_at)
