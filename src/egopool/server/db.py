"""The server's bookkeeping ``server.db`` (SQLite): every upload and every pooled episode.

* ``uploads``: one row per upload request: when, which token, the client's address, host
  id and host name, task, the form's ``episode_index`` (f), the client's N, the server's N,
  bytes, the sha256 of the received zip, the outcome (``receiving`` while it runs, then
  ``imported`` / ``duplicate`` / ``rejected`` / ``failed`` / ``interrupted``), the HTTP
  status and the reason;
* ``episodes``: one row per episode the server holds: ``(task, server N)`` with the
  ``(client host id, client N)`` it came from (the host id the server derived from the
  client's key, docs/decisions.md U11; not unique: two copies of one recordings root both
  pool their N), the episode digest (an episode's identity: the same content is pooled once,
  U2), the upload that brought it, its length, streams and the validator's verdict on the
  uploaded slice.

* ``previews`` (schema 3): per episode, the state of its browser previews (``pending`` /
  ``ready`` / ``failed``), the error of the last failed build, attempts, and the preview
  manifest (streams, files; :mod:`egopool.server.previews`);
* ``quality`` (schema 3): per episode, its quality facts (:mod:`egopool.curation.quality`): the
  filterable ones as columns (:data:`QUALITY_COLUMNS`), all of them as JSON;
* ``reviews`` (schema 4): every verdict a reviewer gave (accept / reject / flag, a reason, the token,
  when), never overwritten; ``review_state``: the latest verdict per episode, written in the
  same transaction (what the pages show and the search filters on, docs/decisions.md Q11).

Schema versions (``PRAGMA user_version``): 1 had ``UNIQUE (task, client_host_id,
client_episode_index)``; 2 drops it (the table is rebuilt, every row kept) and indexes the
digest; 3 adds ``previews`` and ``quality``; 4 adds ``reviews``, ``review_state`` and the covering
indexes ``quality_totals`` and ``uploads_task`` (created by the schema script: every row of an older file is kept); 5 adds
``uploads``' stage timings (``receive_s``, ``queue_s``, ``verify_s``, ``publish_s``, ``verify_attempts``); 6 adds
``events`` (reviewers' labelled time ranges, :mod:`egopool.server.events`). An older file is migrated when the
server opens it.

Each thread keeps its own connection (WAL journal, 30 s busy timeout), so threads of the
server share the file safely. The episode mapping is committed with ``synchronous=FULL`` (it
survives power loss); the upload log's bookkeeping rows with ``NORMAL`` (no fsync of their
own: they survive a killed process, and the next FULL commit syncs them too). SQLite errors
become :class:`~egopool.errors.RegistryError` naming ``server.db``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import RegistryError
from .db_rows import UPLOAD_FIELDS as _UPLOAD_FIELDS
from .db_rows import UNDO, VERDICTS, EpisodeRow, PreviewRow, ReviewRow, UploadRow
from .db_reviews import ReviewConflict, append_review as _append_review, in_force as _in_force

__all__ = ["QUALITY_COLUMNS", "UNDO", "VERDICTS", "EpisodeRow", "PreviewRow", "ReviewConflict", "ReviewRow", "ServerDB",
           "UploadRow"]

_SCHEMA_VERSION = 6
#: verdict -> the review state it leaves (docs/decisions.md Q10).
#: Quality facts stored as columns of ``quality`` (filterable in SQL); every fact is in its ``facts`` JSON.
QUALITY_COLUMNS = ("duration_s", "rows", "size_bytes", "idle_fraction", "idle_frames", "gap_total", "drop_total",
                   "validation_errors", "validation_warnings", "blur_outliers", "exposure_outliers")
_CURATION_TABLES = """
CREATE TABLE IF NOT EXISTS previews (
    task          TEXT    NOT NULL,
    episode_index INTEGER NOT NULL,
    state         TEXT    NOT NULL,
    error         TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    updated_at    REAL    NOT NULL,
    manifest      TEXT,
    PRIMARY KEY (task, episode_index)
);
CREATE INDEX IF NOT EXISTS previews_state ON previews (state);
CREATE TABLE IF NOT EXISTS quality (
    task                TEXT    NOT NULL,
    episode_index       INTEGER NOT NULL,
    duration_s          REAL,
    rows                INTEGER,
    size_bytes          INTEGER,
    idle_fraction       REAL,
    idle_frames         INTEGER,
    gap_total           INTEGER,
    drop_total          INTEGER,
    validation_errors   INTEGER,
    validation_warnings INTEGER,
    blur_outliers       INTEGER,
    exposure_outliers   INTEGER,
    updated_at          REAL    NOT NULL,
    facts               TEXT    NOT NULL,
    PRIMARY KEY (task, episode_index)
);
CREATE INDEX IF NOT EXISTS quality_duration ON quality (task, duration_s)
"""
_EPISODES_TABLE = """
CREATE TABLE IF NOT EXISTS episodes (
    task                 TEXT    NOT NULL,
    episode_index        INTEGER NOT NULL,
    client_host_id       TEXT    NOT NULL,
    client_hostname      TEXT    NOT NULL,
    client_episode_index INTEGER NOT NULL,
    episode_digest       TEXT    NOT NULL,
    upload_id            INTEGER NOT NULL,
    token_id             TEXT,
    imported_at          REAL    NOT NULL,
    length               INTEGER NOT NULL,
    streams              TEXT    NOT NULL,
    validation           TEXT    NOT NULL,
    PRIMARY KEY (task, episode_index)
)
"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS uploads (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    received_at          REAL    NOT NULL,
    finished_at          REAL,
    token_id             TEXT,
    client_addr          TEXT,
    task                 TEXT,
    form_episode_index   INTEGER,
    client_host_id       TEXT,
    client_hostname      TEXT,
    client_episode_index INTEGER,
    server_episode_index INTEGER,
    bytes                INTEGER,
    zip_sha256           TEXT,
    outcome              TEXT    NOT NULL,
    status               INTEGER,
    reason               TEXT,
    message              TEXT,
    receive_s            REAL,
    queue_s              REAL,
    verify_s             REAL,
    publish_s            REAL,
    verify_attempts      INTEGER
);
""" + _EPISODES_TABLE + """;
CREATE INDEX IF NOT EXISTS uploads_received ON uploads (received_at);
CREATE INDEX IF NOT EXISTS episodes_digest ON episodes (task, episode_digest);
CREATE TABLE IF NOT EXISTS reviews (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    task                 TEXT    NOT NULL,
    episode_index        INTEGER NOT NULL,
    verdict              TEXT    NOT NULL,
    reason               TEXT    NOT NULL,
    token_id             TEXT,
    at                   REAL    NOT NULL
);
CREATE INDEX IF NOT EXISTS reviews_episode ON reviews (task, episode_index, id);
CREATE TABLE IF NOT EXISTS review_state (
    task                 TEXT    NOT NULL,
    episode_index        INTEGER NOT NULL,
    review_id            INTEGER NOT NULL,
    verdict              TEXT    NOT NULL,
    PRIMARY KEY (task, episode_index)
);
CREATE INDEX IF NOT EXISTS review_state_verdict ON review_state (verdict, task, episode_index);
""" + _CURATION_TABLES + """;
CREATE INDEX IF NOT EXISTS quality_totals ON quality (task, duration_s, size_bytes);
CREATE INDEX IF NOT EXISTS uploads_task ON uploads (task, outcome, finished_at);
CREATE TABLE IF NOT EXISTS events (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    task                 TEXT    NOT NULL,
    episode_index        INTEGER NOT NULL,
    t0                   REAL    NOT NULL,
    t1                   REAL    NOT NULL,
    label                TEXT    NOT NULL,
    note                 TEXT    NOT NULL,
    token_id             TEXT,
    updated_by           TEXT,
    created_at           REAL    NOT NULL,
    updated_at           REAL    NOT NULL,
    version              INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS events_episode ON events (task, episode_index, t0);
CREATE INDEX IF NOT EXISTS events_label ON events (label, task, episode_index)
"""


def _episodes_keyed_by_content(con: sqlite3.Connection) -> None:
    """1 -> 2: rebuild ``episodes`` without the (task, host id, client N) uniqueness (SQLite cannot drop a
    constraint in place); every row is kept, in a transaction with the version bump."""
    con.execute("ALTER TABLE episodes RENAME TO episodes_v1")
    con.execute(_EPISODES_TABLE)
    con.execute("INSERT INTO episodes SELECT * FROM episodes_v1")
    con.execute("DROP TABLE episodes_v1")


#: Columns schema 5 adds to ``uploads``: where an upload's time went (docs/decisions.md U30).
_TIMING_COLUMNS = ("receive_s REAL", "queue_s REAL", "verify_s REAL", "publish_s REAL", "verify_attempts INTEGER")


def _upload_timings(con: sqlite3.Connection) -> None:
    """4 -> 5: ``uploads`` gets the seconds of each stage (null for the rows before); a column it has is kept."""
    have = {row[1] for row in con.execute("PRAGMA table_info(uploads)")}
    for col in _TIMING_COLUMNS:
        if col.split()[0] not in have:
            con.execute(f"ALTER TABLE uploads ADD COLUMN {col}")


def _tables_only(con: sqlite3.Connection) -> None:
    """3 -> 4: ``reviews`` and ``review_state``; 5 -> 6: ``events``; created by the schema script (``IF NOT EXISTS``)."""


def _curation_tables(con: sqlite3.Connection) -> None:
    """2 -> 3: add ``previews`` and ``quality`` (empty; the server fills them in the background)."""
    for stmt in _CURATION_TABLES.split(";"):
        if stmt.strip():
            con.execute(stmt)


#: version -> the step that brings a file of that version to the next one.
_MIGRATIONS = {1: _episodes_keyed_by_content, 2: _curation_tables, 3: _tables_only, 4: _upload_timings,
               5: _tables_only}


class ServerDB:
    """Handle on ``server.db``; the file and tables are created on first use.

    Raises
    ------
    RegistryError
        From every method when SQLite fails.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        with self._connect() as con:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise RegistryError(f"server.db schema version {version} is newer than this egopool understands",
                                    path=self.path, hint="upgrade egopool")
            if version:  # an existing file: bring it up to date, every row kept
                for step in range(version, _SCHEMA_VERSION):
                    _MIGRATIONS[step](con)
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    con.execute(stmt)
            con.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (kept open: closing the last one checkpoints the WAL every time)."""
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            try:
                con = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
                con.execute("PRAGMA journal_mode = WAL")
                con.execute("PRAGMA synchronous = FULL")  # a committed mapping survives power loss
            except sqlite3.Error as exc:
                raise RegistryError(f"cannot open the server database: {exc}", path=self.path) from exc
            self._local.con, self._local.durable = con, True
        return con

    @contextlib.contextmanager
    def _connect(self, write: bool = True, durable: bool = True) -> Iterator[sqlite3.Connection]:
        con = self._connection()
        try:
            if write and self._local.durable != durable:  # FULL: fsync at commit; NORMAL: at checkpoint
                con.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
                self._local.durable = durable
            con.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield con
            con.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise RegistryError(f"server database operation failed: {exc}", path=self.path) from exc
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise

    # -- uploads -------------------------------------------------------------------------------------
    def start_upload(self, token_id: str | None, client_addr: str | None) -> int:
        """A new ``receiving`` upload row; returns its id."""
        with self._connect(durable=False) as con:
            cur = con.execute("INSERT INTO uploads (received_at, token_id, client_addr, outcome) VALUES (?, ?, ?, ?)",
                              (time.time(), token_id, client_addr, "receiving"))
            return int(cur.lastrowid or 0)

    def update_upload(self, upload_id: int, **fields: Any) -> None:
        """Set fields of an upload row (names of :class:`UploadRow`)."""
        unknown = set(fields) - set(_UPLOAD_FIELDS)
        if unknown:
            raise ValueError(f"unknown upload fields {sorted(unknown)}")
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._connect(durable=False) as con:
            con.execute(f"UPDATE uploads SET {cols} WHERE id = ?", (*fields.values(), upload_id))

    def finish_upload(self, upload_id: int, outcome: str, status: int, reason: str | None = None,
                      message: str | None = None, **fields: Any) -> None:
        """Record how an upload ended."""
        self.update_upload(upload_id, outcome=outcome, status=status, reason=reason, message=message,
                           finished_at=time.time(), **fields)

    def interrupt_unfinished(self) -> int:
        """Mark uploads left ``receiving`` by a killed server as ``interrupted``; returns how many."""
        with self._connect() as con:
            cur = con.execute("UPDATE uploads SET outcome = 'interrupted', finished_at = ? WHERE outcome = 'receiving'",
                              (time.time(),))
            return cur.rowcount

    def uploads(self, limit: int = 50, task: str | None = None) -> list[UploadRow]:
        """The latest uploads, newest first."""
        q = f"SELECT {', '.join(_UPLOAD_FIELDS)} FROM uploads"
        args: tuple[Any, ...] = ()
        if task is not None:
            q += " WHERE task = ?"
            args = (task,)
        with self._connect(write=False) as con:
            rows = con.execute(q + " ORDER BY id DESC LIMIT ?", (*args, int(limit))).fetchall()
        return [UploadRow(*r) for r in rows]

    # -- episodes ------------------------------------------------------------------------------------
    def add_episode(self, row: EpisodeRow, upload_fields: Mapping[str, Any] | None = None) -> None:
        """Insert a pooled episode (idempotent: an identical row already there is kept) and, in the
        same transaction, mark its upload ``imported``."""
        self.add_episodes_imported([(row, upload_fields)])

    def add_episodes_imported(self, rows: list[tuple[EpisodeRow, Mapping[str, Any] | None]]) -> None:
        """:meth:`add_episode` of several ``(row, upload_fields)`` in ONE transaction (one fsync: the
        group commit of the publishes into a task, docs/decisions.md U18)."""
        with self._connect() as con:
            for row, upload_fields in rows:
                con.execute("INSERT OR IGNORE INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (row.task, row.episode_index, row.client_host_id, row.client_hostname,
                             row.client_episode_index, row.episode_digest, row.upload_id, row.token_id,
                             row.imported_at, row.length, json.dumps(row.streams), json.dumps(row.validation)))
                if upload_fields:
                    cols = ", ".join(f"{k} = ?" for k in upload_fields)
                    con.execute(f"UPDATE uploads SET {cols} WHERE id = ?", (*upload_fields.values(), row.upload_id))

    def add_episodes(self, rows: list[EpisodeRow]) -> None:
        """Insert many pooled episodes in one transaction (``INSERT OR IGNORE`` like :meth:`add_episode`;
        no upload row is touched): a catalog rebuilt from task directories, and the page benchmark."""
        with self._connect() as con:
            con.executemany("INSERT OR IGNORE INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [(r.task, r.episode_index, r.client_host_id, r.client_hostname, r.client_episode_index,
                              r.episode_digest, r.upload_id, r.token_id, r.imported_at, r.length,
                              json.dumps(r.streams), json.dumps(r.validation)) for r in rows])

    def episodes_with_digest(self, task: str, digest: str) -> list[EpisodeRow]:
        """The episodes of ``task`` whose content is ``digest`` (ascending server N; one, unless the
        store predates U11)."""
        with self._connect(write=False) as con:
            rows = con.execute("SELECT * FROM episodes WHERE task = ? AND episode_digest = ? ORDER BY episode_index",
                               (task, digest)).fetchall()
        return [_episode(r) for r in rows]

    def episode(self, task: str, index: int) -> EpisodeRow | None:
        """Server N of ``task``, or None."""
        with self._connect(write=False) as con:
            r = con.execute("SELECT * FROM episodes WHERE task = ? AND episode_index = ?", (task, index)).fetchone()
        return _episode(r) if r else None

    def episodes(self, task: str) -> dict[int, EpisodeRow]:
        """Every pooled episode of ``task`` by server N."""
        with self._connect(write=False) as con:
            rows = con.execute("SELECT * FROM episodes WHERE task = ? ORDER BY episode_index", (task,)).fetchall()
        return {int(r[1]): _episode(r) for r in rows}

    def add_review(self, task: str, index: int, verdict: str, reason: str, token_id: str | None, *,
                   version: int | None = None) -> tuple[ReviewRow, ReviewRow | None]:
        """Record a verdict on episode ``index`` of ``task``; return it and the verdict now in force.

        ``version`` is the review version the verdict answers (:meth:`review_version` when the
        reviewer looked; None records unconditionally, for seeding and tests). ``undo`` takes back
        the last verdict still in force (the one before it, or none, is then the episode's state);
        the row is appended like any other (docs/decisions.md Q11, P1, P2).

        Raises
        ------
        ValueError
            ``verdict`` is not one of :data:`VERDICTS` or ``undo`` (the caller checked the request first).
        ReviewConflict
            ``version`` is not the episode's review version (another verdict came first: a second tab,
            a repeated request), or an ``undo`` with no verdict in force. Nothing is recorded.
        """
        if verdict not in VERDICTS and verdict != UNDO:
            raise ValueError(f"unknown verdict {verdict!r}")
        with self._connect() as con:
            return _append_review(con, task, index, verdict, reason, token_id, version, time.time())

    def add_reviews(self, task: str, items: Sequence[tuple[int, int]], verdict: str, reason: str,
                    token_id: str | None, *, all_or_none: bool = False
                    ) -> tuple[list[ReviewRow], list[tuple[int, int, ReviewConflict]], list[int]]:
        """Record one verdict on many episodes of ``task`` in one transaction (bulk review, docs/decisions.md P20).

        ``items``: ``(N, version)`` pairs, each N once, the version the reviewer saw (as :meth:`add_review`).
        Returns the rows recorded, the stale items ``(N, version sent, conflict)`` and the N that have no
        ``episodes`` row; stale and unknown items record nothing. With ``all_or_none`` one stale or unknown
        item records nothing at all (the lists still say which).

        Raises
        ------
        ValueError
            ``verdict`` is not one of :data:`VERDICTS` (no bulk undo) or an N repeats.
        """
        if verdict not in VERDICTS:
            raise ValueError(f"unknown bulk verdict {verdict!r}")
        if len({n for n, _ in items}) != len(items):
            raise ValueError("an episode is named twice in one bulk review")
        at = time.time()
        done: list[ReviewRow] = []
        stale: list[tuple[int, int, ReviewConflict]] = []
        unknown: list[int] = []
        with self._connect() as con:
            con.execute("SAVEPOINT bulk")
            for n, version in items:
                if con.execute("SELECT 1 FROM episodes WHERE task = ? AND episode_index = ?", (task, n)).fetchone() \
                        is None:
                    unknown.append(n)
                    continue
                try:
                    done.append(_append_review(con, task, n, verdict, reason, token_id, version, at)[0])
                except ReviewConflict as exc:
                    stale.append((n, version, exc))
            if all_or_none and (stale or unknown):
                con.execute("ROLLBACK TO bulk")
                done = []
            con.execute("RELEASE bulk")
        return done, stale, unknown

    def review_version(self, task: str, index: int) -> int:
        """The id of the last review row of ``(task, N)`` (any verdict or undo), 0 when none: what a new
        verdict must answer (docs/decisions.md P1)."""
        with self._connect(write=False) as con:
            r = con.execute("SELECT MAX(id) FROM reviews WHERE task = ? AND episode_index = ?",
                            (task, index)).fetchone()
        return int(r[0] or 0)

    def current_review(self, task: str, index: int) -> ReviewRow | None:
        """The verdict in force on ``(task, N)`` (undos applied), None when unreviewed."""
        stack = _in_force(self.reviews(task, index))
        return stack[-1] if stack else None

    def reviews(self, task: str, index: int) -> list[ReviewRow]:
        """Every verdict on episode ``index`` of ``task``, oldest first."""
        with self._connect(write=False) as con:
            rows = con.execute("SELECT id, task, episode_index, verdict, reason, token_id, at FROM reviews "
                               "WHERE task = ? AND episode_index = ? ORDER BY id", (task, index)).fetchall()
        return [ReviewRow(int(r[0]), r[1], int(r[2]), r[3], r[4], r[5], float(r[6])) for r in rows]

    @contextlib.contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One durable write transaction (``BEGIN IMMEDIATE``, committed with ``synchronous=FULL``) for a
        table kept by another module (:mod:`egopool.server.events`); SQLite errors become RegistryError."""
        with self._connect() as con:
            yield con

    def select(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of one read-only query (the search and the page summaries build theirs)."""
        with self._connect(write=False) as con:
            return con.execute(sql, args).fetchall()

    def max_index(self, task: str) -> int:
        """Highest server N recorded for ``task`` (0 when none)."""
        with self._connect(write=False) as con:
            r = con.execute("SELECT MAX(episode_index) FROM episodes WHERE task = ?", (task,)).fetchone()
        return int(r[0] or 0)


    # -- previews and quality facts (schema 3) ------------------------------------------------------
    def set_preview(self, task: str, index: int, state: str, *, error: str | None = None,
                    manifest: Mapping[str, Any] | None = None, attempts: int | None = None) -> None:
        """Record the preview state of ``(task, N)`` (insert or replace). ``manifest`` None keeps the
        last one; ``attempts`` None keeps the count (0 for a new row)."""
        with self._connect(durable=False) as con:
            old = con.execute("SELECT attempts, manifest FROM previews WHERE task = ? AND episode_index = ?",
                              (task, index)).fetchone()
            n = attempts if attempts is not None else (int(old[0]) if old else 0)
            man = json.dumps(manifest) if manifest is not None else (old[1] if old else None)
            con.execute("INSERT OR REPLACE INTO previews VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (task, index, state, error, n, time.time(), man))

    def preview(self, task: str, index: int) -> PreviewRow | None:
        """The preview row of ``(task, N)``, or None."""
        with self._connect(write=False) as con:
            r = con.execute("SELECT * FROM previews WHERE task = ? AND episode_index = ?", (task, index)).fetchone()
        return _preview(r) if r else None

    def previews(self, task: str | None = None, state: str | None = None) -> list[PreviewRow]:
        """Preview rows, by task and N; only ``task`` / ``state`` when given."""
        q, args = "SELECT * FROM previews WHERE 1 = 1", list[str]()
        if task is not None:
            q, args = q + " AND task = ?", [*args, task]
        if state is not None:
            q, args = q + " AND state = ?", [*args, state]
        with self._connect(write=False) as con:
            rows = con.execute(q + " ORDER BY task, episode_index", args).fetchall()
        return [_preview(r) for r in rows]

    def set_quality(self, task: str, index: int, facts: Mapping[str, Any]) -> None:
        """Store the quality facts of ``(task, N)`` (replacing earlier ones)."""
        cols = [facts.get(c) for c in QUALITY_COLUMNS]
        with self._connect(durable=False) as con:
            con.execute(f"INSERT OR REPLACE INTO quality (task, episode_index, {', '.join(QUALITY_COLUMNS)}, "
                        f"updated_at, facts) VALUES ({', '.join('?' * (len(QUALITY_COLUMNS) + 4))})",
                        (task, index, *cols, time.time(), json.dumps(facts)))

    def quality(self, task: str, index: int) -> dict[str, Any] | None:
        """The quality facts of ``(task, N)``, or None before they were computed."""
        with self._connect(write=False) as con:
            r = con.execute("SELECT facts FROM quality WHERE task = ? AND episode_index = ?", (task, index)).fetchone()
        return json.loads(r[0]) if r else None

    def quality_facts(self, task: str | None = None, filters: Mapping[str, tuple[str, Any]] | None = None, *,
                      after: tuple[str, int] | None = None, limit: int = 1000) -> list[tuple[str, int, dict[str, Any]]]:
        """Episodes whose stored quality facts pass ``filters``, ascending ``(task, N)``: keyset paging.

        Parameters
        ----------
        task:
            Only this task (None: every task).
        filters:
            ``{fact: (op, value)}`` over :data:`QUALITY_COLUMNS`, ``op`` one of ``< <= > >= = !=``,
            e.g. ``{"duration_s": (">=", 5.0), "idle_fraction": ("<", 0.2), "blur_outliers": ("=", 0)}``.
            A fact that is NULL (not computed) never passes.
        after:
            ``(task, N)`` of the last row of the previous page (None: from the start).
        limit:
            Rows at most.

        Returns
        -------
        list of (task, N, facts)

        Raises
        ------
        ValueError
            An unknown fact or operator.
        """
        where: list[str] = ["1 = 1"]
        args: list[Any] = []  # SQL parameters: task names, fact values, N
        if task is not None:
            where.append("task = ?")
            args.append(task)
        for fact, (op, value) in (filters or {}).items():
            if fact not in QUALITY_COLUMNS or op not in _FILTER_OPS:
                raise ValueError(f"cannot filter on {fact!r} {op!r}: facts are {QUALITY_COLUMNS}, "
                                 f"ops {sorted(_FILTER_OPS)}")
            where.append(f"{fact} {_FILTER_OPS[op]} ?")
            args.append(value)
        if after is not None:
            where.append("(task, episode_index) > (?, ?)")
            args += [after[0], int(after[1])]
        with self._connect(write=False) as con:
            rows = con.execute(f"SELECT task, episode_index, facts FROM quality WHERE {' AND '.join(where)} "
                               "ORDER BY task, episode_index LIMIT ?", (*args, int(limit))).fetchall()
        return [(r[0], int(r[1]), json.loads(r[2])) for r in rows]

def _episode(r: tuple[Any, ...]) -> EpisodeRow:
    return EpisodeRow(r[0], int(r[1]), r[2], r[3], int(r[4]), r[5], int(r[6]), r[7], float(r[8]), int(r[9]),
                      json.loads(r[10]), json.loads(r[11]))


def _preview(r: tuple[Any, ...]) -> PreviewRow:
    return PreviewRow(r[0], int(r[1]), r[2], r[3], int(r[4]), float(r[5]), json.loads(r[6]) if r[6] else None)


_FILTER_OPS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "=": "=", "==": "=", "!=": "!="}

