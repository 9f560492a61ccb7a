"""Merging a committed episode into the task's ``info.json`` and ``stats.json`` (file_format.md §3, §4, DESIGN §5).

This runs after the episode's ``meta/episodes`` row (the commit record, decisions.md #5)
is written, so nothing here may look like a failed episode: a problem is raised as
:class:`~egopool.errors.MetaUpdateError`, which says that episode N was saved and what
is stale. A ``stats.json`` that cannot be merged (corrupt, legacy blocks without
``count``) is rebuilt from the committed episodes' data; the old file is kept under
``.egopool_backup/`` (a dot directory every reader ignores, §11).
"""

from __future__ import annotations

import datetime as _dt
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


from .._atomic import atomic_write_bytes
from .._safe_read import read_bytes, read_parquet, read_parquet_schema
from ..errors import EgopoolError, MetaUpdateError
from ..layout import TaskLayout, list_task_episodes
from ..meta.info import info_path, merge_info, read_info, write_info
from ..meta.stats import (ACTION_BLOCK, StatsBlock, episode_stats, merge_stats, needs_recalc, read_stats,
                         stats_columns, stats_path, write_stats)

__all__ = ["committed_stats", "merge_task_meta", "merge_task_meta_many"]

_BACKUP_DIR = ".egopool_backup"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, EgopoolError):
        return exc.message
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"


def committed_stats(task_dir: Path, info: Mapping[str, Any], layout: TaskLayout) -> dict[str, Any]:
    """``stats.json`` recomputed from every committed episode (data parquet + ``meta/episodes`` row).

    Episodes still being published (data file, no row yet) are left out: they merge their
    own blocks when they commit.

    Raises
    ------
    FormatError
        A data parquet cannot be read.
    """
    doc: dict[str, Any] = {}
    for g in list_task_episodes(task_dir, layout):
        if g.data is None or g.meta is None:
            continue
        cols = stats_columns(info, read_parquet_schema(g.data, what="data parquet").names)
        table = read_parquet(g.data, cols, what="data parquet")
        doc = merge_stats(doc, episode_stats(table, info, path=g.data))
    doc["action"] = dict(ACTION_BLOCK)
    return doc


def _backup(task_dir: Path, path: Path) -> Path:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    dst = task_dir / _BACKUP_DIR / f"stats-unmergeable-{stamp}" / path.relative_to(task_dir)
    atomic_write_bytes(dst, read_bytes(path, what="stats.json"))
    return dst


def merge_task_meta(task_dir: Path, index: int, declarations: Mapping[str, Any],
                    blocks: Mapping[str, StatsBlock], layout: TaskLayout) -> None:
    """Merge committed episode ``index`` into ``info.json`` (§6.7 union) and ``stats.json`` (§4 accumulator).

    Caller holds the task lock. When ``stats.json`` cannot take the episode's blocks (it
    does not parse, a block lacks ``count`` or has another dimension), it is backed up
    and rebuilt from every committed episode, this one included, with a RuntimeWarning.

    Raises
    ------
    MetaUpdateError
        ``info.json`` or ``stats.json`` could not be written (disk full, read-only...), or
        the rebuild failed; the episode itself is saved and stays.
    """
    merge_task_meta_many(task_dir, [(index, declarations, blocks)], layout)


def merge_task_meta_many(task_dir: Path, episodes: Sequence[tuple[int, Mapping[str, Any], Mapping[str, StatsBlock]]],
                         layout: TaskLayout) -> None:
    """:func:`merge_task_meta` of several committed episodes ``(index, declarations, blocks)`` at once, in
    their order: one read and one atomic write of ``info.json`` and of ``stats.json`` for all (the pooling
    server's group commit, docs/decisions.md U18). The result is the same as merging them one by one.

    Raises
    ------
    MetaUpdateError
        As :func:`merge_task_meta`; its ``index`` is the first episode's, its message names the others
        (every one of them is saved and stays).
    """
    tdir = Path(task_dir)
    index = episodes[0][0]
    others = [n for n, _, _ in episodes[1:]]
    also = f" (nor for episodes {', '.join(map(str, others))}, saved too)" if others else ""
    try:
        info = read_info(tdir)
        for _, declarations, _ in episodes:
            info = merge_info(info, declarations)
        write_info(tdir, info, sync_dir=False)  # meta/ is fsynced once, after stats.json's rename
    except (EgopoolError, OSError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise MetaUpdateError(index, f"meta/info.json was not updated{also} ({_reason(exc)})", path=info_path(tdir),
                              hint="its columns stay undeclared until info.json is fixed; `egopool validate TASK` "
                                   "shows which") from exc
    spath = stats_path(tdir)
    recalc_hint = "run `egopool stats recalc TASK`"
    try:
        stored = read_stats(tdir)
        if needs_recalc(stored):  # legacy v1.1.0 blocks without count (§4 MUST: rescan data/ once)
            doc = committed_stats(tdir, info, layout)
        else:
            doc = stored
            for _, _, blocks in episodes:
                doc = merge_stats(doc, blocks)
    except (EgopoolError, KeyError, TypeError, ValueError) as exc:
        try:
            backup = _backup(tdir, spath)
            doc = committed_stats(tdir, info, layout)
        except (EgopoolError, OSError) as exc2:
            raise MetaUpdateError(index, f"meta/stats.json could not be merged{also} ({_reason(exc)}) nor rebuilt "
                                         f"({_reason(exc2)})", path=spath, hint=recalc_hint) from exc2
        warnings.warn(f"episode {index}{' and ' + ', '.join(map(str, others)) if others else ''}: {spath} could not "
                      f"be merged ({_reason(exc)}); rebuilt it from data/, the old file is {backup}", RuntimeWarning,
                      stacklevel=5 if not others else 4)
    try:
        write_stats(tdir, doc)
    except (EgopoolError, OSError, ValueError) as exc:
        raise MetaUpdateError(index, f"meta/stats.json was not updated{also} ({_reason(exc)})", path=spath,
                              hint=recalc_hint) from exc
