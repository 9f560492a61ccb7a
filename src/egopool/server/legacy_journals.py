"""Publish journals a directory store's server wrote before issue 24 (docs/decisions.md U5, O26).

Those were files ``<store>/.egopool-server/journals/import-<sha1(task)[:20]>-<token>.json`` with task-relative
``files`` and ``commit``, written *before* a new task's ``info.json`` and beside the writer's pending file
``meta/.pending-<N>.json``. A store a killed older server left may hold some: at start-up each is finished
(its row exists: the database row from the journal, the pending merge replayed by the writer's
:func:`~egopool.write.recovery.reclaim_stale`) or undone (its files removed; a task it created removed
whole), as that server would have done. New journals are :mod:`egopool.publish`'s.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any

from .._atomic import task_lock
from .._safe_read import read_json
from ..errors import EgopoolError
from ..layout import TaskLayout
from ..meta.info import read_info
from ..ops._common import prune_empty_dirs
from ..write.recovery import clear_pending, reclaim_stale
from .store import ServerStore, episode_row

__all__ = ["recover_legacy_journals"]


def recover_legacy_journals(store: ServerStore) -> list[str]:
    """Finish or undo every pre-issue-24 journal of a directory store; one line per journal (none in a bucket)."""
    if store.root is None:
        return []
    jdir = store.state / "journals"
    done: list[str] = []
    for jp in sorted(jdir.glob("import-*.json")) if jdir.is_dir() else []:
        try:
            doc = read_json(jp, what="publish journal")
        except EgopoolError:
            doc = None
        if not (isinstance(doc, dict) and isinstance(doc.get("task"), str) and isinstance(doc.get("index"), int)
                and isinstance(doc.get("files"), list)):
            jp.unlink(missing_ok=True)  # written atomically: unreadable = never written through, nothing placed
            continue
        root = store.root / str(doc["task"])
        with store.task_guard(str(doc["task"])), task_lock(root) if root.is_dir() else contextlib.nullcontext():
            done.append(_recover_one(store, doc, root))
        jp.unlink(missing_ok=True)
    for tmp in jdir.glob(".import-*.tmp") if jdir.is_dir() else []:
        tmp.unlink(missing_ok=True)
    return done


def _recover_one(store: ServerStore, doc: dict[str, Any], root: Path) -> str:
    n = int(doc["index"])
    files = [str(f) for f in doc["files"]]
    commit = doc.get("commit") or (files[-1] if files else None)
    if isinstance(commit, str) and (root / commit).is_file():
        if isinstance(doc.get("episode"), dict):
            store.db.add_episode(episode_row(doc["episode"]), doc.get("upload_fields") or {})
        reclaim_stale(root, TaskLayout.from_info(root, read_info(root)))  # replays N's pending merge
        return f"{doc['task']}: finished the interrupted import of episode {n}"
    if doc.get("new_task"):
        shutil.rmtree(root, ignore_errors=True)
    else:
        placed = [root / p for p in files]
        for p in reversed(placed):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        clear_pending(root, n)
        prune_empty_dirs(root, placed)
    return f"{doc['task']}: rolled back the interrupted import of episode {n}"
