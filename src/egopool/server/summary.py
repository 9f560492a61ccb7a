"""Per-task totals of ``server.db`` for the index and task pages: episodes, rows, duration, size,
review counts and a thumbnail.

One grouped query over the ``episodes`` primary-key index and ``review_state`` (never the
task directories), so the index costs the same whatever the tasks hold.
"""

from __future__ import annotations

from typing import Any

from ..errors import EgopoolError
from .db import VERDICTS, ServerDB
from .search import thumbnail_url
from .store import ServerStore

__all__ = ["task_overview", "task_totals"]


def task_overview(store: ServerStore) -> list[dict[str, Any]]:
    """The index's tasks without walking a task directory: ``name``, ``fps``, ``streams`` and
    ``total_episodes`` from ``info.json`` (or ``error``: why it does not read), ``last_upload_at``
    (unix s of the last imported upload, None when none; an index of ``server.db``), plus the
    :func:`task_totals` of the pooled episodes under ``totals`` (None for a task copied into the store).

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    totals = task_totals(store.db)
    out: list[dict[str, Any]] = []
    for name in store.tasks():
        last = store.db.select("SELECT MAX(finished_at) FROM uploads WHERE task = ? AND outcome = 'imported'",
                               (name,))[0][0]
        try:
            info = store.task_info(name) or {}
        except EgopoolError as exc:
            out.append({"name": name, "error": exc.one_line(), "totals": totals.get(name), "last_upload_at": last})
            continue
        out.append({"name": name, "total_episodes": info.get("total_episodes"), "fps": info.get("fps"),
                    "streams": sorted((info.get("video_extensions") or {}).keys()), "last_upload_at": last,
                    "totals": totals.get(name)})
    return out


def task_totals(db: ServerDB, task: str | None = None) -> dict[str, dict[str, Any]]:
    """Task -> ``{"episodes", "duration_s", "size_bytes", "measured", "accepted", "rejected", "flagged",
    "unreviewed", "thumbnail"}`` for the pooled episodes (those with a ``server.db`` row);
    duration (s) and size (bytes) sum the ``measured`` episodes, those whose quality facts are
    computed (None when none is: the pages say "partial" while ``measured < episodes``, P9);
    ``thumbnail`` is the lowest N's with a built preview. Only ``task`` when given.

    Each figure is read from a covering index (episodes' primary key, ``review_state_verdict``,
    ``quality_totals``): no table row is touched, so 100,000 episodes cost milliseconds.

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    names = [task] if task is not None else [r[0] for r in db.select("SELECT DISTINCT task FROM episodes")]
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        n = int(db.select("SELECT COUNT(*) FROM episodes WHERE task = ?", (name,))[0][0])
        if not n:
            continue
        t: dict[str, Any] = {"episodes": n}
        for state in VERDICTS.values():
            t[state] = int(db.select("SELECT COUNT(*) FROM review_state WHERE verdict = ? AND task = ?",
                                     (state, name))[0][0])
        t["unreviewed"] = n - sum(t[v] for v in VERDICTS.values())
        t["duration_s"], t["size_bytes"], t["measured"] = db.select(
            "SELECT SUM(duration_s), SUM(size_bytes), COUNT(*) FROM quality WHERE task = ?", (name,))[0]
        first = db.select("SELECT episode_index, state, manifest FROM previews WHERE task = ? AND state = 'ready' "
                          "ORDER BY episode_index LIMIT 1", (name,))
        t["thumbnail"] = thumbnail_url(name, *first[0]) if first else None
        out[name] = t
    return out
