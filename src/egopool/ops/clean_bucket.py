"""``egopool repair clean s3://bucket/prefix/task``: what killed bucket writers left (file_format.md §2, §9, §11).

A bucket task holds no pids, dot-temps or reservations (those are a local writer's, O7); what a
killed writer leaves there is:

* **journals of dead writers** (``<prefix>/.egopool-server/journals/<sha1(task)[:20]>/<N>.json``,
  O12): a publish of a server or ``egopool sync`` is finished (row present) or rolled back (row
  absent) by :func:`egopool.publish.recover`, called here for the task; an
  ``egopool delete`` is rolled forward (:mod:`egopool.ops.delete_bucket`); the claim a
  ``repair force-scale`` / ``keypoints backfill`` left is released (its object writes are atomic:
  the old or the new object is there). Only journals older than the stale limit (default 6 h, the
  server's own) are touched: a younger one may belong to a live writer;
* **incomplete multipart uploads** under the task older than the stale limit: aborted (their parts
  are stored and billed, and no reader sees them);
* **orphan objects of an uncommitted N**: ``data/`` / ``videos/`` objects of an N that has no row
  and no journal (its writer died after the journal was gone, or a copy was interrupted): deleted.
  They are listed *before* the journals and the rows, so an N whose publish is under way (journal
  created before its first object) is never taken for an orphan.

``--dry-run`` lists all of it and writes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ._common import path_regex
from .task_store import BucketTask, Claim, open_task_store, pause, task_claims

__all__ = ["BucketCleanReport", "clean_bucket_task"]

#: Journals and uploads younger than this (s) may be a live writer's: left alone (the server's STALE_AFTER).
STALE_AFTER = 6 * 3600.0


@dataclass
class BucketCleanReport:
    """What :func:`clean_bucket_task` found and did (or would do, ``dry_run``).

    Attributes
    ----------
    journals:
        One line per journal handled (``finished`` / ``rolled back`` / ``released``).
    in_progress:
        N of journals younger than the stale limit (left alone).
    uploads:
        Keys of the incomplete multipart uploads aborted.
    orphans:
        Task-relative keys of orphan objects deleted.
    problems:
        What could not be done.
    """

    uri: str
    dry_run: bool
    journals: list[str] = field(default_factory=list)
    in_progress: list[int] = field(default_factory=list)
    uploads: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing was left undone."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``--json``)."""
        return {"task": self.uri, "dry_run": self.dry_run, "ok": self.ok, "journals": self.journals,
                "in_progress": self.in_progress, "uploads": self.uploads, "orphans": self.orphans,
                "problems": self.problems}



def _objects_by_n(bt: BucketTask) -> dict[int, list[str]]:
    """N -> its ``data/`` and ``videos/`` keys (two LISTs of the whole task, 1 request per 1000 objects)."""
    out: dict[int, list[str]] = {}
    for template in (bt.layout.data_path, bt.layout.video_path):
        prefix, rx = path_regex(template)
        for m in bt.store.list(prefix + "/" if prefix else ""):
            hit = rx.match(m.key) or rx.match(m.key.rsplit("/", 1)[0])
            if hit:
                out.setdefault(bt.layout.index_of(int(hit.group("c")), int(hit.group("f"))), []).append(m.key)
    return out


def _rows(bt: BucketTask) -> set[int]:
    prefix, rx = path_regex(bt.layout.episodes_path)
    found: set[int] = set()
    for m in bt.store.list(prefix + "/" if prefix else ""):
        hit = rx.match(m.key)
        if hit:
            found.add(bt.layout.index_of(int(hit.group("c")), int(hit.group("f"))))
    return found


def _handle_own(bt: BucketTask, c: Claim, dry_run: bool) -> str:
    """A journal of an ``egopool`` command on the task (delete, force-scale, backfill)."""
    if c.op == "delete":
        if not dry_run:
            from .delete_bucket import _roll_forward

            _roll_forward(bt, c.index, c)
        return f"{'would finish' if dry_run else 'finished'} the interrupted delete of episode {c.index}"
    if not dry_run:
        bt.parent.delete([c.key])
    return f"{'would release' if dry_run else 'released'} the claim of episode {c.index} left by a killed {c.op}"


def clean_bucket_task(uri: str, *, dry_run: bool = False, stale_after: float = STALE_AFTER,
                      now: float | None = None) -> BucketCleanReport:
    """Clean up after killed writers in the bucket task ``uri`` (module docstring).

    Parameters
    ----------
    uri:
        ``s3://bucket/prefix/task``.
    dry_run:
        Only list; write nothing.
    stale_after:
        Seconds after which a journal or multipart upload counts as a dead writer's.

    Returns
    -------
    BucketCleanReport

    Raises
    ------
    ObjectStoreError, FormatError
        No such bucket, not a task, the bucket cannot be reached.
    """
    from ..publish import recover
    from ..storage.s3_store import S3Store

    bt = open_task_store(uri, "repair clean")
    assert isinstance(bt.parent, S3Store)
    now = time.time() if now is None else now
    report = BucketCleanReport(bt.uri, dry_run)
    objects = _objects_by_n(bt)  # first: an object seen here had its journal created before it (O12)
    claims = task_claims(bt)
    rows = _rows(bt)
    publishes = False
    for c in claims:
        if now - float(c.doc.get("created_at") or 0) < stale_after:
            report.in_progress.append(c.index)
        elif c.op == "publish":
            publishes = True
            if dry_run:
                done = "finish" if bt.parent.exists(str(c.doc.get("commit") or "")) else "roll back"
                report.journals.append(f"would {done} the interrupted publish of episode {c.index}")
        else:
            report.journals.append(_handle_own(bt, c, dry_run))
    if publishes and not dry_run:
        # the server's own sweep; its owner is fresh, so only journals older than stale_after are taken
        report.journals += [line.split(": ", 1)[-1] for line in
                            recover(bt.parent, bt.owner, None, stale_after=stale_after, now=now, task=bt.name)]
    pause("clean", "journals")
    for key, upload_id, started in bt.parent.bucket.incomplete_uploads(f"{bt.name}/"):
        if now - started >= stale_after:
            report.uploads.append(key[len(bt.name) + 1:])
            if not dry_run:
                bt.parent.bucket.abort_upload(key, upload_id)
    claimed = {c.index for c in claims}
    for n, keys in sorted(objects.items()):
        if n not in rows and n not in claimed:
            report.orphans += sorted(keys)
            if not dry_run:
                bt.store.delete(keys)
    return report
