"""The sweep of interrupted publishes (docs/decisions.md O14): at start-up and before each import into a task.

A journal of ``owner`` (its publisher is this process's predecessor: one writer per owner id) or older than
``stale_after`` seconds (its writer died) is finished when its row exists (create a new task's meta, record,
merge with ``stats.json`` rebuilt) and undone otherwise (its keys and the journal deleted). On a bucket an
incomplete multipart upload is aborted when its key belongs to a journal undone here or it is older than
``stale_after``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..storage import Store
from .commit import Publication, Record, declarations_of, finish
from .journal import remove
from .journal import STALE_AFTER, journals

__all__ = ["publication_of", "recover"]


def publication_of(doc: dict[str, Any]) -> Publication:
    """The :class:`~egopool.publish.commit.Publication` a journal describes (for its roll-forward: no local
    files, no blocks: ``stats.json`` is rebuilt)."""
    ep = doc.get("episode")
    fields = doc.get("upload_fields")
    new_info = doc.get("new_info")
    tasks = doc.get("tasks_jsonl")
    return Publication(str(doc["task"]), int(doc["index"]), [], (Path(), str(doc["commit"])), declarations_of(doc),
                       None, ep if isinstance(ep, dict) else None, dict(fields) if isinstance(fields, dict) else {},
                       dict(new_info) if isinstance(new_info, dict) else None,
                       tasks.encode("utf-8") if isinstance(tasks, str) and tasks else None)


def recover(store: Store, owner: str, record: Record | None = None, *, task: str | None = None,
            stale_after: float = STALE_AFTER, now: float | None = None) -> list[str]:
    """The sweep (module docstring) of ``task``'s journals (None: every task's); one line per journal handled.

    Raises
    ------
    StorageError
        The store failed (``ObjectStoreError``: the bucket cannot be reached).
    """
    now = time.time() if now is None else now
    lines: list[str] = []
    undone: set[str] = set()
    for key, doc in list(journals(store, task)):
        if doc.get("op", "publish") != "publish":
            continue  # a claim of `delete` / `repair` / `backfill` (decisions O35): its own command finishes it
        mine = doc.get("owner") == owner
        created = doc.get("created_at")
        age = now - float(created) if isinstance(created, (int, float)) else stale_after
        if not mine and age < stale_after:
            continue  # another live writer's publish in progress
        name, n = str(doc["task"]), int(doc["index"])
        if store.exists(str(doc["commit"])):
            problem = finish(store, [publication_of(doc)], lambda s: None, record)
            lines.append(f"{name}: finished the interrupted publish of episode {n} into {store.uri}" +
                         (f" ({problem})" if problem else ""))
        else:
            keys = [str(k) for k in doc["files"] if isinstance(k, str) and k != doc["commit"]]
            remove(store, keys)
            remove(store, [key])
            undone.update(keys)
            lines.append(f"{name}: rolled back the interrupted publish of episode {n} into {store.uri}")
    if task is None:
        lines += _abort_multipart(store, undone, now, stale_after)
    return lines


def _abort_multipart(store: Store, undone: set[str], now: float, stale_after: float) -> list[str]:
    """A bucket's incomplete multipart uploads of keys undone here or older than ``stale_after`` (none elsewhere)."""
    from ..storage.s3_store import S3Store

    if not isinstance(store, S3Store):
        return []
    out = []
    for key, upload_id, started in store.bucket.incomplete_uploads(""):
        if key in undone or now - started > stale_after:
            store.bucket.abort_upload(key, upload_id)
            out.append(f"aborted an incomplete multipart upload of {store.url(key)}")
    return out
