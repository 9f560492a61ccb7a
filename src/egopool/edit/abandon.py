"""``egopool edit abandon TARGET``: give up an unfinished merge, split or bucket rename into a new task
(docs/decisions.md E73).

An edit that builds a new task is resumable from its journal, but a resume copies the sources *as planned*: when a
source really changed since (a writer that honours no marker, or the hold of a killed run removed by hand), the
resume is refused for good ("the source task ... changed since the ... was planned"). Abandoning it, in this order
(a kill at any step is finished by running it again: the journal goes last):

1. every object of the target but its journal is deleted (nothing of it was a task for a reader: its
   ``meta/info.json``, the commit, was never written);
2. the hold markers (``meta/.edit.json`` with ``hold``, E45) this edit left on its sources are removed;
3. the journal is removed (a directory target: the directory too, once empty).

Refused (one line, nothing changed): no unfinished edit there; its run is alive; the target was committed already
(``edit resume`` finishes it: a ``split --move`` deletes what it moved); an in-place edit or a merge into an
existing task (their changes are in a task readers use: ``edit resume`` finishes them); a directory rename
(atomic, ``edit resume`` finishes it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import OperationError
from .._holders import journal_doc
from ..ops._store_task import EDIT_JOURNAL, holder_alive, open_store_task
from .copy import CopyPlan, EditReport, open_target
from .hold import held_target
from .journal import EditJournal, edit_lock, other_edit, read_journal

__all__ = ["abandon_edit"]

#: the ops whose target is a new task (nothing a reader uses until its commit)
_NEW_TARGET = ("merge", "split", "rename")


def _refuse_kind(uri: str, doc: dict[str, Any]) -> None:
    """Refuse a journal that is not an unfinished new task's (module docstring)."""
    op = str(doc.get("op") or "?")
    held = held_target(doc)
    if held is not None:
        raise OperationError(f"{uri} is a source held by an unfinished `egopool edit {op}` into {held}",
                             hint=f"`egopool edit abandon {held}` abandons that edit (or `egopool edit resume "
                                  f"{held}` finishes it); nothing was changed")
    name = "edit merge --into" if op == "merge-into" else f"edit {op}"
    if op not in _NEW_TARGET or "picks" not in doc:
        raise OperationError(f"`egopool {name}` changed {uri} in place; it cannot be abandoned, only finished",
                             hint=f"`egopool edit resume {uri}` finishes it; nothing was changed")
    if doc.get("state") in ("committed", "moved"):
        raise OperationError(f"the `egopool {name}` into {uri} was committed already; it cannot be abandoned",
                             hint=f"`egopool edit resume {uri}` finishes it; nothing was changed")


def _drop_empty_dir(root: Path) -> None:
    """Remove the directory ``root`` when it holds only empty directories and dot files (a lock file)."""
    for dirpath, _dirs, filenames in os.walk(root, topdown=False):
        d = Path(dirpath)
        if any(not f.startswith(".") for f in filenames):
            return
        for f in filenames:
            (d / f).unlink(missing_ok=True)
        try:
            d.rmdir()
        except OSError:
            return


def abandon_edit(target: str) -> EditReport:
    """Abandon the unfinished edit that builds the new task ``target`` (module docstring).

    Returns
    -------
    EditReport
        ``changes``: the objects removed from the target, the sources released.

    Raises
    ------
    OperationError
        No unfinished edit in ``target``; one that cannot be abandoned (committed, in place, a merge into an
        existing task, a directory rename): named, with ``egopool edit resume``.
    LockError
        Its run is alive (pid, host), or another command holds the target.
    """
    from .unstarted import release_unstarted

    tgt = open_target(target, new=False)
    report = EditReport("abandon", tgt.uri, False)
    if (tgt.local is not None and not tgt.local.is_dir()) or read_journal(tgt) is None:
        unstarted = release_unstarted(tgt.uri, "abandon")  # a merge or split killed before its journal (E92)
        if unstarted is not None:
            return unstarted
    if tgt.local is not None and not tgt.local.is_dir():
        raise OperationError(f"{tgt.uri} does not exist", hint="name the target of the unfinished edit (or `egopool "
                             "edit resume SOURCE` of a source it holds)")
    with edit_lock(tgt, dry_run=False):
        got = read_journal(tgt)
        if got is None:
            raise OperationError(f"{tgt.uri} holds no unfinished edit", hint="nothing to abandon")
        doc, version = got
        _refuse_kind(tgt.uri, doc)
        if tgt.local is None and holder_alive(doc):
            raise other_edit(tgt, doc)
        journal = EditJournal.take_over(tgt, doc, version)  # a bucket: by compare-and-swap (a live run: refused)
        plan = CopyPlan.from_dict(doc)
        if tgt.store.exists("meta/info.json"):  # killed between the commit and its state: a task now
            raise OperationError(f"the `egopool edit {plan.op}` into {tgt.uri} was committed already; it cannot be "
                                 "abandoned", hint=f"`egopool edit resume {tgt.uri}` finishes it; nothing was changed")
        keys = sorted(m.key for m in tgt.store.list() if m.key != EDIT_JOURNAL)
        if keys:
            tgt.store.delete(keys)
        report.changes.append(f"removed {len(keys)} object(s) of the unfinished `edit {plan.op}` from {tgt.uri}")
        for uri in plan.sources:
            src = open_store_task(uri)
            mark = src.store.get(EDIT_JOURNAL)
            if mark is not None and held_target(journal_doc(mark[0])) == tgt.uri:
                src.store.delete([EDIT_JOURNAL])
                report.changes.append(f"released {uri} (held as a source of the `edit {plan.op}`)")
        journal.remove()
        if tgt.local is not None:
            _drop_empty_dir(tgt.local)
    report.changes.append(f"abandoned the `edit {plan.op}` into {tgt.uri}; its sources are as they are now")
    return report
