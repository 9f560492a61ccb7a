"""Maintenance operations on a task directory: delete, stats recalc/check, migrate, repair (issue 5).

Every operation plans first (``dry_run=True`` returns the plan and changes nothing),
runs under the task lock, writes through temp + ``os.replace``, backs up what it
replaces, keeps ``pipeline.db`` (:mod:`egopool.registry`) in step, and returns a
report with a ``to_dict()`` for ``--json``.
"""

from __future__ import annotations

from .delete import (DeleteOutcome, DeletePlan, DeleteReport, delete_episodes, plan_delete, pooled_episode_leftovers,
                     recover_interrupted_deletes)

__all__ = [
    "DeleteOutcome",
    "DeletePlan",
    "DeleteReport",
    "delete_episodes",
    "plan_delete",
    "pooled_episode_leftovers",
    "recover_interrupted_deletes",
]
