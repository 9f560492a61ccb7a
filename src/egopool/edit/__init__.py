"""Editing tasks (issue 30; docs/decisions.md "Editing tasks"): merge, split, rename, change task strings, and
columns and streams, on a directory or an ``s3://`` task alike, journaled and resumable.

- :func:`merge_tasks`, :func:`split_task` build a new task (:mod:`egopool.edit.copy`);
- :func:`resume_edit` finishes an interrupted one from its journal.
"""

from __future__ import annotations

from .copy import EditReport
from .merge import merge_tasks, plan_merge
from .select import plan_split, split_task

__all__ = ["EditReport", "merge_tasks", "plan_merge", "plan_split", "resume_edit", "split_task"]


def resume_edit(target: str) -> EditReport:
    """Finish the interrupted edit whose journal is in ``target`` (whatever its op).

    Raises
    ------
    OperationError
        No journal there.
    """
    from .copy import open_target, run_plan
    from .select import _move

    tgt = open_target(target, new=False)
    return run_plan(tgt, None, EditReport("resume", tgt.uri, False), move=_move)
