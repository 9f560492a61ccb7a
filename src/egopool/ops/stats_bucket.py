"""``egopool stats recalc s3://...``: rebuild a bucket task's ``stats.json`` while servers publish into it (decision O17).

The per-episode blocks are computed first (in-process or one Ray task per episode, each
worker reading its episode's data parquet from the bucket: :func:`egopool.ops.stats_ops._blocks_of`).
Then, in this order: GET ``stats.json`` (its ETag), LIST the committed rows, LIST the task's
publish journals (:mod:`egopool.publish.journal`). A journal means an episode whose
``stats.json`` merge may not have happened yet: the recalc waits and lists again (bounded),
because its document would count that episode and the publisher's merge would count it a
second time. Without journals every listed episode's merge is done (a journal is deleted after
its merge), and an episode committing later merges onto the new document itself. The new
document is PUT with ``If-Match`` on the ETag read first, so a merge that landed meanwhile
makes the PUT fail and the whole reconcile run again: no episode is lost or counted twice.
The previous document is kept under ``<task>/.egopool_backup/stats-recalc-<time>/meta/stats.json``
(a dot prefix: readers skip it, §11).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from typing import Any

from ..errors import OperationError
from ..jobs.executor import Executor
from ..meta.info import read_info
from ..publish import JOURNALS, json_bytes, task_hash
from ..storage import ObjectPath, PreconditionFailed, PutMode, require_conditional_writes
from ..storage.s3_store import S3Store
from ._common import Progress
from .stats_ops import (BlockDiff, StatsRecalcReport, _blocks_of, _document, _raise_unreadable, _reconcile,
                        compare_stats)

__all__ = ["recalc_bucket_stats"]

#: rounds of (list, compute what changed, conditional PUT) before giving up, and seconds between them
ROUNDS = 60
WAIT_S = 1.0


def recalc_bucket_stats(root: ObjectPath, *, dry_run: bool = False, progress: Progress | None = None,
                        executor: Executor[Any, Any, Any] | None = None) -> StatsRecalcReport:
    """Rebuild ``stats.json`` of the bucket task ``root`` (module docstring; file_format.md §4).

    Raises
    ------
    FormatError
        ``info.json`` or data parquets cannot be read (every such episode named; nothing written).
    OperationError
        Publishes kept the task busy (journals present, or the conditional PUT lost) for every round.
    ObjectStoreError
        The bucket cannot be reached.
    """
    store_uri, _, task = str(root).rstrip("/").rpartition("/")
    bucket = S3Store(store_uri)
    if not dry_run:
        require_conditional_writes(bucket, "stats recalc in a bucket")
    rel = f"{task}/meta/stats.json"
    info = read_info(root)
    per_episode = _blocks_of(root, info, executor, progress)
    busy = ""
    for _ in range(ROUNDS):
        got = bucket.get(rel)
        info_now = read_info(root)
        if info_now.get("sensors") != info.get("sensors"):
            per_episode, info = {}, info_now
        per_episode = _reconcile(root, info_now, per_episode)  # LISTs the rows: episodes committed now
        journals = list(bucket.list(f"{JOURNALS}/{task_hash(task)}/"))
        if journals and not dry_run:
            busy = journals[0].key
            time.sleep(WAIT_S)
            continue
        fresh, n, unreadable = _document(per_episode)
        _raise_unreadable(unreadable)
        stored: dict[str, Any] = {}
        readable = True
        if got is not None:
            try:
                doc = json.loads(got[0].decode("utf-8"))
                stored = doc if isinstance(doc, dict) else {}
                readable = isinstance(doc, dict)
            except (UnicodeDecodeError, ValueError):
                readable = False
        changes = compare_stats(stored, fresh, rtol=0.0, atol=0.0)
        if not readable:
            changes.insert(0, BlockDiff("*", "block", None, None, "stats.json is not valid JSON"))
        report = StatsRecalcReport(root, dry_run, n, changes)  # type: ignore[arg-type]
        if dry_run or (not changes and got is not None):
            return report
        try:
            if got is not None:
                stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
                backup = f"{task}/.egopool_backup/stats-recalc-{stamp}/meta/stats.json"
                bucket.put(backup, got[0])
                bucket.put(rel, json_bytes(fresh, indent=None), mode=PutMode.UPDATE, version=got[1])
            else:
                bucket.put(rel, json_bytes(fresh, indent=None), mode=PutMode.CREATE)
        except PreconditionFailed:
            busy = "stats.json (changed by a publish meanwhile)"
            continue
        report.written = True
        return report
    if busy.startswith(JOURNALS):
        raise OperationError(f"{root}: an episode is being published into the task ({bucket.url(busy)}) through "
                             f"{ROUNDS} rounds; stats.json was not rewritten",
                             hint="try again later; a journal left by a killed server is swept when that server "
                                  "starts again (or after 6 h by any server)")
    raise OperationError(f"{root}: {busy} through {ROUNDS} rounds; stats.json was not rewritten",
                         hint="try again when fewer uploads arrive")

