"""Placing a verified episode into a server task, journaled so a crash leaves the store as before.

One publish, inside the task's import guard and task lock (DESIGN §5, docs/decisions.md U5):

1. write the journal ``.egopool-server/journals/import-<task hash>-<token>.json``
   (every final path, the commit object's path, the mapping row to record);
2. a new task gets its ``info.json`` and ``tasks.jsonl`` (readers do not see the task yet:
   :meth:`~egopool.server.store.Store.tasks`);
3. rename the staged videos and data parquet to their final names, write N's pending
   declarations (``meta/.pending-<N>.json``, :mod:`egopool.write.recovery`);
4. rename the ``meta/episodes`` row into place: **the commit point**. The row is the
   episode's commit record (decisions.md #5) and the one commit object: every reader lists
   an episode from its row on (:func:`egopool.layout.list_task_episodes` with
   ``committed_only``), and recovery keeps exactly the episodes whose row exists, so no
   reader ever sees an episode that is later rolled back;
5. record the episode and the upload outcome in ``server.db`` (one transaction);
6. merge ``info.json`` / ``stats.json`` with :func:`egopool.write.task_meta.merge_task_meta`,
   the code the local writer uses; clear the pending file; unlink the journal.

Publishes that waited for one task's guard go together (:func:`publish_group`, docs/decisions.md U18):
each step is one round for all of them, each episode keeping its own journal and its own commit (step 4).

Nothing but step 4 decides: the journal is never rewritten. On object storage (no rename)
the same order holds: every object of the episode is written under its final key, the row
object last; a row's existence is the commit there too.

A failure before 4 removes what was placed (a new task directory entirely), so the task's
files are as before the request. :func:`recover_journals` runs at start-up and before every
import into a task: a journal whose row is not in place is rolled back the same way (a
SIGKILLed server), one whose row is in place rolled forward (database row, then the pending
merge is replayed by :func:`egopool.write.recovery.reclaim_stale`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_bytes, atomic_write_json, fsync_dir, fsync_file, task_lock
from ..errors import EgopoolError, MetaUpdateError
from ..layout import TaskLayout
from ..meta.info import read_info, write_info
from ..meta.stats import StatsBlock
from ..ops._common import prune_empty_dirs
from ..write.recovery import clear_pending, reclaim_stale, write_pending
from ..write.task_meta import merge_task_meta_many
from .db import EpisodeRow
from .store import Store

__all__ = ["Publication", "committed_unrecorded", "pending_rows", "publish_episode", "publish_group",
           "recover_journals"]

#: ``pause(stage)``: a fault-injection seam for the crash tests (see :class:`egopool.server.importer.Importer`).
Pause = Callable[[str], None]


@dataclass
class Publication:
    """Everything one publish needs.

    Attributes
    ----------
    task_dir:
        The server task directory.
    index:
        Server N.
    moves:
        ``(staged file, final path)`` for the videos and the data parquet.
    row:
        ``(staged row file, final path)`` of the ``meta/episodes`` row.
    declarations:
        What is merged into ``info.json`` (§6.7 union, latest wins).
    blocks:
        The episode's stats blocks (§4 accumulator merge).
    episode:
        The ``episodes`` row to record.
    upload_fields:
        Fields of the ``uploads`` row set in the same transaction.
    new_info:
        ``info.json`` of a task that does not exist yet (None for an existing task).
    tasks_jsonl:
        ``tasks.jsonl`` bytes for a new task.
    synced:
        Staged files already fsynced by the caller (outside the lock); the others are synced here.
    """

    task_dir: Path
    index: int
    moves: list[tuple[Path, Path]]
    row: tuple[Path, Path]
    declarations: dict[str, Any]
    blocks: dict[str, StatsBlock]
    episode: EpisodeRow
    upload_fields: dict[str, Any] = field(default_factory=dict)
    new_info: dict[str, Any] | None = None
    tasks_jsonl: bytes | None = None
    synced: frozenset[Path] = frozenset()


#: Threads of the parallel fsyncs of one publish step (several publishes into different tasks share them).
_SYNC = ThreadPoolExecutor(max_workers=8, thread_name_prefix="egopool-publish-sync")


def _settle(futures: list[Future[Any]]) -> None:
    """Wait for every one of ``futures`` (none still runs on return), then raise the first failure."""
    first: BaseException | None = None
    for f in futures:
        exc = f.exception()
        if exc is not None and first is None:
            first = exc
    if first is not None:
        raise first


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix()


def _rollback(root: Path, journal: Mapping[str, Any]) -> None:
    """Undo an uncommitted publish: the task's files as before (a new task directory goes whole)."""
    if journal.get("new_task"):
        shutil.rmtree(root, ignore_errors=True)
        return
    placed = [root / p for p in journal["files"]]
    for p in reversed(placed):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    clear_pending(root, int(journal["index"]))
    prune_empty_dirs(root, placed)


def _episode_from(doc: Mapping[str, Any]) -> EpisodeRow:
    return EpisodeRow(**{k: doc[k] for k in EpisodeRow.__dataclass_fields__})


def publish_episode(store: Store, pub: Publication, layout: TaskLayout, pause: Pause) -> str | None:
    """Publish one verified episode (module docstring): :func:`publish_group` of one. Caller holds the import
    guard and the task lock.

    Returns
    -------
    str or None
        A message when the episode stands but ``info.json`` / ``stats.json`` could not be
        merged (``MetaUpdateError``; the pending merge is replayed by the next import).

    Raises
    ------
    EgopoolError, OSError
        Before the commit; the task's files are as before.
    """
    out = publish_group(store, [pub], layout, pause)[0]
    if isinstance(out, BaseException):
        raise out
    return out


@dataclass
class _Slot:
    """One episode of a group: its journal, what it placed, and its outcome."""

    pub: Publication
    jpath: Path
    journal: dict[str, Any]
    error: BaseException | None = None
    journaled: bool = False
    committed: bool = False


def _journal(store: Store, pub: Publication) -> _Slot:
    root = pub.task_dir
    finals = [f for _, f in pub.moves] + [pub.row[1]]
    jpath = store.journal_dir / f"{store.journal_prefix(root.name)}{uuid.uuid4().hex[:12]}.json"
    slot = _Slot(pub, jpath, {"task": root.name, "index": pub.index, "new_task": pub.new_info is not None,
                              "files": [_rel(root, f) for f in finals], "commit": _rel(root, pub.row[1]),
                              "episode": pub.episode.to_dict(), "upload_fields": pub.upload_fields,
                              "declarations": pub.declarations})
    for f in finals:
        if f.exists():  # the caller allocated a free N under the lock; never overwrite
            slot.error = EgopoolError(f"refusing to overwrite {f}", path=f)
    return slot


def publish_group(store: Store, pubs: list[Publication], layout: TaskLayout, pause: Pause) -> list[str | None |
                                                                                                  BaseException]:
    """Publish verified episodes of one task together (docs/decisions.md U18): the module docstring's steps
    for each, every step one round for all. Caller holds the import guard and the task lock; the episodes'
    N are distinct and free, at most one creates the task (then it is the only one).

    Each episode keeps its own journal and its own commit (its row's rename), so
    :func:`recover_journals` handles a group exactly as single publishes. The rounds: the journals
    written, and the staged files fsynced, in parallel; the renames; the pending declarations and the
    placed directories fsynced in parallel; ``pause("placed")``; each row renamed (the commits) and each
    row directory fsynced once; ``pause("committed")``; one ``server.db`` transaction for all beside one
    :func:`~egopool.write.task_meta.merge_task_meta_many`; the journals removed.

    A failure before an episode's commit rolls back that episode and every uncommitted one of a higher N
    (so no N stays free below a published one, U2), each answered with that failure; the others go on.

    Returns
    -------
    list
        Per publication, in order: None or the ``MetaUpdateError`` message (the episode stands), or the
        exception that stopped it (before its commit its files are removed; after it, a fault of the
        database or of the row directory's fsync: the journal is kept and recovery finishes it).
    """
    root = pubs[0].task_dir
    slots = [_journal(store, pub) for pub in pubs]

    def live() -> list[_Slot]:
        return [s for s in slots if s.error is None]

    def fail(slot: _Slot, exc: BaseException) -> None:
        for s in live():
            if s is slot or (not s.committed and s.pub.index > slot.pub.index):
                s.error = exc
                if s.journaled:
                    if not store.committed(s.journal):
                        _rollback(root, s.journal)
                    with contextlib.suppress(FileNotFoundError):
                        s.jpath.unlink()
    for s in slots:
        if s.error is not None:
            fail(s, s.error)
    try:
        # each file's bytes once (the extraction wrote them unsynced), beside the journals' writes: the fsyncs of
        # one round run in parallel threads (U14: the file system commits them together)
        syncs = {id(s): [_SYNC.submit(fsync_file, staged) for staged, _ in [*s.pub.moves, s.pub.row]
                         if staged not in s.pub.synced] for s in live()}
        writes = {id(s): _SYNC.submit(atomic_write_json, s.jpath, s.journal, indent=None) for s in live()}
        _settle_quietly(list(writes.values()))
        for s in live():  # every journal written is known before any failure rolls one back
            s.journaled = writes[id(s)].exception() is None
        for s in live():
            exc = writes[id(s)].exception()
            if exc is not None:
                _settle_quietly(syncs[id(s)])
                fail(s, exc)
        for s in live():
            try:
                if s.pub.new_info is not None:
                    write_info(root, s.pub.new_info)
                    atomic_write_bytes(root / "meta" / "tasks.jsonl", s.pub.tasks_jsonl or b"")
                _settle(syncs[id(s)])
            except Exception as exc:
                fail(s, exc)
        dirs: dict[Path, list[_Slot]] = {}
        for s in live():
            try:
                for staged, final in s.pub.moves:
                    final.parent.mkdir(parents=True, exist_ok=True)
                    os.rename(staged, final)
                    dirs.setdefault(final.parent, []).append(s)
            except Exception as exc:
                fail(s, exc)
        # every file of an episode is durable before its commit object
        pending = {id(s): _SYNC.submit(write_pending, root, s.pub.index, s.pub.declarations) for s in live()}
        dsyncs = {d: _SYNC.submit(fsync_dir, d) for d in sorted(dirs)}
        _settle_quietly([*pending.values(), *dsyncs.values()])
        for d, f in dsyncs.items():
            if f.exception() is not None:
                for s in dirs[d]:
                    if s.error is None:
                        fail(s, f.exception())  # type: ignore[arg-type]
        for s in live():
            exc = pending[id(s)].exception()
            if exc is not None:
                fail(s, exc)
        if live():
            pause("placed")
        for s in sorted(live(), key=lambda s: s.pub.index):
            if s.error is not None:  # failed by a lower N's failure in this loop
                continue
            try:
                s.pub.row[1].parent.mkdir(parents=True, exist_ok=True)
                os.rename(s.pub.row[0], s.pub.row[1])  # this episode's commit point
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
    try:
        for d in sorted({s.pub.row[1].parent for s in done}):
            fsync_dir(d)
    except Exception as exc:  # committed: the journals stay, recovery finishes them
        for s in done:
            s.error = exc
        return [s.error for s in slots]
    pause("committed")
    recorded = _SYNC.submit(store.db.add_episodes_imported,  # its commit beside the merge's
                            [(s.pub.episode, s.pub.upload_fields) for s in done])
    problem = None
    try:
        merge_task_meta_many(root, [(s.pub.index, s.pub.declarations, s.pub.blocks) for s in done], layout)
        for s in done:
            clear_pending(root, s.pub.index)
    except MetaUpdateError as exc:  # the episodes stand; reclaim_stale replays the merge next time
        problem = exc.one_line()
    finally:
        recorded.exception()  # wait for it, whatever happened above
    db_error = recorded.exception()
    if db_error is not None:  # raised with the journals kept: recovery records them again
        for s in done:
            s.error = db_error
        return [s.error for s in slots]
    for s in done:
        s.jpath.unlink()  # not synced: a journal the disk still holds after a crash is rolled forward again, which
    return [s.error if s.error is not None else problem for s in slots]  # is idempotent (INSERT OR IGNORE, the
    # pending merge already cleared)


def _settle_quietly(futures: list[Future[Any]]) -> None:
    """Wait for every one of ``futures``; their failures are read by the caller."""
    for f in futures:
        f.exception()


def recover_journals(store: Store, task: str | None = None) -> list[str]:
    """Finish or undo publishes a killed server left; returns one line per journal handled.

    A journal whose commit object (the ``meta/episodes`` row) is in place is rolled forward,
    any other rolled back (:meth:`~egopool.server.store.Store.committed`). ``task`` limits it
    to one task (the caller then holds its import guard and task lock); None handles every
    task, taking each one's guard and lock (start-up).
    """
    done: list[str] = []
    for jp, journal in store.journals(task):
        if journal is None:  # written atomically: unreadable = never written through, nothing placed
            with contextlib.suppress(FileNotFoundError):
                jp.unlink()
            continue
        name = journal["task"]
        root = store.root / name
        if task is None:
            with store.task_guard(name):
                if jp.exists():
                    with task_lock(root) if root.is_dir() else contextlib.nullcontext():
                        done.append(_recover_one(store, jp, journal, root))
        else:
            done.append(_recover_one(store, jp, journal, root))
    prefix = store.journal_prefix(task) if task is not None else "import-"
    for tmp in store.journal_dir.glob(f".{prefix}*.tmp"):  # a journal write killed mid-way (this task's only:
        with contextlib.suppress(FileNotFoundError):        # other tasks' imports run meanwhile)
            tmp.unlink()
    return done


def _recover_one(store: Store, jp: Path, journal: Mapping[str, Any], root: Path) -> str:
    n = int(journal["index"])
    if store.committed(journal):
        store.db.add_episode(_episode_from(journal["episode"]), journal.get("upload_fields") or {})
        reclaim_stale(root, TaskLayout.from_info(root, read_info(root)))  # replays N's pending merge
        line = f"{journal['task']}: finished the interrupted import of episode {n}"
    else:
        _rollback(root, journal)
        line = f"{journal['task']}: rolled back the interrupted import of episode {n}"
    jp.unlink()
    fsync_dir(jp.parent)
    return line


def pending_rows(store: Store, task: str | None = None) -> dict[tuple[str, int], EpisodeRow]:
    """:func:`committed_unrecorded` of ``task`` (None: of every task), keyed ``(task, N)``: what the
    search adds to ``server.db``'s rows (read this first, then the database)."""
    return {(str(doc["task"]), int(doc["index"])): _episode_from(doc["episode"]) for _, doc in store.journals(task)
            if doc is not None and (task is None or doc.get("task") == task) and store.committed(doc)}


def committed_unrecorded(store: Store, task: str) -> dict[int, EpisodeRow]:
    """Episodes of ``task`` that committed but are not yet in ``server.db``, from their journals.

    Between the commit and the database transaction (and after a kill there, until the
    recovery) the journal holds what the ``episodes`` row will say; the catalog shows it, so
    an episode is listed the same way from its commit on. Read the disk first, then this,
    then ``server.db``: the journal is unlinked only after the row is recorded.
    """
    return {int(doc["index"]): _episode_from(doc["episode"]) for _, doc in store.journals(task)
            if doc is not None and doc.get("task") == task and store.committed(doc)}
