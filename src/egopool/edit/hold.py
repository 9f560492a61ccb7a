"""A merge's or split's hold of its source tasks while it copies them (docs/decisions.md E45-E47).

The plan records, per picked episode, the version of every source object the copy reads (data parquet, row,
videos: a directory's ``inode-mtime-size``, a bucket's ETag; :func:`versions_of`). Before the copy the edit holds
each source:

- a marker, the source's ``meta/.edit.json`` (``{"op", "hold": true, "target", "owner"}``, ``PutMode.CREATE``),
  which every command that changes a task honours already (E30, E40): ``delete`` (both backends), the writer's
  ``begin_episode``, an in-place edit (its own journal cannot be created), another merge or split (refused), a
  bucket rename; they are refused in one line naming the merge ("`egopool edit merge` is in progress");
- a directory also holds the task ``flock`` *shared* (``task_read_lock``): a recorder's row publish, ``delete``,
  ``compress`` and the other writers take it exclusive and wait (saying so once, E46), while dry runs and
  readers, which take it shared, go on (the merge only reads the source);

then checks that every recorded version is still there (a source changed between the plan and the hold, or
between a kill and the resume, is refused: the plan's digests and stats would not match the copy), copies, and
checks again before it commits the target (a writer that honours no marker). The hold ends after the commit
(before a ``split --move`` deletes through ``egopool delete``, which takes the lock itself). A run killed while it
holds a source leaves the marker: the commands above then say "an interrupted `egopool edit merge`" and
``egopool edit resume SOURCE`` (or ``TARGET``) finishes the merge, which takes the marker over and removes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._atomic import task_read_lock
from .._state import state_dir
from ..errors import LockError, OperationError
from .._holders import journal_doc
from ..ops._store_task import (EDIT_JOURNAL, StoreTask, edit_in_progress, holder_alive, json_bytes, lock_holder,
                               open_store_task)
from ..storage import PreconditionFailed, PutMode, Store
from .source import EpisodeRef

__all__ = ["SourceHold", "held_target", "hold_note", "holding", "versions_of"]


def hold_note(target: str) -> Path:
    """This machine's note of the sources a merge or split into ``target`` holds (``$XDG_STATE_HOME/egopool/
    edit-holds/<sha1 of the target, 16 hex>.json``: ``{"target", "sources"}``), written before it holds them and
    removed when it releases them: ``egopool edit resume|abandon TARGET`` of a run killed before the target's
    journal existed finds them there (E92; else among the target's siblings)."""
    return state_dir() / "edit-holds" / f"{hashlib.sha1(target.encode()).hexdigest()[:16]}.json"


def _write_note(target: str, sources: list[str]) -> None:
    note = hold_note(target)
    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(json.dumps({"target": target, "sources": sources}))
    except OSError:
        pass  # a help to find the holds only: the markers on the sources are what holds them


def versions_of(store: Store, ref: EpisodeRef) -> dict[str, str]:
    """``key -> version`` of the objects a copy of the episode ``ref`` reads (data, row, videos); an object gone
    is left out (the copy then fails on it, named)."""
    out: dict[str, str] = {}
    for key in (ref.data, ref.row, *(v[1] for v in ref.videos.values())):
        meta = store.head(key)
        if meta is not None and meta.version is not None:
            out[key] = meta.version
    return out


def held_target(doc: dict[str, Any]) -> str | None:
    """The target of the merge or split whose hold marker ``doc`` is (a source's ``meta/.edit.json``), else None."""
    return str(doc.get("target")) if doc.get("hold") and doc.get("target") else None


def _read(store: Store) -> tuple[dict[str, Any], str] | None:
    got = store.get(EDIT_JOURNAL)
    if got is None:
        return None
    return journal_doc(got[0]), got[1]


class SourceHold:
    """The hold of a plan's sources (module docstring): :meth:`acquire`, :meth:`verify`, :meth:`release`."""

    def __init__(self, op: str, target: str, sources: list[str], versions: list[tuple[int, dict[str, str]]]) -> None:
        self.op, self.target, self.sources, self.versions = op, target, sources, versions
        self.tasks: dict[int, StoreTask] = {}
        self._locks = contextlib.ExitStack()
        self._held: list[int] = []
        #: the target's journal exists: an interrupt (Ctrl-C, SIGTERM) leaves the markers, as a kill does (E67)
        self.journaled = False

    def acquire(self) -> None:
        """Hold every source (lock, then marker), then :meth:`verify`.

        Raises
        ------
        LockError
            A source is locked by a writer, or holds another edit's journal or another merge's marker (named);
            whatever this run held is released.
        OperationError
            A source changed since the plan (:meth:`verify`).
        """
        _write_note(self.target, list(self.sources))
        try:
            for i, uri in enumerate(self.sources):
                t = open_store_task(uri)
                self.tasks[i] = t
                if t.local is not None and not self._locks.enter_context(task_read_lock(t.local, wait=False)):
                    raise LockError(f"the source task is locked by {lock_holder(t.local)}", path=t.uri,
                                    hint=f"run the {self.op} again when it has finished; nothing was written")
                self._mark(t)
                self._held.append(i)
            self.verify()
        except BaseException as exc:
            self.abandon(exc)
            raise

    def _mark(self, t: StoreTask) -> None:
        doc = {"op": self.op, "hold": True, "target": self.target, "sources": list(self.sources)}  # E92
        try:
            t.store.put(EDIT_JOURNAL, json_bytes({**doc, "owner": t.stamp()}), mode=PutMode.CREATE)
            return
        except PreconditionFailed:
            pass
        got = _read(t.store)
        if got is not None and held_target(got[0]) == self.target and not holder_alive(got[0]):
            try:  # this merge's own marker, left by its killed run: taken over
                t.store.put(EDIT_JOURNAL, json_bytes({**doc, "owner": t.stamp()}), mode=PutMode.UPDATE,
                            version=got[1])
                return
            except PreconditionFailed:
                got = _read(t.store)
        raise edit_in_progress(got[0] if got is not None else {}, t.store.url(EDIT_JOURNAL), t.uri,
                               "nothing was written")

    def verify(self) -> None:
        """Every object the plan read is still the version it read.

        Raises
        ------
        OperationError
            A source object changed or vanished (named: task, key); nothing is committed in the target.
        """
        for source, versions in self.versions:
            t = self.tasks.get(source) or open_store_task(self.sources[source])
            for key, version in sorted(versions.items()):
                meta = t.store.head(key)
                if meta is None or meta.version != version:
                    raise OperationError(
                        f"the source task {t.uri} changed since the {self.op} was planned ({key} "
                        f"{'is gone' if meta is None else 'was rewritten'}); nothing was committed in {self.target}",
                        path=t.uri, hint=f"`egopool edit abandon {self.target}` gives it up (E73), then run the "
                                         f"{self.op} again" if self.op != "merge-into" else
                        f"restore the source as it was, then `egopool edit resume {self.target}`")

    def release(self) -> None:
        """Remove this run's markers, then let the locks go (idempotent)."""
        for i in self._held:
            t = self.tasks[i]
            got = _read(t.store)
            owner = got[0].get("owner") if got is not None else None
            if isinstance(owner, dict) and owner.get("id") == t.owner["id"]:
                t.store.delete([EDIT_JOURNAL])
        self._held = []
        hold_note(self.target).unlink(missing_ok=True)
        self._locks.close()

    def abandon(self, exc: BaseException) -> None:
        """The edit ends with ``exc``: an error, or an interrupt before the target's journal exists, releases
        (:meth:`release`); an interrupt (``KeyboardInterrupt``: Ctrl-C, SIGTERM) once it exists keeps the markers
        with their owner, exactly as a kill does (E67), so that no other command changes a source before
        ``egopool edit resume TARGET`` takes them over; the locks go with the process anyway."""
        if isinstance(exc, Exception) or not self.journaled:
            self.release()
            return
        self._held = []
        self._locks.close()


@contextlib.contextmanager
def holding(hold: SourceHold | None) -> Iterator[SourceHold | None]:
    """``hold`` acquired for the block and released after it (also on an error; an interrupt once the target's
    journal exists keeps its markers: :meth:`SourceHold.abandon`); None: nothing held."""
    if hold is None:
        yield None
        return
    hold.acquire()
    try:
        yield hold
    except BaseException as exc:
        hold.abandon(exc)
        raise
    hold.release()
