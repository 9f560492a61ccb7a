"""Publish journals: the claim of an episode N and the record of what its publish writes (docs/decisions.md O12).

A journal is the object ``.egopool-server/journals/<sha1(task)[:20]>/<N:09d>.json`` of a store
(:class:`~egopool.storage.Store`: a directory or ``s3://bucket/prefix``), beside the store's tasks
(a dot prefix: readers skip it, file_format.md §11). It is created with ``PutMode.CREATE``: among
every pooling server and ``egopool sync`` writing into the store, one wins episode N of a task.
A journal is deleted only after its episode's row (the commit object) exists, so a claim that wins
after an earlier publish of N finished finds that row and withdraws (:func:`claim`).

The document (JSON object): ``task``, ``index`` (N), ``owner`` (the writer's id), ``created_at``
(Unix s), ``files`` (every key the publish writes, relative to the store root, its row last),
``commit`` (the row's key), and what the roll-forward needs: ``declarations``, ``episode`` and
``upload_fields`` (the server's database row), ``new_info`` / ``tasks_jsonl`` (a task being created).
``egopool ls`` / ``validate`` read these journals (U16, O20: :mod:`egopool.meta.server_imports`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import EgopoolError, FormatError
from ..storage import PreconditionFailed, PutMode, Store

__all__ = ["JOURNALS", "STALE_AFTER", "claim", "journal_doc", "journal_key", "journals", "json_bytes",
           "new_owner_id", "read_journal", "remove", "task_hash"]

JOURNALS = ".egopool-server/journals"
#: a journal of another owner is treated as dead after this long (s): a publish takes seconds to minutes
STALE_AFTER = 6 * 3600.0


def task_hash(task: str) -> str:
    """The journal folder of a task: 20 hex of sha1 (task names may hold any character)."""
    return hashlib.sha1(task.encode("utf-8")).hexdigest()[:20]


def journal_key(task: str, index: int) -> str:
    """The journal / claim object of episode N of ``task`` (relative to the store root)."""
    return f"{JOURNALS}/{task_hash(task)}/{index:09d}.json"


def json_bytes(obj: Any, *, indent: int | None) -> bytes:
    """The bytes :func:`egopool._atomic.atomic_write_json` writes (UTF-8, no NaN, final newline).

    Raises
    ------
    FormatError
        ``obj`` holds NaN or Infinity.
    """
    try:
        return (json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False) + "\n").encode("utf-8")
    except ValueError as exc:
        raise FormatError(f"refusing to write NaN/Infinity into JSON ({exc})") from exc


def journal_doc(task: str, index: int, owner: str, keys: list[str], row_key: str, **extra: Any) -> dict[str, Any]:
    """The journal's document: task, N, owner, creation time (s), every key (the row last), the commit key."""
    return {"task": task, "index": index, "owner": owner, "created_at": time.time(), "files": keys,
            "commit": row_key, **extra}


def new_owner_id() -> str:
    """A fresh owner id for journals (a server's is kept in its state directory)."""
    return f"{os.uname().nodename}-{uuid.uuid4().hex[:12]}"


def claim(store: Store, task: str, index: int, doc: Mapping[str, Any]) -> bool:
    """Claim episode N of ``task`` for one publish: True when won (module docstring).

    ``doc`` (:func:`journal_doc`) is created as the journal; when N's row (``doc["commit"]``) turns out
    to exist already, or N was deleted (its tombstone, :func:`egopool.meta.retired.retired`: decisions O37),
    the claim is withdrawn.

    Raises
    ------
    StorageError
        The store cannot be written (``ObjectStoreError`` for a bucket).
    """
    key = journal_key(task, index)
    try:
        store.put(key, json_bytes(dict(doc), indent=None), mode=PutMode.CREATE)
    except PreconditionFailed:
        return False
    if store.exists(str(doc["commit"])):  # N was published (and its journal deleted) before our claim
        remove(store, [key])
        return False
    from ..meta.retired import retired_key

    if store.exists(f"{task}/{retired_key(index)}"):  # N was deleted from a bucket task: never handed out again
        remove(store, [key])
        return False
    return True


def remove(store: Store, keys: Sequence[str]) -> None:
    """Delete ``keys``; in a directory store also the directories that left empty, up to the store's root (a
    bucket has no empty "directories": a rolled-back publish leaves a directory store as a bucket, as before)."""
    store.delete(keys)
    from ..storage.directory_store import DirectoryStore

    if not isinstance(store, DirectoryStore):
        return
    root = store.root
    keep = {root, root / ".egopool-server", root / JOURNALS}
    for d in sorted({p.parent for k in keys if (p := store.local_path(k)) is not None},
                    key=lambda d: len(d.parts), reverse=True):
        while d not in keep and root in d.parents:
            try:
                d.rmdir()
            except OSError:
                break
            d = d.parent


def read_journal(store: Store, key: str) -> dict[str, Any] | None:
    """The journal document at ``key``, or None when it is gone or not a journal (written whole by one put,
    so an unreadable one was never written through)."""
    try:
        got = store.get(key)
    except EgopoolError:
        return None
    if got is None:
        return None
    try:
        doc = json.loads(got[0].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    ok = isinstance(doc, dict) and isinstance(doc.get("task"), str) and isinstance(doc.get("index"), int) and \
        isinstance(doc.get("files"), list) and isinstance(doc.get("commit"), str)
    return doc if ok else None


def journals(store: Store, task: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key, document)`` of every readable journal of ``task`` (None: of every task), by key."""
    prefix = f"{JOURNALS}/{task_hash(task)}/" if task is not None else JOURNALS + "/"
    for o in store.list(prefix):
        if not o.key.endswith(".json") or o.key[len(JOURNALS) + 1:].count("/") != 1:
            continue  # <hash>/<N>.json only (a pre-issue-24 directory journal, journals/import-*.json, is not one)
        doc = read_journal(store, o.key)
        if doc is not None and (task is None or doc["task"] == task):
            yield o.key, doc
