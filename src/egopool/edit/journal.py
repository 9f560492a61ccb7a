"""The journal of an edit (docs/decisions.md E2): ``meta/.edit.json`` in the task being built or changed.

A dotfile (every reader ignores it, file_format.md §11). It is this edit's ownership on both backends: created
with ``PutMode.CREATE`` (two edits of one task cannot both create it: the second is refused in one line), then
rewritten with ``PutMode.UPDATE`` at the version read (:meth:`StoreTask.write_journal`). A directory also holds
the task ``flock`` without waiting (a recorder, ``delete`` or a second edit in progress: refused). The journal
holds the whole plan (every episode's source and destination, the target's ``info.json``, ``stats.json`` and
``tasks.jsonl``), so a re-run after a SIGKILL executes it again from the journal, never from a new plan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._atomic import task_lock
from ..errors import FormatError, LockError, OperationError
from ..meta import markers
from .._holders import journal_doc
from ..ops._store_task import EDIT_JOURNAL, StoreTask, edit_in_progress, holder_alive
from ..storage import PreconditionFailed, PutMode
from ..storage.store import require_conditional_writes

__all__ = ["JOURNAL", "EditJournal", "edit_lock", "other_edit", "read_journal"]

#: task-relative key of an edit's journal
JOURNAL = EDIT_JOURNAL


def read_journal(t: StoreTask) -> tuple[dict[str, Any], str] | None:
    """``(document, version)`` of the task's edit journal, None when there is none.

    Raises
    ------
    OperationError
        The journal does not read (named, with the fix).
    """
    try:
        return t.get_json(JOURNAL, "edit journal")
    except FormatError as exc:
        raise OperationError(f"unreadable edit journal: {exc.message}", path=t.store.url(JOURNAL),
                             hint="inspect the task (`egopool validate TASK`), then remove the journal") from exc


def other_edit(t: StoreTask, doc: dict[str, Any]) -> LockError:
    """The refusal of an edit that finds another edit's journal ``doc`` in ``t``: in progress (its owner alive:
    wait), or interrupted (`egopool edit resume TASK` finishes it); one line, nothing written."""
    return edit_in_progress(doc, t.store.url(JOURNAL), t.uri, "nothing was written")


class EditJournal:
    """The journal this run owns: :meth:`create` it, :meth:`write` each step, :meth:`remove` it at the end."""

    def __init__(self, t: StoreTask, doc: dict[str, Any], version: str | None) -> None:
        self.t, self.doc, self.version = t, doc, version

    @classmethod
    def create(cls, t: StoreTask, doc: dict[str, Any]) -> EditJournal:
        """Create the journal (``CREATE`` on both backends).

        Raises
        ------
        LockError
            Another edit created it first (nothing of this run was written).
        """
        from ..ops._store_task import json_bytes

        try:
            version = t.store.put(JOURNAL, json_bytes({**doc, "owner": t.stamp()}), mode=PutMode.CREATE)
        except PreconditionFailed as exc:
            got = t.store.get(JOURNAL)
            raise other_edit(t, journal_doc(got[0]) if got is not None else {}) from exc
        return cls(t, doc, version)

    @classmethod
    def take_over(cls, t: StoreTask, doc: dict[str, Any], version: str) -> EditJournal:
        """Own the journal of an earlier run (a bucket: only when that run is dead; a directory: the lock says so).

        Raises
        ------
        LockError
            Its run is alive (named: host, pid).
        """
        return cls(t, doc, t.own_journal(JOURNAL, doc, version, "edit"))

    def write(self, **changes: Any) -> None:
        """Record a step (``state`` etc.) by a compare-and-swap on the version this run holds."""
        self.doc = {**self.doc, **changes}
        self.version = self.t.write_journal(JOURNAL, self.doc, self.version, "edit")

    def remove(self) -> None:
        """Delete the journal: the edit is complete."""
        self.t.store.delete([JOURNAL])


@contextmanager
def edit_lock(t: StoreTask, *, dry_run: bool) -> Iterator[None]:
    """A directory: its task lock, taken without waiting, and no live recording. A bucket: nothing (its journal
    is the ownership; the store must honour conditional writes).

    Raises
    ------
    LockError
        The task is locked (a recorder, ``delete``, another edit) or being recorded into.
    OperationError
        The bucket cannot write conditionally.
    """
    if t.local is None:
        if not dry_run:
            require_conditional_writes(t.store, "an edit")
        yield
        return
    if dry_run:
        yield
        return
    t.local.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(task_lock(t.local, wait=False))
        except LockError:
            got = read_journal(t)
            if got is not None and holder_alive(got[0]):  # another edit holds the lock: say which, by whom (E30)
                raise other_edit(t, got[0]) from None
            raise
        live = sorted(markers.live_reservations(t.local, prune=False))
        if live:
            raise LockError(f"episode(s) {', '.join(map(str, live))} are being recorded into this task",
                            path=t.local, hint="edit it between recording sessions; nothing was changed")
        yield
