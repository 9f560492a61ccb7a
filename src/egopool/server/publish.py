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
from ..write.task_meta import merge_task_meta
from .db import EpisodeRow
from .store import Store

__all__ = ["Publication", "committed_unrecorded", "pending_rows", "publish_episode", "recover_journals"]

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
    """Publish one verified episode (module docstring). Caller holds the import guard and the task lock.

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
    root = pub.task_dir
    task = root.name
    finals = [f for _, f in pub.moves] + [pub.row[1]]
    for f in finals:
        if f.exists():  # the caller allocated a free N under the lock; never overwrite
            raise EgopoolError(f"refusing to overwrite {f}", path=f)
    jpath = store.journal_dir / f"{store.journal_prefix(task)}{uuid.uuid4().hex[:12]}.json"
    journal: dict[str, Any] = {"task": task, "index": pub.index, "new_task": pub.new_info is not None,
                               "files": [_rel(root, f) for f in finals], "commit": _rel(root, pub.row[1]),
                               "episode": pub.episode.to_dict(), "upload_fields": pub.upload_fields,
                               "declarations": pub.declarations}
    # each file's bytes once (the extraction wrote them unsynced), while the journal is written: the
    # fsyncs of one step run in parallel threads (U14: the file system commits them together)
    syncs = [_SYNC.submit(fsync_file, staged) for staged, _ in [*pub.moves, pub.row] if staged not in pub.synced]
    try:
        atomic_write_json(jpath, journal, indent=None)
    except BaseException:
        _settle(syncs)
        raise
    try:
        if pub.new_info is not None:
            write_info(root, pub.new_info)
            atomic_write_bytes(root / "meta" / "tasks.jsonl", pub.tasks_jsonl or b"")
        _settle(syncs)
        dirs: set[Path] = set()
        for staged, final in pub.moves:
            final.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staged, final)
            dirs.add(final.parent)
        # every file of the episode is durable before its commit object
        _settle([_SYNC.submit(write_pending, root, pub.index, pub.declarations),
                 *(_SYNC.submit(fsync_dir, d) for d in sorted(dirs))])
        pause("placed")
        pub.row[1].parent.mkdir(parents=True, exist_ok=True)
        os.rename(pub.row[0], pub.row[1])  # the commit point
    except BaseException:
        if not store.committed(journal):
            _rollback(root, journal)
            with contextlib.suppress(FileNotFoundError):
                jpath.unlink()
        raise
    fsync_dir(pub.row[1].parent)
    pause("committed")
    recorded = _SYNC.submit(store.db.add_episode, pub.episode, pub.upload_fields)  # its commit beside the merge's
    problem = None
    try:
        merge_task_meta(root, pub.index, pub.declarations, pub.blocks, layout)
        clear_pending(root, pub.index)
    except MetaUpdateError as exc:  # the episode stands; reclaim_stale replays the merge next time
        problem = exc.one_line()
    finally:
        _settle([recorded])  # a database error is raised with the journal kept: recovery records it again
    jpath.unlink()  # not synced: a journal the disk still holds after a crash is rolled forward again, which
    return problem  # is idempotent (the database row INSERT OR IGNORE, the pending merge already cleared)


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
