"""Publishing verified episodes into a task of a :class:`~egopool.storage.Store` (docs/decisions.md U5, O11, O25).

One algorithm on a directory and on a bucket; for each episode, after its N was claimed (its journal
created, :func:`~egopool.publish.journal.claim`):

1. every object of the episode (videos, data parquet) is put under its final key with ``PutMode.CREATE``
   (a directory: temp file, fsync, link, directory fsync; a bucket: a PUT, multipart above 64 MiB,
   invisible until completed);
2. ``pause("placed")``;
3. the ``meta/episodes`` row is put with ``PutMode.CREATE``: **the commit point**, the only one.
   Every reader counts an episode from its row on, so the objects of step 1 without a row are never seen;
4. a new task's ``tasks.jsonl`` and ``info.json`` are created (a task exists for readers from
   ``info.json`` on, i.e. from its first committed episode);
5. ``pause("committed")``; the caller's ``record`` (the server's database) beside the
   ``info.json`` / ``stats.json`` compare-and-swap merge (:func:`~egopool.publish.task_meta.merge_meta`);
6. the journal is deleted.

Several episodes of one task go as a group (:func:`publish_group`, docs/decisions.md U18): each step is one
round for all of them (the puts of a round run in parallel threads, so a directory's fsyncs are committed
together), each episode keeping its own journal and its own commit. A failure before an episode's commit
deletes what it put and its journal, and rolls back every uncommitted episode of the group with a higher N
(no N left free below a published one, U2). After a kill, :func:`~egopool.publish.recover.recover` finishes
(row present) or undoes (row absent) a journal.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._atomic import fsync_file
from ..errors import EgopoolError, MetaUpdateError
from ..meta.digests import sha256_path
from ..meta.episodes import recorded_as, restamp_row_file
from ..meta.stats import StatsBlock
from ..storage import PutMode, Store
from .journal import claim, journal_key, remove
from .task_meta import create_task_meta, merge_meta

__all__ = ["Pause", "Publication", "Record", "claim_all", "finish", "publish_group", "stamp_digests"]

#: ``pause(stage)``: the crash tests' fault-injection seam (``placed``, ``committed``).
Pause = Callable[[str], None]
#: ``record([(episode, upload_fields), ...])``: the publisher's own bookkeeping of committed episodes, in one
#: transaction (the pooling server's ``server.db``); ``episode`` is the journal's ``episode`` document.
Record = Callable[[list[tuple[dict[str, Any], dict[str, Any]]]], None]

#: Threads of the parallel puts of one round (several groups into different tasks share them).
_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="egopool-publish")


@dataclass
class Publication:
    """One episode to publish; its N is claimed (its journal exists).

    Attributes
    ----------
    task:
        Task name (its objects are under ``<task>/``).
    index:
        N.
    objects:
        ``(local file, key)`` of the videos and the data parquet; keys relative to the store root. The files
        are consumed (moved into a directory store).
    row:
        ``(local row file, row key)``: the commit object.
    declarations:
        Merged into ``info.json`` (§6.7 union; ``total_episodes`` N).
    blocks:
        The episode's stats blocks (§4).
    episode, upload_fields:
        What ``record`` gets (None: nothing to record).
    new_info, tasks_jsonl:
        ``info.json`` and ``tasks.jsonl`` of a task that does not exist yet.
    sha:
        Key -> sha256 of each object (a bucket records it with the object).
    synced:
        Local files already fsynced by the caller (a directory store does not sync them again).
    stamped:
        :func:`stamp_digests` has stamped the row file already (its staged files unchanged since): a second call
        does not read and hash the row again.
    """

    task: str
    index: int
    objects: list[tuple[Path, str]]
    row: tuple[Path, str]
    declarations: dict[str, Any]
    blocks: dict[str, StatsBlock] | None
    episode: dict[str, Any] | None = None
    upload_fields: dict[str, Any] = field(default_factory=dict)
    new_info: dict[str, Any] | None = None
    tasks_jsonl: bytes | None = None
    sha: dict[str, str] = field(default_factory=dict)
    synced: frozenset[Path] = frozenset()
    stamped: bool = False

    @property
    def journal(self) -> str:
        """The journal / claim key."""
        return journal_key(self.task, self.index)


@dataclass
class _Slot:
    pub: Publication
    placed: list[str] = field(default_factory=list)
    error: BaseException | None = None
    committed: bool = False


def _put(store: Store, path: Path, key: str, sha: str | None, synced: bool = False) -> None:
    store.put_file(key, path, mode=PutMode.CREATE, sha256=sha, move=True, synced=synced)


def stamp_digests(pub: Publication) -> None:
    """Record the sha256 of every object of ``pub`` in its row file (docs/decisions.md X3): the commit object then
    carries them, committed atomically with the episode. Objects without a known sha256 are hashed; ``pub.sha``
    gets the row's new sha256. A publication without objects (a roll-forward) is left as is, and one stamped
    before (``pub.stamped``: the server stamps under its guard, then publishes the group) is not read again.

    Raises
    ------
    OSError, FormatError
        A staged file cannot be read, or the row file is not a single-row episodes parquet.
    """
    if not pub.objects or pub.stamped:
        return
    prefix = pub.task + "/"
    files = {}
    for path, key in pub.objects:
        sha = pub.sha.get(key) or sha256_path(path)
        pub.sha[key] = sha
        files[key[len(prefix):] if key.startswith(prefix) else key] = sha
    if not recorded_as(pub.row[0], pub.index, files):
        restamp_row_file(pub.row[0], files)  # temp + fsync + rename: the new row file is durable already
        pub.synced = pub.synced | {pub.row[0]}  # so the commit's put does not fsync it a second time
        pub.sha.pop(pub.row[1], None)
    if pub.row[1] not in pub.sha:
        pub.sha[pub.row[1]] = sha256_path(pub.row[0])
    pub.stamped = True


def _settle(futures: Sequence[Future[Any]]) -> None:
    for f in futures:
        f.exception()


def _undo(store: Store, slot: _Slot) -> None:
    """Delete what an uncommitted publish put, then its journal (a store that fails here: the journal stays,
    and the next import into the task or the start-up sweep undoes it)."""
    with contextlib.suppress(EgopoolError, OSError):
        if not store.exists(slot.pub.row[1]):
            remove(store, slot.placed)
            remove(store, [slot.pub.journal])


def claim_all(store: Store, claims: Sequence[tuple[str, int, Mapping[str, Any]]]) -> list[bool]:
    """:func:`~egopool.publish.journal.claim` of several ``(task, N, journal document)`` at once (one round of
    puts: a directory's fsyncs commit together); True for each claim won.

    Raises
    ------
    StorageError
        The store failed (the first failure, after every claim has finished).
    """
    futures = [_POOL.submit(claim, store, task, n, doc) for task, n, doc in claims]
    _settle(futures)
    for f in futures:
        exc = f.exception()
        if exc is not None:
            raise exc
    return [bool(f.result()) for f in futures]


def publish_group(store: Store, pubs: list[Publication], pause: Pause, record: Record | None = None,
                  ) -> list[str | None | BaseException]:
    """Publish claimed episodes of one task together (module docstring). The episodes' N are distinct; at most
    one creates the task (then it is the only one).

    Returns
    -------
    list
        Per publication, in order: None, or the ``MetaUpdateError`` message (the episode stands and its journal
        is kept: the next import into the task or start-up replays the merge), or the exception that stopped
        it (before its commit, what it put and its journal are deleted; after it, a fault of ``record``: the
        journal is kept and recovery records it).
    """
    slots = [_Slot(p) for p in pubs]

    def live() -> list[_Slot]:
        return [s for s in slots if s.error is None]

    def fail(slot: _Slot, exc: BaseException) -> None:
        for s in live():
            if s is slot or (not s.committed and s.pub.index > slot.pub.index):
                s.error = exc
                if not s.committed:
                    _undo(store, s)

    for s in slots:
        try:
            stamp_digests(s.pub)
        except Exception as bad:  # an unreadable staged file: it fails (with any higher N) before anything is put
            fail(s, bad)
    try:
        puts = {id(s): [(_POOL.submit(_put, store, path, key, s.pub.sha.get(key), path in s.pub.synced), key)
                        for path, key in s.pub.objects] for s in live()}
        local = store.local_path(slots[0].pub.row[1]) is not None if slots else False
        rows = [_POOL.submit(fsync_file, s.pub.row[0]) for s in live()  # the commits' bytes too (a row restamped
                if s.pub.row[0] not in s.pub.synced] if local else []       # with its checksums is durable already)
        _settle([f for fs in puts.values() for f, _ in fs] + rows)
        if any(f.exception() is not None for f in rows):
            local = False  # synced again by the commit's own put
        for s in live():
            s.placed = [key for f, key in puts.get(id(s), []) if f.exception() is None]
        for s in slots:
            exc = next((f.exception() for f, _ in puts.get(id(s), []) if f.exception() is not None), None)
            if exc is not None and s.error is None:
                fail(s, exc)
        if live():
            pause("placed")
        for s in sorted(live(), key=lambda s: s.pub.index):
            if s.error is not None:  # failed by a lower N's failure in this loop
                continue
            try:
                store.put_file(s.pub.row[1], s.pub.row[0], mode=PutMode.CREATE, sha256=s.pub.sha.get(s.pub.row[1]),
                               move=True, synced=local)  # this episode's commit point
                s.committed = True
            except Exception as exc:
                fail(s, exc)
    except BaseException as exc:  # KeyboardInterrupt and the like: nothing uncommitted stays placed
        for s in live():
            if not s.committed:
                fail(s, exc)
        raise
    done = live()
    if not done:
        return [s.error for s in slots]
    problem = _finish(store, [s.pub for s in done], pause, record)
    if isinstance(problem, BaseException):
        for s in done:
            s.error = problem
    return [s.error if s.error is not None else problem for s in slots]


def _finish(store: Store, pubs: Sequence[Publication], pause: Pause,
            record: Record | None) -> str | None | BaseException:
    """Steps 4-6 for committed publications of one task (also the roll-forward of journals whose row exists):
    None, the merge's message (journals kept), or ``record``'s exception (journals kept)."""
    first = pubs[0]
    for p in pubs:
        create_task_meta(store, p.task, p.new_info, p.tasks_jsonl)
    pause("committed")
    rows = [(p.episode, dict(p.upload_fields)) for p in pubs if p.episode is not None]
    recorded = _POOL.submit(record, rows) if record is not None and rows else None  # its commit beside the merge
    problem = None
    try:
        merge_meta(store, first.task, [(p.index, p.declarations, p.blocks) for p in pubs])
    except MetaUpdateError as exc:
        problem = exc.one_line()
    finally:
        if recorded is not None:
            recorded.exception()
    db_error = recorded.exception() if recorded is not None else None
    if db_error is not None:
        return db_error
    if problem is None:
        remove(store, [p.journal for p in pubs])
    return problem


def finish(store: Store, pubs: Sequence[Publication], pause: Pause, record: Record | None = None) -> str | None:
    """Steps 4-6 for committed publications of one task (the roll-forward of a killed publish).

    Returns
    -------
    str or None
        The merge's message when ``info.json`` / ``stats.json`` could not be merged (the journals stay).

    Raises
    ------
    Exception
        ``record`` failed (the journals stay).
    """
    out = _finish(store, pubs, pause, record)
    if isinstance(out, BaseException):
        raise out
    return out


def declarations_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The declarations a journal holds (an empty dict when it has none)."""
    d = doc.get("declarations")
    return dict(d) if isinstance(d, dict) else {}
