"""Per-task totals of ``server.db`` for the index and task pages: episodes, rows, review counts.

One grouped query over the ``episodes`` primary-key index and ``review_state`` (never the
task directories), so the index costs the same whatever the tasks hold.
"""

from __future__ import annotations

from typing import Any

from .db import VERDICTS, ServerDB

__all__ = ["task_totals"]


def task_totals(db: ServerDB, task: str | None = None) -> dict[str, dict[str, Any]]:
    """Task -> ``{"episodes", "rows", "accepted", "rejected", "flagged", "unreviewed", "first"}``
    for the pooled episodes (those with a ``server.db`` row); ``first`` is the lowest N (the
    episode whose thumbnail stands for the task). Only ``task`` when given.

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    where, args = ("WHERE e.task = ? ", (task,)) if task is not None else ("", ())
    out: dict[str, dict[str, Any]] = {}
    for name, state, n, rows, first in db.select(
            "SELECT e.task, s.verdict, COUNT(*), SUM(e.length), MIN(e.episode_index) FROM episodes AS e "
            "LEFT JOIN review_state AS s ON s.task = e.task AND s.episode_index = e.episode_index "
            f"{where}GROUP BY e.task, s.verdict", args):
        t = out.setdefault(name, {"episodes": 0, "rows": 0, **{v: 0 for v in VERDICTS.values()}, "unreviewed": 0,
                                  "first": first})
        t["episodes"] += n
        t["rows"] += rows or 0
        t[state or "unreviewed"] += n
        t["first"] = min(t["first"], first)
    return out
