"""Editing tasks (issue 30; docs/decisions.md "Editing tasks (issue 30)"): merge, split, rename, task strings,
columns and stream slots, on a directory or an ``s3://`` task alike, journaled and resumable.

- :func:`merge_tasks` builds a new task or appends to an existing one, :func:`split_task` builds a new task
  (:mod:`egopool.edit.copy`, :mod:`egopool.edit.append`);
- :func:`rename_task` renames one (:mod:`egopool.edit.rename`);
- :func:`apply_change` with a :class:`Change` (:mod:`egopool.edit.columns`, :mod:`egopool.edit.slots`) changes
  one in place (:mod:`egopool.edit.inplace`);
- :func:`resume_edit` finishes an interrupted edit from its journal, whatever it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import OperationError
from ..ops._store_task import StoreTask
from ..storage import ObjectPath
from .columns import AddColumn, RemoveColumn, RenameColumn, load_values
from .copy import EditReport
from .inplace import Change, InplaceReport, apply_change
from .merge import merge_new, plan_merge
from .rename import rename_task
from .select import plan_split, split_task
from .slots import RemoveSlot, RenameSlot, SetTask

__all__ = ["AddColumn", "Change", "EditReport", "InplaceReport", "RemoveColumn", "RemoveSlot", "RenameColumn",
           "RenameSlot", "SetTask", "apply_change", "change_of", "load_values", "merge_tasks", "plan_merge",
           "plan_split", "rename_task", "resume_edit", "split_task"]


def change_of(op: str, args: dict[str, Any]) -> Change:
    """The in-place change a journal records (``op``, ``args``).

    Raises
    ------
    OperationError
        Not an in-place op.
    """
    if op == "remove-column":
        return RemoveColumn(str(args["column"]))
    if op == "rename-column":
        return RenameColumn(str(args["old"]), str(args["new"]))
    if op == "add-column":
        return AddColumn(str(args["column"]), int(args["episode"]), np.asarray(args["values"], np.float32),
                         str(args.get("file") or ""))
    if op == "remove-slot":
        return RemoveSlot(str(args["slot"]))
    if op == "rename-slot":
        return RenameSlot(str(args["old"]), str(args["new"]))
    if op == "set-task":
        return SetTask(str(args["task"]), int(args["task_index"]))
    raise OperationError(f"unknown edit {op!r} in the journal", hint="remove meta/.edit.json by hand")


def merge_tasks(sources: Sequence[str | ObjectPath], target: str | ObjectPath, *,
                dry_run: bool = False) -> EditReport:
    """Merge ``sources`` into ``target``: a new task (:func:`egopool.edit.merge.merge_new`), or appended to the
    existing task there (:func:`egopool.edit.append.merge_into`, decisions E14-E18).

    Raises
    ------
    OperationError, LockError, ObjectStoreError
        As the two functions do (bad sources, an unfinished other edit, another writer of the target).
    """
    from .append import merge_into
    from .copy import open_target
    from .journal import read_journal

    from .hold import held_target
    from .journal import other_edit

    existing = open_target(target, new=False)
    if existing.store.exists("meta/info.json"):
        pending = read_journal(existing)
        if pending is not None and held_target(pending[0]) is not None:
            raise other_edit(existing, pending[0])  # another merge or split reads it (E45)
        if pending is None or pending[0].get("op") == "merge-into":
            return merge_into(sources, existing, dry_run=dry_run)  # into an existing task (E14)
    return merge_new(sources, target, dry_run=dry_run)


def resume_edit(target: str) -> EditReport | InplaceReport:
    """Finish the interrupted edit whose journal is in ``target`` (whatever its op).

    Raises
    ------
    OperationError
        No journal there.
    """
    from .append import execute_into
    from .copy import open_target, run_plan
    from .hold import held_target
    from .journal import read_journal
    from .rename import _delete_old
    from .select import _move

    from .source import location
    from .unstarted import release_unstarted

    import os

    if not target.startswith("s3://") and not os.path.lexists(os.path.abspath(target)):
        unstarted = release_unstarted(location(target), "resume")  # a merge killed before its journal (E92)
        if unstarted is not None:
            return unstarted
    _resumable(target)
    tgt = open_target(target, new=False)
    got = read_journal(tgt)
    if got is None:
        unstarted = release_unstarted(tgt.uri, "resume")
        if unstarted is not None:
            return unstarted
    if got is not None and held_target(got[0]) is not None:  # a source held by a killed merge or split (E45)
        return _resume_holder(tgt, got[0])
    if got is not None:
        op = str(got[0].get("op"))
        if op == "rename" and tgt.local is not None:
            args = got[0].get("args") or {}
            return rename_task(str(args.get("source")), str(args.get("target")).rsplit("/", 1)[-1])
        if op not in ("merge", "merge-into", "split", "rename"):
            return apply_change(tgt.uri, change_of(op, dict(got[0].get("args") or {})))
    return run_plan(tgt, None, EditReport("resume", tgt.uri, False), move=_move if got is None or
                    got[0].get("op") == "split" else _delete_old, into=execute_into)


def _resumable(target: str) -> None:
    """Refuse ``edit resume`` of a local path that is a file or does not exist, in those words (E65).

    Raises
    ------
    OperationError
        ``target`` is a file, or nothing, on this machine.
    """
    import os

    if target.startswith("s3://"):
        return
    path = os.path.abspath(target)
    hint = ("give the directory of the task whose edit was interrupted (it holds meta/.edit.json), or `egopool edit "
            "resume SOURCE` of a source a killed merge or split still holds")
    if not os.path.lexists(path):
        raise OperationError(f"{path} does not exist", hint=hint)
    if not os.path.isdir(path):
        raise OperationError(f"{path} is a file, not a task directory", hint=hint)


def _resume_holder(src: StoreTask, doc: dict[str, Any]) -> EditReport | InplaceReport:
    """``edit resume SOURCE`` where SOURCE holds the marker of a merge or split reading it (E45): the edit of its
    target is finished (which takes the marker over and removes it); a target with no unfinished edit left the
    marker behind (killed between its commit and the marker's removal, or before its journal: E92): the markers of
    every source of that edit are removed.

    Raises
    ------
    LockError
        The merge or split is still running (named: pid, host).
    """
    from ..ops._store_task import holder_alive
    from .copy import open_target
    from .hold import held_target
    from .journal import other_edit, read_journal

    if holder_alive(doc):
        raise other_edit(src, doc)
    from .unstarted import release_holds, unstarted_line

    target = str(held_target(doc))
    if read_journal(open_target(target, new=False)) is not None:
        return resume_edit(target)
    # no journal: finished (killed before its markers went) or never started (killed while planning, E92): every
    # source of that edit released, not this one alone
    released = release_holds(target, doc, src.uri)
    report = EditReport("resume", src.uri, False)
    report.changes.append(unstarted_line(doc, target, released))
    return report
