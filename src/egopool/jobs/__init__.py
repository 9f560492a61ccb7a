"""Collection-wide jobs: one unit of work per episode, in-process or on a Ray cluster (issue 10).

See :mod:`egopool.jobs.executor` and docs/scale.md.
"""

from __future__ import annotations

from .executor import Executor, LocalExecutor, RayExecutor, UnitProgress, make_executor

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "UnitProgress", "make_executor"]
