"""Maintenance operations on a task: delete, stats recalc/check, migrate, repair, clean, compress.

``delete``, ``repair force-scale``, ``repair clean``, ``stats recalc`` (and ``keypoints backfill``) take a
directory or ``s3://bucket/prefix/task`` alike (:mod:`egopool.ops.task_store`, docs/decisions.md O34-O39).

Every operation plans first (``dry_run=True`` returns the plan and changes nothing),
runs under the task lock, writes through temp + ``os.replace``, backs up what it
replaces, keeps ``pipeline.db`` (:mod:`egopool.registry`) in step, and returns a
report with a ``to_dict()`` for ``--json``.
"""

from __future__ import annotations

from .clean import CleanReport, clean_task
from .clean_bucket import BucketCleanReport
from .compress import CompressReport, StreamJob, compress_task
from .delete import (DeleteOutcome, DeletePlan, DeleteReport, delete_episodes, plan_delete, pooled_episode_leftovers,
                     recover_interrupted_deletes)
from .migrate import MigrationReport, Step, migrate_task, plan_migration
from .repair import (CANDIDATE_SCALES, ColumnEvidence, EpisodeRepair, ForceScaleReport, column_evidence,
                     repair_force_scale)
from .stats_ops import (BlockDiff, StatsCheckReport, StatsRecalcReport, check_stats, compare_stats, compute_stats,
                        recalc_task_stats)

__all__ = [
    "BlockDiff",
    "BucketCleanReport",
    "CANDIDATE_SCALES",
    "CleanReport",
    "CompressReport",
    "ColumnEvidence",
    "DeleteOutcome",
    "DeletePlan",
    "DeleteReport",
    "EpisodeRepair",
    "ForceScaleReport",
    "MigrationReport",
    "StatsCheckReport",
    "StatsRecalcReport",
    "Step",
    "StreamJob",
    "check_stats",
    "clean_task",
    "compress_task",
    "column_evidence",
    "compare_stats",
    "compute_stats",
    "delete_episodes",
    "migrate_task",
    "plan_delete",
    "plan_migration",
    "pooled_episode_leftovers",
    "recalc_task_stats",
    "recover_interrupted_deletes",
    "repair_force_scale",
]
