"""A task's ``info.json`` / ``stats.json`` in a :class:`~egopool.storage.Store`, merged by compare-and-swap
(docs/decisions.md O13): read the document and its version, change it, put it with ``PutMode.UPDATE`` on that
version (``CREATE`` when absent), and start again when another writer got there first.

``info.json`` merges with the writer's :func:`~egopool.meta.info.merge_info` (union, latest wins, the max
``total_episodes``: idempotent); ``stats.json`` adds the episodes' blocks with
:func:`~egopool.meta.stats.merge_stats`. When the stored document cannot take them, or when a publish is
rolled forward (were its blocks added already? the journal cannot tell), ``stats.json`` is rebuilt from every
committed episode's data parquet (as the local writer's replay does).
"""

from __future__ import annotations

import json
import random
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, FormatError, MetaUpdateError
from ..layout import TaskLayout
from ..meta.info import merge_info
from ..meta.stats import ACTION_BLOCK, StatsBlock, episode_stats_file, merge_stats, needs_recalc
from ..storage import PreconditionFailed, PutMode, Store
from .journal import json_bytes

__all__ = ["committed_rows", "committed_stats", "create_task_meta", "merge_meta", "update_json"]

_ROW = re.compile(r"chunk-(\d+)/episode-(\d+)\.parquet\Z")


def update_json(store: Store, key: str, change: Callable[[Any], Any], *, indent: int | None,
                attempts: int = 200) -> Any:
    """Read-modify-write of JSON object ``key`` with ``PutMode.UPDATE`` (absent: ``CREATE``), retried.

    ``change(old)`` gets the parsed document (None when absent) and returns the new one, or None to leave
    the object as it is. Returns what was written (or None).

    Raises
    ------
    FormatError
        The stored object is not JSON, or from ``change``.
    PreconditionFailed
        ``attempts`` conditional writes lost to other writers.
    StorageError
        The store failed.
    """
    for i in range(attempts):
        got = store.get(key)
        old = None
        if got is not None:
            try:
                old = json.loads(got[0].decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise FormatError(f"{store.url(key)} is not JSON ({exc})",
                                  hint="run `egopool stats recalc` on the task, or restore it") from exc
        new = change(old)
        if new is None:
            return None
        try:
            if got is None:
                store.put(key, json_bytes(new, indent=indent), mode=PutMode.CREATE)
            else:
                store.put(key, json_bytes(new, indent=indent), mode=PutMode.UPDATE, version=got[1])
            return new
        except PreconditionFailed:
            time.sleep(random.uniform(0, min(0.5, 0.01 * (i + 1))))
    raise PreconditionFailed(f"{store.url(key)}: {attempts} conditional writes lost to other writers")


def create_task_meta(store: Store, task: str, new_info: Mapping[str, Any] | None, tasks_jsonl: bytes | None) -> None:
    """A new task's ``tasks.jsonl`` then ``info.json``, each created only when absent (another writer may have
    made the task meanwhile). Put after the task's first commit: a task exists for readers from ``info.json`` on."""
    if new_info is None:
        return
    for key, body in ((f"{task}/meta/tasks.jsonl", tasks_jsonl or b""),
                      (f"{task}/meta/info.json", json_bytes(dict(new_info), indent=2))):
        try:
            store.put(key, body, mode=PutMode.CREATE)
        except PreconditionFailed:
            pass


def merge_meta(store: Store, task: str, episodes: Sequence[tuple[int, Mapping[str, Any],
                                                                   Mapping[str, StatsBlock] | None]]) -> None:
    """Merge committed episodes ``(N, declarations, blocks)`` into ``info.json`` and ``stats.json`` (module
    docstring): one compare-and-swap of each for all of them. ``blocks`` None for any episode (a roll-forward):
    ``stats.json`` is rebuilt from every committed episode.

    Raises
    ------
    MetaUpdateError
        Either document could not be written (the episodes stand); its index is the first episode's.
    """
    index = episodes[0][0]
    info_key = f"{task}/meta/info.json"

    def change_info(old: Any) -> Any:
        doc = dict(old) if isinstance(old, dict) else {}
        for _, declarations, _ in episodes:
            doc = merge_info(doc, declarations)
        return doc

    try:
        info = update_json(store, info_key, change_info, indent=2)
    except (EgopoolError, TypeError, ValueError, AttributeError) as exc:
        raise MetaUpdateError(index, f"meta/info.json was not updated ({exc})", path=store.url(info_key)) from exc
    stats_key = f"{task}/meta/stats.json"
    rebuild = any(blocks is None for _, _, blocks in episodes)

    def change(old: Any) -> Any:
        if not rebuild and (old is None or (isinstance(old, dict) and not needs_recalc(old))):
            try:
                doc = dict(old) if isinstance(old, dict) else {}
                for _, _, blocks in episodes:
                    doc = merge_stats(doc, blocks or {})
                return doc
            except (KeyError, TypeError, ValueError):
                pass
        return committed_stats(store, task, info)

    try:
        update_json(store, stats_key, change, indent=None)
    except (EgopoolError, OSError, TypeError, ValueError) as exc:
        raise MetaUpdateError(index, f"meta/stats.json was not updated ({exc})", path=store.url(stats_key),
                              hint="rebuild it with `egopool stats recalc`") from exc


def committed_rows(store: Store, task: str, layout: TaskLayout) -> dict[int, str]:
    """N -> row key of every committed episode of ``task`` (one listing of ``meta/episodes/``: on a bucket one
    LIST request per 1000 episodes)."""
    out: dict[int, str] = {}
    for o in store.list(f"{task}/meta/episodes/"):
        m = _ROW.search(o.key)
        if m:
            out[layout.index_of(int(m.group(1)), int(m.group(2)))] = o.key
    return out


def committed_stats(store: Store, task: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """``stats.json`` recomputed from every committed episode's data parquet (a bucket's downloaded one at a
    time; a directory's read in place)."""
    layout = TaskLayout.from_info(Path(task), info)
    doc: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="egopool-stats-") as tmp:
        for n in sorted(committed_rows(store, task, layout)):
            key = layout.data_file(n).as_posix()
            local = store.local_path(key)
            if local is None:
                local = Path(tmp) / "data.parquet"
                with store.open_input(key) as src, open(local, "wb") as out:
                    while True:
                        piece = src.read(1 << 20)
                        if not piece:
                            break
                        out.write(piece)
            doc = merge_stats(doc, episode_stats_file(local, info))
    doc["action"] = dict(ACTION_BLOCK)
    return doc
