"""Per-task totals of ``server.db`` for the index and task pages: episodes, rows, duration, size,
review counts and a thumbnail.

One grouped query over the ``episodes`` primary-key index and ``review_state`` (never the
task directories), so the index costs the same whatever the tasks hold.
"""

from __future__ import annotations

from typing import Any

from .db import VERDICTS, ServerDB
from .search import thumbnail_url

__all__ = ["task_totals"]


def task_totals(db: ServerDB, task: str | None = None) -> dict[str, dict[str, Any]]:
    """Task -> ``{"episodes", "rows", "duration_s", "size_bytes", "accepted", "rejected", "flagged",
    "unreviewed", "thumbnail"}`` for the pooled episodes (those with a ``server.db`` row);
    duration (s) and size (bytes) sum the episodes whose quality facts are computed (None when
    none is); ``thumbnail`` is the lowest N's with a built preview. Only ``task`` when given.

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    where, args = ("WHERE e.task = ? ", (task,)) if task is not None else ("", ())
    out: dict[str, dict[str, Any]] = {}
    for name, state, n, rows, seconds, size in db.select(
            "SELECT e.task, s.verdict, COUNT(*), SUM(e.length), SUM(q.duration_s), SUM(q.size_bytes) FROM episodes AS e "
            "LEFT JOIN review_state AS s ON s.task = e.task AND s.episode_index = e.episode_index "
            "LEFT JOIN quality AS q ON q.task = e.task AND q.episode_index = e.episode_index "
            f"{where}GROUP BY e.task, s.verdict", args):
        t = out.setdefault(name, {"episodes": 0, "rows": 0, "duration_s": None, "size_bytes": None,
                                  **{v: 0 for v in VERDICTS.values()}, "unreviewed": 0, "thumbnail": None})
        t["episodes"] += n
        t["rows"] += rows or 0
        if seconds is not None:
            t["duration_s"] = (t["duration_s"] or 0.0) + seconds
        if size is not None:
            t["size_bytes"] = (t["size_bytes"] or 0) + size
        t[state or "unreviewed"] += n
    for name, t in out.items():
        first = db.select("SELECT episode_index, state, manifest FROM previews WHERE task = ? AND state = 'ready' "
                          "ORDER BY episode_index LIMIT 1", (name,))
        if first:
            t["thumbnail"] = thumbnail_url(name, *first[0])
    return out
