"""Maintenance operations on a task directory: delete, stats recalc/check, migrate, repair (issue 5).

Every operation plans first (``dry_run=True`` returns the plan and changes nothing),
runs under the task lock, writes through temp + ``os.replace``, backs up what it
replaces, keeps ``pipeline.db`` (:mod:`egopool.registry`) in step, and returns a
report with a ``to_dict()`` for ``--json``.
"""

from __future__ import annotations

from .stats_ops import (BlockDiff, StatsCheckReport, StatsRecalcReport, check_stats, compare_stats, compute_stats,
                        recalc_task_stats)
from .migrate import MigrationReport, Step, migrate_task, plan_migration
from .delete import (DeleteOutcome, DeletePlan, DeleteReport, delete_episodes, plan_delete, pooled_episode_leftovers,
                     recover_interrupted_deletes)

__all__ = [
    "BlockDiff",
    "StatsCheckReport",
    "StatsRecalcReport",
    "check_stats",
    "compare_stats",
    "compute_stats",
    "recalc_task_stats",
    "MigrationReport",
    "Step",
    "migrate_task",
    "plan_migration",
    "DeleteOutcome",
    "DeletePlan",
    "DeleteReport",
    "delete_episodes",
    "plan_delete",
    "pooled_episode_leftovers",
    "recover_interrupted_deletes",
]
